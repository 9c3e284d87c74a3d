package perf

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

// buildHotsniff builds ./cmd/hotsniff once per test binary.
// measurement gates an opt-in measurement: it skips unless the environment
// variable gate is "1" (these runs take minutes and are not part of make
// test), requires root, and returns the rounds to run: HOTSNIFF_ROUNDS, or
// def.
func measurement(t testing.TB, gate string, def int) int {
	t.Helper()
	if os.Getenv(gate) != "1" {
		t.Skipf("set %s=1 to run the performance measurements (minutes)", gate)
	}
	netnstest.RequireRoot(t)
	if v, err := strconv.Atoi(os.Getenv("HOTSNIFF_ROUNDS")); err == nil && v > 0 {
		return v
	}
	return def
}

func buildHotsniff(t testing.TB) string {
	t.Helper()
	bin, err := testutil.BuildHotsniff(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// sniffer is one `hotsniff run` inside a Pair's namespace.
type sniffer struct {
	cmd     *exec.Cmd
	metrics string // http://NSIP:PORT/metrics
}

// freePort picks a TCP port for --listen inside the namespace.
func freePort(t testing.TB, p *netnstest.Pair) int {
	t.Helper()
	var port int
	err := p.Do(func() error {
		l, err := net.Listen("tcp", net.JoinHostPort(p.NSIP.String(), "0"))
		if err != nil {
			return err
		}
		port = l.Addr().(*net.TCPAddr).Port
		return l.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// startSniffer runs `hotsniff run` on the namespace's veth end in mode (tc
// or xdp) for the redis port and waits until /readyz answers. It is stopped
// with SIGTERM by stop, or killed in t.Cleanup.
func startSniffer(t testing.TB, bin string, p *netnstest.Pair, srv netip.AddrPort, mode string, extra ...string) *sniffer {
	t.Helper()
	return startSnifferOut(t, bin, p, srv, mode, nil, extra...)
}

// startSnifferOut is startSniffer with hotsniff's stdout (the events)
// written to stdout when not nil.
func startSnifferOut(t testing.TB, bin string, p *netnstest.Pair, srv netip.AddrPort, mode string, stdout io.Writer, extra ...string) *sniffer {
	t.Helper()
	var addr string
	var args []string
	if mode == "cgroup" {
		// The cgroup programs see every socket of the host, the namespace's
		// included; `ip netns exec` remounts /sys, hiding the cgroup
		// hierarchy, so this one runs in the host's namespace.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = l.Addr().String()
		l.Close()
		args = []string{"run", "--capture", "cgroup"}
	} else {
		addr = net.JoinHostPort(p.NSIP.String(), strconv.Itoa(freePort(t, p)))
		args = []string{"run", "--iface", p.NSIface, "--capture", mode}
	}
	args = append(append(args, "--port", "redis="+strconv.Itoa(int(srv.Port())), "--listen", addr, "--hot-qps", "1000", "--output", "jsonl"), extra...)
	// HOTSNIFF_RUN_ARGS adds flags to every run (compare --reply-copy 0,
	// the default reply heads and --capture-replies side by side).
	args = append(args, strings.Fields(os.Getenv("HOTSNIFF_RUN_ARGS"))...)
	var cmd *exec.Cmd
	if mode == "cgroup" {
		cmd = exec.Command(bin, args...)
	} else {
		// `ip netns exec` execs hotsniff: the pid is hotsniff's own.
		cmd = p.Command(context.Background(), bin, args...)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.Stdout = stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start hotsniff: %v", err)
	}
	s := &sniffer{cmd: cmd, metrics: "http://" + addr + "/metrics"}
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	})
	// Loading and verifying the programs takes seconds on a loaded machine.
	deadline := time.Now().Add(45 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("hotsniff not ready at %s: %v\n%s", addr, err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends hotsniff with SIGTERM and waits for it.
func (s *sniffer) stop(t testing.TB) {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("hotsniff exited with %v", err)
		}
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
		t.Errorf("hotsniff did not stop within 10s of SIGTERM")
	}
}

// cpuSeconds is the process's CPU time so far (procCPU).
func (s *sniffer) cpuSeconds(t testing.TB) float64 {
	t.Helper()
	return procCPU(t, s.cmd.Process.Pid)
}

// scrape reads /metrics into "name{labels}" -> value.
func (s *sniffer) scrape(t testing.TB) map[string]float64 {
	t.Helper()
	m, err := s.tryScrape()
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	return m
}

// tryScrape reads the daemon's metrics.
func (s *sniffer) tryScrape() (map[string]float64, error) {
	resp, err := http.Get(s.metrics)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, sc.Err()
}

// sum adds the series of one metric name.
func sum(m map[string]float64, name string) float64 {
	var s float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}

// series returns the value of the series of name whose labels contain sub.
func series(m map[string]float64, name, sub string) float64 {
	var s float64
	for k, v := range m {
		if strings.HasPrefix(k, name+"{") && strings.Contains(k, sub) {
			s += v
		}
	}
	return s
}

// waitRequests polls /metrics until requests_total reaches want and stops
// moving (the daemon refreshes its metrics snapshot about once a second).
func (s *sniffer) waitRequests(t testing.TB, want float64) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var last float64 = -1
	for {
		m := s.scrape(t)
		got := sum(m, "hotsniff_requests_total")
		if got >= want && got == last {
			return m
		}
		if time.Now().After(deadline) {
			return m
		}
		last = got
		time.Sleep(300 * time.Millisecond)
	}
}

// benchmark runs redis-benchmark GETs from the host side: n requests over 4
// connections with pipeline pipe, keys from a 10000-key space. It returns
// requests per second as the tool reports it.
func benchmark(t testing.TB, srv netip.AddrPort, n, pipe int) float64 {
	t.Helper()
	out := netnstest.RedisBenchmark(t, srv, n, pipe, 10000)
	return parseRPS(t, out)
}

// parseRPS reads "GET: 61957.87 requests per second" from -q output.
func parseRPS(t testing.TB, out string) float64 {
	t.Helper()
	line := out[strings.LastIndex(out, "\r")+1:]
	for _, f := range strings.Split(line, "\n") {
		if _, rest, ok := strings.Cut(f, "GET: "); ok {
			if v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64); err == nil {
				return v
			}
		}
	}
	t.Fatalf("no requests per second in %q", out)
	return 0
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// span formats the median and range of v.
func span(v []float64, format string) string {
	if len(v) == 0 {
		return "-"
	}
	return fmt.Sprintf(format+" ["+format+"–"+format+"]", median(v), slices.Min(v), slices.Max(v))
}

// redisCmd sends one command to srv and returns the raw reply.
func redisCmd(t testing.TB, srv netip.AddrPort, args ...string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", srv.String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(netnstest.RESP(args...)); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(c)
	line, err := rd.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if line[0] != '$' {
		return line
	}
	n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(rd, buf); err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

// resetStats zeroes the server's command statistics.
func resetStats(t testing.TB, srv netip.AddrPort) {
	t.Helper()
	if r := redisCmd(t, srv, "CONFIG", "RESETSTAT"); !strings.HasPrefix(r, "+OK") {
		t.Fatalf("CONFIG RESETSTAT: %q", r)
	}
}

// serverGets is how many GETs the server executed since resetStats: the
// ground truth the decoded count must equal (redis-benchmark -P overshoots
// -n by up to a pipeline per connection).
func serverGets(t testing.TB, srv netip.AddrPort) int {
	t.Helper()
	info := redisCmd(t, srv, "INFO", "commandstats")
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_get:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	t.Fatalf("no cmdstat_get in %q", info)
	return 0
}

type netstestAddr = netip.AddrPort

func execOut(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	return string(out), err
}
