package starve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// TestMain removes the binary built for the package's tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}

// hotsniffBin builds ./cmd/hotsniff once per test binary (HOTSNIFF_BIN
// overrides it).
func hotsniffBin(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("HOTSNIFF_BIN"); bin != "" {
		return bin
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hotsniff-starve")
		if err != nil {
			buildErr = err
			return
		}
		builtBin, buildErr = testutil.BuildHotsniff(dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// daemon is one `hotsniff run` inside a Pair's namespace.
type daemon struct {
	cmd    *exec.Cmd
	http   string
	stderr *testutil.Buffer
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

func (d *daemon) log() string { return strings.Join(d.stderr.Lines(), "\n") }

// startDaemon runs hotsniff run on the namespace's interface, publishing to
// the channel Redis at ch. `ip netns exec` execs the daemon, so the PID is
// the daemon's own (signals reach it).
func startDaemon(t *testing.T, p *netnstest.Pair, ch netip.AddrPort, args ...string) *daemon {
	t.Helper()
	port := 19500 + int(os.Getpid()%400)
	httpAddr := fmt.Sprintf("%s:%d", p.NSIP, port)
	args = append([]string{"run", "--iface", p.NSIface, "--capture", "tc", "--listen", httpAddr, "--node", "starve",
		"--redis-url", "redis://" + ch.String()}, args...)
	cmd := p.Command(context.Background(), hotsniffBin(t), args...)
	d := &daemon{cmd: cmd, http: "http://" + httpAddr, stderr: &testutil.Buffer{}}
	cmd.Stdout = io.Discard
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscallCONT)
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(d.http + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not ready after 60s\n%s", d.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scrape returns /metrics as name{labels} -> value.
func (d *daemon) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get(d.http + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v\n%s", err, d.log())
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, "hotsniff_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

// sum adds the series of metric name (any labels).
func sum(m map[string]float64, name string) float64 {
	var s float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}

// ev is a received channel event.
type ev struct {
	at   time.Time
	Type string  `json:"type"`
	Key  string  `json:"key"`
	QPS  float64 `json:"qps"`
	Samp float64 `json:"sample"`
	// Reason is why a hot key is hot: "qps", "bytes" or "qps,bytes".
	Reason string `json:"reason"`
}

// subscriber collects every event published on the channel, batched (v2)
// messages included.
type subscriber struct {
	mu  sync.Mutex
	evs []ev
	c   net.Conn
}

func subscribe(t *testing.T, ch netip.AddrPort, channel string) *subscriber {
	t.Helper()
	c, err := net.Dial("tcp", ch.String())
	if err != nil {
		t.Fatal(err)
	}
	s := &subscriber{c: c}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(netnstest.RESP("SUBSCRIBE", channel)); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(c)
	go func() {
		for {
			parts, err := readArray(rd)
			if err != nil {
				return
			}
			if len(parts) != 3 || parts[0] != "message" {
				continue
			}
			s.add(parts[2])
		}
	}()
	return s
}

// add decodes one message: a single event object, or a batch.
func (s *subscriber) add(msg string) {
	now := time.Now()
	var one ev
	var batch struct {
		Events []ev `json:"events"`
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if json.Unmarshal([]byte(msg), &batch) == nil && len(batch.Events) > 0 {
		for _, e := range batch.Events {
			e.at = now
			s.evs = append(s.evs, e)
		}
		return
	}
	if json.Unmarshal([]byte(msg), &one) == nil && one.Type != "" {
		one.at = now
		s.evs = append(s.evs, one)
	}
}

func (s *subscriber) events() []ev {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ev(nil), s.evs...)
}

// readArray reads one RESP array of bulk strings or integers.
func readArray(rd *bufio.Reader) ([]string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[0] != '*' {
		return nil, nil
	}
	n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
	out := make([]string, 0, n)
	for range n {
		h, err := rd.ReadString('\n')
		if err != nil {
			return nil, err
		}
		switch h[0] {
		case '$':
			l, _ := strconv.Atoi(strings.TrimSpace(h[1:]))
			b := make([]byte, l+2)
			if _, err := io.ReadFull(rd, b); err != nil {
				return nil, err
			}
			out = append(out, string(b[:l]))
		default:
			out = append(out, strings.TrimSpace(h[1:]))
		}
	}
	return out, nil
}

// reader reads one key over conns connections (pipeline depth pipe) until
// ctx ends, counting the reads answered per 100 ms slot since start. Each
// connection is replaced by a new one every `renew` (a pool recycling its
// connections): flow sampling keeps or skips a connection by its address
// and port, so every new pair is another draw.
type reader struct {
	start time.Time
	mu    sync.Mutex
	slots []int64
	total atomic.Int64
}

func readKey(ctx context.Context, t *testing.T, srv netip.AddrPort, key string, conns, pipe int, renew time.Duration) (*reader, *sync.WaitGroup) {
	r := &reader{start: time.Now()}
	var wg sync.WaitGroup
	req := bytes.Repeat(netnstest.RESP("GET", key), pipe)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				r.session(ctx, t, srv, req, pipe, renew)
			}
		}()
	}
	return r, &wg
}

// session reads over one connection for at most d.
func (r *reader) session(ctx context.Context, t *testing.T, srv netip.AddrPort, req []byte, pipe int, d time.Duration) {
	c, err := net.Dial("tcp", srv.String())
	if err != nil {
		t.Errorf("dial: %v", err)
		return
	}
	defer c.Close()
	rd := bufio.NewReaderSize(c, 64<<10)
	for end := time.Now().Add(d); ctx.Err() == nil && time.Now().Before(end); {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(req); err != nil {
			return
		}
		for range pipe {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			if line[0] == '$' && line[1] != '-' {
				n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
				if _, err := rd.Discard(n + 2); err != nil {
					return
				}
			}
		}
		r.add(time.Now(), int64(pipe))
	}
}

func (r *reader) add(at time.Time, n int64) {
	i := int(at.Sub(r.start) / (100 * time.Millisecond))
	r.mu.Lock()
	for len(r.slots) <= i {
		r.slots = append(r.slots, 0)
	}
	r.slots[i] += n
	r.mu.Unlock()
	r.total.Add(n)
}

// rate is the key's read rate over the second before at.
func (r *reader) rate(at time.Time) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := int(at.Sub(r.start) / (100 * time.Millisecond))
	var n int64
	for i := end - 10; i < end; i++ {
		if i >= 0 && i < len(r.slots) {
			n += r.slots[i]
		}
	}
	return float64(n)
}

// minRate is the lowest one-second read rate between from and to.
func (r *reader) minRate(from, to time.Time) float64 {
	lo := -1.0
	for at := from.Add(time.Second); !at.After(to); at = at.Add(100 * time.Millisecond) {
		if v := r.rate(at); lo < 0 || v < lo {
			lo = v
		}
	}
	return lo
}

// startProc starts a process (in the calling namespace) that the test
// stops by its PID at cleanup.
func startProc(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { stopProc(cmd) })
	return cmd
}

func stopProc(cmd *exec.Cmd) {
	if cmd.ProcessState == nil && cmd.Process != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// command sends one command to srv on a new connection, closed at the
// test's end, and returns the reader of its reply.
func command(t *testing.T, srv netip.AddrPort, args ...string) *bufio.Reader {
	t.Helper()
	c, err := net.Dial("tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(netnstest.RESP(args...)); err != nil {
		t.Fatal(err)
	}
	return bufio.NewReader(c)
}

// setKey sets key to value on srv.
func setKey(t *testing.T, srv netip.AddrPort, key, value string) {
	t.Helper()
	if line, err := command(t, srv, "SET", key, value).ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("SET %s: %q %v", key, line, err)
	}
}

// serverGets is the server's count of GET calls (INFO commandstats).
func serverGets(t *testing.T, srv netip.AddrPort) int64 {
	t.Helper()
	rd := command(t, srv, "INFO", "commandstats")
	h, err := rd.ReadString('\n')
	if err != nil || h[0] != '$' {
		t.Fatalf("INFO: %q %v", h, err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(h[1:]))
	b := make([]byte, n+2)
	if _, err := io.ReadFull(rd, b); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_get:calls="); ok {
			v, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return v
		}
	}
	return 0
}
