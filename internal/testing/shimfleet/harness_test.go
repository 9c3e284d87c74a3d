package shimfleet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/redis/go-redis/v9"
)

var repoRoot, goBin = testutil.RepoRoot, testutil.GoBin

// build is one binary built once per test binary.
type build struct {
	once sync.Once
	path string
	err  error
}

var builds = map[string]*build{"hotsniff": {}, "adapter": {}}

// goBuild builds once per test binary: "hotsniff" is the daemon, "adapter"
// the conformance suite's test binary, which runs the Go shim's adapter
// when started with HOTSNIFF_CONFORMANCE_ADAPTER=1. Different binaries may
// build at the same time.
func goBuild(t testing.TB, what string) string {
	t.Helper()
	p, err := buildPath(what)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// buildPath is goBuild for any goroutine.
func buildPath(what string) (string, error) {
	b, ok := builds[what]
	if !ok {
		return "", fmt.Errorf("unknown build %q", what)
	}
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "shimfleet-build-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, what)
		cmd := exec.Command(goBin(), "build", "-o", b.path, "./cmd/hotsniff")
		if what == "adapter" {
			cmd = exec.Command(goBin(), "test", "-c", "-o", b.path, "./internal/testing/conformance")
		}
		cmd.Dir = repoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("%v: %v\n%s", cmd.Args, err, out)
		}
	})
	return b.path, b.err
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, b := range builds {
		if b.path != "" {
			os.RemoveAll(filepath.Dir(b.path))
		}
	}
	os.Exit(code)
}

// shim is one shim as an application process: its conformance adapter.
type shim struct {
	name    string
	mode    string // the adapter's client mode for a cluster
	prepare func(t testing.TB)
	argv    func(t testing.TB, cfg string) []string
	env     []string
}

var (
	nodeOnce sync.Once
	nodeErr  error
)

