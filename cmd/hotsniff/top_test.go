package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/config"
	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/topview"
)

// runTopCLI runs `hotsniff top ARGS` in-process (stdout is a buffer, not a
// terminal: the plain table) and returns stdout, stderr and the exit code as
// runWith maps it.
func runTopCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	root := newRootCmd()
	if c, _, err := root.Find([]string{"top"}); err != nil || c == root {
		root.AddCommand(newTopCmd()) // until main.go registers it
	}
	var out, errb bytes.Buffer
	root.SetArgs(append([]string{"top"}, args...))
	root.SetOut(&out)
	root.SetErr(&errb)
	err := root.Execute()
	if err == nil {
		return out.String(), errb.String(), 0
	}
	fmt.Fprintf(&errb, "hotsniff: %v\n", err)
	var u usageError
	if errors.As(err, &u) || isCobraUsage(err) {
		return out.String(), errb.String(), 2
	}
	return out.String(), errb.String(), 1
}

const topDoc = `{"v":1,"node":"cache-node-3","ts":"2026-11-29T18:00:00.123456Z","hot_qps":1000,"keys":[
 {"v":1,"seq":7,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key":"item:7","qps":1200,"ttl_ms":60000,"ts":"2026-11-29T18:00:00Z","source":"detected","node":"cache-node-3"},
 {"v":1,"seq":9,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key":"item:42","qps":1843.5,"absorbed_qps":1800,"ttl_ms":60000,"ts":"2026-11-29T18:00:00Z","source":"detected","node":"cache-node-3"}]}`

func TestTopOnceHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/hotkeys" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, topDoc)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	out, errs, code := runTopCLI(t, "--addr", addr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want := "hotsniff top · " + addr + ` · node cache-node-3 · 2026-11-29T18:00:00.123456Z · 2 hot ≥1000 qps
  RATE  TREND  PROTO  SERVER         NS  STATE  SOURCE    LOCAL  BYTES/S  KEY
