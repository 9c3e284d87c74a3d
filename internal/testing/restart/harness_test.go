package restart

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

func TestMain(m *testing.M) {
	if os.Getenv("HOTSNIFF_RESTART_APP") == "1" {
		os.Exit(goApp())
	}
	os.Exit(m.Run())
}

// buildHotsniff builds ./cmd/hotsniff (or takes HOTSNIFF_BIN).
func buildHotsniff(t testing.TB) string {
	t.Helper()
	bin, err := testutil.BuildHotsniff(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// daemon is one `hotsniff run` inside the pair's namespace.
type daemon struct {
	cmd    *exec.Cmd
	http   string
	stderr *testutil.Buffer
	start  time.Time
	done   chan struct{}
}

// launch starts `hotsniff run` listening on port without waiting.
func launch(t *testing.T, bin string, p *netnstest.Pair, port int, args ...string) *daemon {
	t.Helper()
	addr := fmt.Sprintf("%s:%d", p.NSIP, port)
	args = append([]string{"run", "--iface", p.NSIface, "--listen", addr, "--node", "test-node"}, args...)
	cmd := p.Command(context.Background(), bin, args...)
	d := &daemon{cmd: cmd, http: "http://" + addr, stderr: &testutil.Buffer{Max: 4 << 20}, done: make(chan struct{})}
	cmd.Stdout = io.Discard
	cmd.Stderr = d.stderr
	d.start = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			<-d.done
		}
	})
	return d
}