func pythonBin() string {
	if p := os.Getenv("HOTSNIFF_PYTHON"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

// shims are the three shims, each on its library's cluster client (mode
// "cluster": go-redis ClusterClient, redis-py RedisCluster, ioredis Cluster,
// node-redis createCluster) or plain client (standalone). HOTSNIFF_SHIMFLEET_SHIMS=go,node
// runs only some.
func shims(t testing.TB, cluster bool) []shim {
	client := filepath.Join(repoRoot(), "client")
	nodeDir := filepath.Join(client, "node")
	pyMode, goMode := "sync", "pool"
	if cluster {
		pyMode, goMode = "cluster", "cluster"
	}
	nodeMode := "single"
	if cluster {
		nodeMode = "cluster"
	}
	all := []shim{
		{name: "go", mode: goMode,
			prepare: func(t testing.TB) { goBuild(t, "adapter") },
			argv: func(t testing.TB, cfg string) []string {
				return []string{goBuild(t, "adapter"), "-test.run=^$", cfg}
			},
			env: []string{"HOTSNIFF_CONFORMANCE_ADAPTER=1"}},
		{name: "python", mode: pyMode,
			prepare: func(t testing.TB) {
				t.Helper()
				out, err := exec.Command(pythonBin(), "-c", "import redis").CombinedOutput()
				if err != nil {
					netnstest.Skip(t, "%s cannot import redis-py (apt-get install python3-redis): %v: %s", pythonBin(), err, out)
				}
			},
			argv: func(_ testing.TB, cfg string) []string {
				return []string{pythonBin(), "-m", "hotsniff_shim.conformance_adapter", cfg}
			},
			env: []string{"PYTHONPATH=" + filepath.Join(client, "python"), "PYTHONDONTWRITEBYTECODE=1"}},
		nodeShim("node-ioredis", "ioredis", nodeDir, nodeMode),
		nodeShim("node-redis", "node-redis", nodeDir, nodeMode),
	}
	only := os.Getenv("HOTSNIFF_SHIMFLEET_SHIMS")
	var out []shim
	for _, s := range all {
		if only == "" || strings.Contains(","+only+",", ","+s.name+",") {
			out = append(out, s)
		}
	}
	return out
}

// nodeShim is the Node shim on one client library (HOTSNIFF_NODE_CLIENT).
func nodeShim(name, lib, nodeDir, mode string) shim {
	return shim{name: name, mode: mode,
		prepare: func(t testing.TB) {
			t.Helper()
			if _, err := exec.LookPath("node"); err != nil {
				netnstest.Skip(t, "node not installed (apt-get install nodejs npm)")
			}
			if _, err := os.Stat(filepath.Join(nodeDir, "node_modules")); err != nil {
				netnstest.Skip(t, "client/node has no node_modules: run `npm ci` there")
			}
			nodeOnce.Do(func() {
				cmd := exec.Command("npm", "run", "--silent", "build")
				cmd.Dir = nodeDir
				if out, err := cmd.CombinedOutput(); err != nil {
					nodeErr = fmt.Errorf("npm run build in client/node: %v: %s", err, out)
				}
			})
			if nodeErr != nil {
				t.Fatal(nodeErr)
			}
		},
		argv: func(_ testing.TB, cfg string) []string {
			return []string{"node", filepath.Join(nodeDir, "dist", "conformance-adapter.js"), cfg}
		},
		env: []string{"HOTSNIFF_NODE_CLIENT=" + lib}}
}

// config is the adapter's configuration (the conformance suite's
// adapterConfig, with the fields these tests use).
type config struct {
	Cache        string   `json:"cache"`
	ChannelAddr  string   `json:"channel_addr"`
	Channel      string   `json:"channel"`
	LocalTTLms   int      `json:"local_ttl_ms,omitempty"`
	StaleGraceMs int      `json:"stale_grace_ms,omitempty"`
	LingerMs     int      `json:"linger_ms,omitempty"`
	MaxEntries   int      `json:"max_entries,omitempty"`
	Mode         string   `json:"mode,omitempty"`
	ClusterAddrs []string `json:"cluster_addrs,omitempty"`
	Tracking     bool     `json:"tracking,omitempty"`
}

// app is one running adapter process.
type app struct {
	t      testing.TB
	name   string
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *testutil.Buffer
	done   chan struct{}
}

func startApp(t testing.TB, s shim, cfg config) *app {
	t.Helper()
	s.prepare(t)
	cfg.Mode = s.mode
	b, _ := json.Marshal(cfg)
	argv := s.argv(t, string(b))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), s.env...)
	a := &app{t: t, name: s.name, cmd: cmd, stderr: &testutil.Buffer{Max: 1 << 20}, done: make(chan struct{})}
	cmd.Stderr = a.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	a.in, a.out = in, bufio.NewReaderSize(outp, 1<<20)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s adapter: %v", s.name, err)
	}
	go func() { _ = cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		a.stop()
		if t.Failed() {
			t.Logf("%s adapter stderr (tail):\n%s", s.name, tail(a.stderr.String(), 4000))
		}
	})
	ready := a.recv(60 * time.Second)
	if ready["ready"] != true {
		t.Fatalf("%s adapter not ready: %v\n%s", s.name, ready, a.stderr.String())
	}
	return a
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// stop closes the adapter's stdin (it closes its shim and exits) and waits
// for it; it kills the process only if it does not exit.
func (a *app) stop() {
	_ = a.in.Close()
	select {
	case <-a.done:
	case <-time.After(5 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
}

func (a *app) send(req map[string]any) {
	a.t.Helper()
	b, _ := json.Marshal(req)
	if _, err := a.in.Write(append(b, '\n')); err != nil {
		a.t.Fatalf("%s adapter write: %v\n%s", a.name, err, a.stderr.String())
	}
}

func (a *app) recv(timeout time.Duration) map[string]any {
	a.t.Helper()
	type res struct {
		line []byte
		err  error
	}
	ch := make(chan res, 1)
	go func() { l, err := a.out.ReadBytes('\n'); ch <- res{l, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			a.t.Fatalf("%s adapter: %v\n%s", a.name, r.err, tail(a.stderr.String(), 4000))
		}
		var out map[string]any
		if err := json.Unmarshal(r.line, &out); err != nil {
			a.t.Fatalf("%s adapter reply %q: %v", a.name, r.line, err)
		}
		if e, ok := out["error"]; ok {
			a.t.Fatalf("%s adapter error: %v\n%s", a.name, e, tail(a.stderr.String(), 4000))
		}
		return out
	case <-time.After(timeout):
		a.t.Fatalf("%s adapter did not answer in %v\n%s", a.name, timeout, tail(a.stderr.String(), 4000))
		return nil
	}
}

func (a *app) do(req map[string]any) map[string]any {
	a.t.Helper()
	a.send(req)
	ms, _ := req["ms"].(int)
	return a.recv(60*time.Second + time.Duration(ms)*time.Millisecond)
}

// traceResult is the adapter's answer to a trace op.
type traceResult struct {
	reads, errors, nils int
	firstError          string
	last                map[string]int64 // value -> start (Unix ns) of the last read returning it
}

func parseTrace(m map[string]any) traceResult {
	num := func(k string) int { v, _ := m[k].(float64); return int(v) }
	r := traceResult{reads: num("reads"), errors: num("errors"), nils: num("nil"), last: map[string]int64{}}
	r.firstError, _ = m["first_error"].(string)
	if l, ok := m["last_ns"].(map[string]any); ok {
		for v, ns := range l {
			f, _ := ns.(float64)
			r.last[v] = int64(f)
		}
	}
	return r
}

// commandCalls sums INFO commandstats calls per command over addrs.
func commandCalls(t testing.TB, addrs []string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		info, err := c.Info(context.Background(), "commandstats").Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			rest, ok := strings.CutPrefix(line, "cmdstat_")
			if !ok {
				continue
			}
			name, fields, _ := strings.Cut(rest, ":")
			calls, _, _ := strings.Cut(strings.TrimPrefix(fields, "calls="), ",")
			n, _ := strconv.Atoi(calls)
			out[name] += n
		}
	}
	return out
}