1843.5  █ ·    redis  10.0.0.5:6379  0   hot    detected  97%          -  item:42
1200.0  █ ·    redis  10.0.0.5:6379  0   hot    detected  -            -  item:7
`
	if out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
	out, _, code = runTopCLI(t, "--once", "--addr", srv.URL, "--sort", "key", "--filter", "item:7")
	if code != 0 || !strings.Contains(out, "item:7") || strings.Contains(out, "item:42") {
		t.Errorf("--sort key --filter item:7: exit %d\n%s", code, out)
	}
}

func TestTopOnceUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	out, errs, code := runTopCLI(t, "--once", "--addr", addr)
	if code != 1 || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	if want := "hotsniff: daemon unreachable: GET http://" + addr + "/hotkeys: "; !strings.HasPrefix(errs, want) || strings.Count(errs, "\n") != 1 {
		t.Errorf("stderr = %q, want one line starting %q", errs, want)
	}
}

func TestTopReplayOnce(t *testing.T) {
	out, errs, code := runTopCLI(t, "--replay", "--hot-qps", "1000", "--interval", "250ms", "../../testdata/redis/hotkey.pcap.gz")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "hotsniff top · replay hotkey.pcap.gz · ") {
		t.Fatalf("stdout:\n%s", out)
	}
	// At the end item:hot has cooled (it is read during the first 2 s only)
	// and is listed as cold; nothing else was ever hot.
	if fs := strings.Fields(lines[2]); len(fs) != 11 || fs[3] != "redis" || fs[4] != "127.0.0.1:6379" || fs[6] != "cold" || fs[10] != "item:hot" {
		t.Errorf("row = %q", lines[2])
	}
}

func TestTopUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--interval", "0s"},
		{"--interval", "soon"},
		{"--speed", "-1"},
		{"--sort", "qps"},
		{"--no-such-flag"},
		{"some.pcap"},
		{"--replay"},
		{"--replay", "--addr", "x:1", "a.pcap"},
		{"--replay", "--hot-qps", "1000", "--detector", "magic", "a.pcap"},
		{"--replay", "--hot-qps", "1000", "--port", "redis=notaport", "a.pcap"},
		{"--addr", "ftp://x:1"},
	} {
		out, errs, code := runTopCLI(t, args...)
		if code != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "hotsniff: ") {
			t.Errorf("top %q: exit %d, stdout %q, stderr %q; want exit 2 and one line", args, code, out, errs)
		}
	}
	_, errs, code := runTopCLI(t, "--replay", "--hot-qps", "1000", "no-such-file.pcap")
	if code != 1 || !strings.Contains(errs, "no-such-file.pcap") {
		t.Errorf("missing file: exit %d, %q", code, errs)
	}
}

// TestTopReadmeExample runs the README's `top --replay` example as written
// (from the repository root) and checks a viewer sees something before the
// replay ends: it runs at the recorded pace, item:hot shows hot in frames
// before the last, and --top lists keys below the threshold from the first
// frame on.
func TestTopReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, l := range strings.Split(string(readme), "\n") {
		if i := strings.Index(l, "go run ./cmd/hotsniff top --replay"); i >= 0 {
			l, _, _ = strings.Cut(l[i:], "#")
			args = strings.Fields(l)[4:] // after "go run ./cmd/hotsniff top"
			break
		}
	}
	if args == nil {
		t.Fatal("README has no `go run ./cmd/hotsniff top --replay` example")
	}
	for i, a := range args {
		if strings.HasPrefix(a, "testdata/") {
			args[i] = "../../" + a
		}
	}
	f := new(topFlags)
	cmd := newTopCmdWith(f)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	if err := loadSettings(cmd, f.cfg); err != nil {
		t.Fatal(err)
	}
	rs, err := newTopReplay(f, cmd.Flags().Args())
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if f.speed != 1 || f.top == 0 {
		t.Errorf("the example replays at speed %v with --top %d: a viewer sees only the end", f.speed, f.top)
	}
	rs.NoDelay()
	var frames []topview.Snapshot
	for {
		s, err := rs.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, s)
	}
	if len(frames) < 3 {
		t.Fatalf("%d frames", len(frames))
	}
	hotBefore := false
	for _, s := range frames[:len(frames)-1] {
		for _, e := range s.Keys {
			hotBefore = hotBefore || string(e.Key) == "item:hot"
		}
	}
	if !hotBefore {
		t.Error("item:hot is never hot before the last frame")
	}
	if n := len(frames[0].Keys) + len(frames[0].Warm); n < f.top {
		t.Errorf("first frame lists %d keys, want %d", n, f.top)
	}
}

// TestTopOnceHTTPSampled: a daemon whose capture samples connections
// serves its hot set on /hotkeys (the daemon's own handler) with each
// event's sampling rate (the sample field of the one event type); top says
// the rates are estimates and from which share of connections, marks each
// with ~, and still escapes what came from the wire.
func TestTopOnceHTTPSampled(t *testing.T) {
	cfg := config.Default()
	cfg.Detect.Node, cfg.Detect.HotQPS = "cache-node-3", 1000
	d := &daemon{cfg: &cfg}
	for _, k := range []struct {
		key string
		qps float64
	}{{"item:42", 1843.5}, {"evil\x1b]0;pwned\x07", 1200}} {
		d.hot = append(d.hot, event.Event{V: 1, Seq: 7, Type: event.TypeHot, Proto: "redis", Server: "10.0.0.5:6379", NS: "0",
			Key: []byte(k.key), QPS: k.qps, TTLms: 60000, TS: time.Now(), Source: event.SourceDetected, Sample: 0.1367})
	}
	srv := httptest.NewServer(http.HandlerFunc(d.hotkeys))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/hotkeys")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if bytes.Count(body, []byte(`"sample":0.1367`)) != 2 {
		t.Fatalf("/hotkeys without the sample field: %s", body)
	}
	addr := strings.TrimPrefix(srv.URL, "http://")
	out, errs, code := runTopCLI(t, "--addr", addr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	head, table, _ := strings.Cut(out, "\n")
	if !strings.HasPrefix(head, "hotsniff top · "+addr+" · node cache-node-3 · ") ||
		!strings.HasSuffix(head, " · 2 hot ≥1000 qps · sampling 13.7% of connections: ~ rates are estimates") {
		t.Errorf("header %q", head)
	}
	want := `   RATE  TREND  PROTO  SERVER         NS  STATE  SOURCE    LOCAL  BYTES/S  KEY
~1843.5  █ ·    redis  10.0.0.5:6379  0   hot    detected  -            -  item:42
~1200.0  █ ·    redis  10.0.0.5:6379  0   hot    detected  -            -  "evil\x1b]0;pwned\a"
`
	if table != want {
		t.Errorf("table:\n%s\nwant:\n%s", table, want)
	}
}