// waitReady polls /readyz until 200 and returns the time since launch.
func (d *daemon) waitReady(t *testing.T, timeout time.Duration) time.Duration {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if code, _ := d.get("/readyz"); code == http.StatusOK {
			return time.Since(d.start)
		}
		select {
		case <-d.done:
			t.Fatalf("daemon exited before ready: %v\n%s", d.cmd.ProcessState, d.log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not ready after %v\n%s", timeout, d.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends sig and waits up to grace for the exit, then kills (as the
// kubelet does after terminationGracePeriodSeconds).
func (d *daemon) stop(t *testing.T, sig syscall.Signal, grace time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	_ = d.cmd.Process.Signal(sig)
	select {
	case <-d.done:
	case <-time.After(grace):
		t.Errorf("daemon did not exit on %v within %v: killed", sig, grace)
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	return time.Since(t0)
}

func (d *daemon) log() string { return strings.Join(d.stderr.Lines(), "\n") }

// httpc times out: a stopped daemon (SIGSTOP) accepts but never answers.
var httpc = &http.Client{Timeout: 2 * time.Second}

func (d *daemon) get(path string) (int, string) {
	resp, err := httpc.Get(d.http + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric returns the /metrics lines that start with name.
func (d *daemon) metric(name string) string {
	_, body := d.get("/metrics")
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, name) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// hot reports whether the daemon's /hotkeys lists key.
func (d *daemon) hot(key string) bool {
	_, body := d.get("/hotkeys")
	var doc struct {
		Keys []*event.Event `json:"keys"`
	}
	if json.Unmarshal([]byte(body), &doc) != nil {
		return false
	}
	for _, e := range doc.Keys {
		if string(e.Key) == key {
			return true
		}
	}
	return false
}

// hotLog polls the current daemon's /hotkeys every 500 ms, for the failure
// report: each key's measured and absorbed rate as the daemon saw them.
type hotLog struct {
	mu    sync.Mutex
	d     *daemon
	lines []string
	stop  chan struct{}
	done  chan struct{}
}

func pollHot(t *testing.T, d *daemon) *hotLog {
	h := &hotLog{d: d, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case now := <-tick.C:
				h.mu.Lock()
				d := h.d
				h.mu.Unlock()
				_, body := d.get("/hotkeys")
				var doc struct {
					Keys []*event.Event `json:"keys"`
				}
				line := now.Format("15:04:05.000")
				if json.Unmarshal([]byte(body), &doc) != nil {
					line += " " + strings.TrimSpace(body)
				}
				for _, e := range doc.Keys {
					line += fmt.Sprintf(" %s qps=%.0f absorbed=%.0f", e.Key, e.QPS, e.AbsorbedQPS)
				}
				h.mu.Lock()
				if len(h.lines) < 2000 {
					h.lines = append(h.lines, line)
				}
				h.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { close(h.stop); <-h.done })
	return h
}

func (h *hotLog) follow(d *daemon) {
	h.mu.Lock()
	h.d = d
	h.mu.Unlock()
}

func (h *hotLog) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.lines, "\n")
}

// getSampler samples one cache server's GET count every 100 ms.
type getSampler struct {
	mu      sync.Mutex
	samples []getSample
	stop    chan struct{}
	done    chan struct{}
}

type getSample struct {
	at   time.Time
	gets float64 // GETs per 100 ms over the 100–200 ms of server time before at
}

func sampleGets(t *testing.T, addr string) *getSampler {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	s := &getSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer rdb.Close()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		// The count and the server's clock in one transaction: a sample
		// covers exactly the server time between two reads, however late
		// this goroutine runs on a loaded machine.
		read := func() (calls float64, at time.Duration, ok bool) {
			var tm *redis.TimeCmd
			var info *redis.StringCmd
			_, err := rdb.TxPipelined(context.Background(), func(p redis.Pipeliner) error {
				tm = p.Time(context.Background())
				info = p.Info(context.Background(), "commandstats")
				return nil
			})
			if err != nil {
				return 0, 0, false
			}
			at = time.Duration(tm.Val().UnixNano())
			if _, rest, found := strings.Cut(info.Val(), "cmdstat_get:calls="); found {
				calls, _ = strconv.ParseFloat(strings.SplitN(rest, ",", 2)[0], 64)
			}
			return calls, at, true
		}
		prev, prevAt, _ := read()
		for {
			select {
			case <-s.stop:
				return
			case now := <-tick.C:
				c, at, ok := read()
				// Each sample spans at least 100 ms of server time (a
				// late tick followed by a prompt one is merged into the
				// next) and is scaled to GETs per 100 ms.
				if !ok || at-prevAt < 100*time.Millisecond {
					continue
				}
				s.mu.Lock()
				s.samples = append(s.samples, getSample{now, (c - prev) * float64(100*time.Millisecond) / float64(at-prevAt)})
				s.mu.Unlock()
				prev, prevAt = c, at
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *getSampler) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

func (s *getSampler) between(from, to time.Time) []getSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []getSample
	for _, x := range s.samples {
		if !x.at.Before(from) && x.at.Before(to) {
			out = append(out, x)
		}
	}
	return out
}

// mean and peak of the samples in [from, to), GETs per 100 ms.
func (s *getSampler) stats(from, to time.Time) (mean float64, peak getSample) {
	xs := s.between(from, to)
	for _, x := range xs {
		mean += x.gets
		if x.gets > peak.gets {
			peak = x
		}
	}
	if len(xs) > 0 {
		mean /= float64(len(xs))
	}
	return mean, peak
}

// channelLog collects the channel's events with their arrival time; it
// resubscribes when the channel Redis restarts.
type channelLog struct {
	mu sync.Mutex
	ev []timedEvent
}

type timedEvent struct {
	at time.Time
	e  *event.Event
}

func followChannel(t *testing.T, addr string) *channelLog {
	t.Helper()
	sub := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	ps := sub.Subscribe(context.Background(), "hotsniff:hotkeys")
	t.Cleanup(func() { ps.Close(); sub.Close() })
	if _, err := ps.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	cl := &channelLog{}
	go func() {
		// go-redis resubscribes after a connection error.
		for msg := range ps.Channel() {
			evs, err := event.DecodeMessage(nil, []byte(msg.Payload))
			if err != nil {
				continue
			}
			now := time.Now()
			cl.mu.Lock()
			for _, e := range evs {
				cl.ev = append(cl.ev, timedEvent{now, e})
			}
			cl.mu.Unlock()
		}
	}()
	return cl
}

// colds counts cold events for key received in [from, to).
func (cl *channelLog) colds(key string, from, to time.Time) (cold, hot int) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, te := range cl.ev {
		if string(te.e.Key) != key || te.at.Before(from) || !te.at.Before(to) {
			continue
		}
		switch te.e.Type {
		case event.TypeCold:
			cold++
		case event.TypeHot:
			hot++
		}
	}
	return cold, hot
}
