package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

// launchDaemon starts `hotsniff run` in the namespace on HTTP port port
// without waiting for /readyz.
func launchDaemon(t *testing.T, p *netnstest.Pair, port int, args ...string) *daemonProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := fmt.Sprintf("%s:%d", p.NSIP, port)
	args = append([]string{"run", "--iface", p.NSIface, "--listen", httpAddr, "--node", "test-node"}, testRings(args)...)
	cmd := p.Command(context.Background(), self, args...)
	cmd.Env = append(os.Environ(), "HOTSNIFF_TEST_MAIN=1")
	d := &daemonProc{cmd: cmd, http: "http://" + httpAddr, stderr: &testutil.Buffer{}}
	cmd.Stdout = io.Discard
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return d
}

// get returns the status and body of a GET on the daemon.
func (d *daemonProc) get(path string) (int, string) {
	resp, err := http.Get(d.http + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// getSampler samples the cache server's GET count every 100 ms.
type getSampler struct {
	mu      sync.Mutex
	samples []getSample
	stop    chan struct{}
	done    chan struct{}
}

type getSample struct {
	at   time.Time
	gets float64 // GETs in the 100 ms before at
}

func sampleGets(t *testing.T, rdb *redis.Client) *getSampler {
	s := &getSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		// Not commandCalls: t.Fatal must not run on this goroutine.
		calls := func() (float64, bool) {
			info, err := rdb.Info(context.Background(), "commandstats").Result()
			if err != nil {
				return 0, false
			}
			_, rest, ok := strings.Cut(info, "cmdstat_get:calls=")
			if !ok {
				return 0, true
			}
			n, _ := strconv.ParseFloat(strings.SplitN(rest, ",", 2)[0], 64)
			return n, true
		}
		prev, _ := calls()
		for {
			select {
			case <-s.stop:
				return
			case now := <-tick.C:
				c, ok := calls()
				if !ok {
					continue
				}
				s.mu.Lock()
				s.samples = append(s.samples, getSample{now, c - prev})
				s.mu.Unlock()
				prev = c
			}
		}
	}()
	t.Cleanup(func() { s.close() })
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

// TestRestartNoSpike: a node's daemon is restarted (SIGTERM and SIGKILL,
// three times each, then a surge rollout where the new daemon starts before
// the old one is stopped) while an application with the Go shim reads one
// hot key from several goroutines. The new daemon adopts the node's hot
// set, so the shard never takes the key's demand back: no 100 ms sample of
// the server's GET count exceeds twice the steady rate, and no cold is
// published for the key. HOTSNIFF_RESTART_ROUNDS sets the restarts per
// signal (default 3); HOTSNIFF_RESTART_CHANNEL=1 also restarts the channel
// Redis (5 s down).
func TestRestartNoSpike(t *testing.T) {
	netnstest.RequireRoot(t)
	rounds := 3
	if s := os.Getenv("HOTSNIFF_RESTART_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	const settle = 3 * time.Second // after a new daemon is ready: two windows
	p := netnstest.NewPair(t)
	cache := p.StartRedis(t, 6379)
	chanRedis := p.StartRedis(t, 6390)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: cache.String()})
	defer admin.Close()
	const key = "restart:hot"
	if err := admin.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	ke := followChannel(t, chanRedis.String())
	args := []string{"--capture", "tc", "--port", "redis=6379", "--hot-qps", strconv.Itoa(fleetHotQPS),
		"--ttl", "10s", "--redis-url", "redis://127.0.0.1:6390"}
	port := 19464
	d := startDaemonWrapped(t, p, nil, port, http.DefaultClient, "http", "", "", args...)

	// One process with the shim, 8 readers at 250/s: 4× the threshold.
	// It reads until the test ends (then it is killed): a loaded runner
	// makes restarts slow.
	const total = 600
	app := startFleetApp(t, cache.String(), chanRedis.String(), key, true, total)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, ok := d.hotkey(t, key); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never hot\n%s", key, d.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	gets := sampleGets(t, admin)
	defer gets.close()          // before admin closes
	time.Sleep(4 * time.Second) // the shim serves locally
	t0 := time.Now()
	time.Sleep(3 * time.Second)
	steadySamples := gets.between(t0, time.Now())
	var sum float64
	for _, s := range steadySamples {
		sum += s.gets
	}
	steady := sum / float64(len(steadySamples)) // GETs per 100 ms
	limit := 2 * steady
	t.Logf("steady: %.1f GETs per 100 ms (%.0f/s); limit %.1f per sample", steady, steady*10, limit)
	if steady*10 > 200 {
		t.Fatalf("steady GET rate %.0f/s: the shim is not serving the key locally", steady*10)
	}

	start := time.Now()
	type result struct {
		name       string
		down, wait time.Duration
		peak       float64
	}
	var results []result
	restart := func(name string, sig syscall.Signal) {
		t1 := time.Now()
		if sig != 0 {
			_ = d.stop(t, sig)
		}
		down := time.Since(t1)
		port = 19464 + (port-19463)%2 // alternate ports: the old one may linger
		nd := startDaemonWrapped(t, p, nil, port, http.DefaultClient, "http", "", "", args...)
		ready := time.Since(t1)
		if sig == 0 {
			// Surge: the new daemon is ready (capturing, hot set adopted);
			// now the old one goes.
			_ = d.stop(t, syscall.SIGTERM)
		}
		d = nd
		time.Sleep(settle)
		var peak float64
		for _, s := range gets.between(t1, time.Now()) {
			peak = max(peak, s.gets)
		}
		results = append(results, result{name, down, ready, peak})
		t.Logf("%s at %s", name, t1.Format("15:04:05.000"))
		t.Logf("%s: old daemon gone in %v, new one ready after %v; peak %.0f GETs per 100 ms", name, down.Round(time.Millisecond), ready.Round(time.Millisecond), peak)
	}
	for i := range rounds {
		restart(fmt.Sprintf("SIGTERM %d", i+1), syscall.SIGTERM)
	}
	for i := range rounds {
		restart(fmt.Sprintf("SIGKILL %d", i+1), syscall.SIGKILL)
	}
	restart("surge", 0)
	var ke2 *keyEvents
	if os.Getenv("HOTSNIFF_RESTART_CHANNEL") == "1" {
		// The channel Redis restarts empty (5 s down): shims keep serving,
		// the daemon rewrites its section when it is back.
		t1 := time.Now()
		cr := redis.NewClient(&redis.Options{Addr: chanRedis.String()})
		_ = cr.Shutdown(ctx).Err() // its connection closes with the server
		cr.Close()
		time.Sleep(5 * time.Second)
		p.StartRedis(t, 6390)
		ke2 = followChannel(t, chanRedis.String())
		time.Sleep(2 * settle)
		var peak float64
		for _, s := range gets.between(t1, time.Now()) {
			peak = max(peak, s.gets)
		}
		t.Logf("channel Redis restarted (5 s down): peak %.0f GETs per 100 ms", peak)
		results = append(results, result{"channel restart", 5 * time.Second, 0, peak})
	}
	end := time.Now()

	var worst getSample
	for _, s := range gets.between(start, end) {
		if s.gets > worst.gets {
			worst = s
		}
	}
	evs := ke.of(key, start, end)
	_, cold := onsets(evs)
	if ke2 != nil {
		_, c2 := onsets(ke2.of(key, start, end))
		cold += c2
	}
	t.Logf("%d restarts in %v: worst 100 ms sample %.0f GETs (%.1f× steady) at +%v; %d events for the key, %d cold",
		len(results), end.Sub(start).Round(time.Millisecond), worst.gets, worst.gets/max(steady, 0.1), worst.at.Sub(start).Round(time.Millisecond), len(evs), cold)
	if cold != 0 {
		t.Errorf("%d cold event(s) for %s while it was read", cold, key)
	}
	if worst.gets > limit {
		t.Errorf("a 100 ms sample took %.0f GETs at +%v, over twice the steady %.1f", worst.gets, worst.at.Sub(start).Round(time.Millisecond), steady)
	}
	if _, body := d.get("/readyz"); !strings.Contains(body, "adopted 1 hot key") {
		t.Errorf("last daemon's /readyz %q: want the adopted key", body)
	}
	app.mu.Lock()
	if n := len(app.stats); n == 0 || app.stats[n-1].Errors != 0 || app.stats[n-1].ColdInval != 0 {
		t.Errorf("application: %+v", app.stats[max(n-1, 0):])
	}
	app.mu.Unlock()
	if t.Failed() {
		for _, x := range gets.between(start, end) {
			if x.gets > limit {
				t.Logf("sample over the limit: %.0f GETs at %s", x.gets, x.at.Format("15:04:05.000"))
			}
		}
		t.Logf("application:\n%s", strings.Join(app.errb.Lines(), "\n"))
		t.Logf("last daemon:\n%s", d.log())
	}
}

// TestRunReadyOrder: HTTP answers before capture is attached; /healthz is
// 200 at once and /readyz 503 until capture is attached and the node's
// previous hot set is adopted, 200 after.
func TestRunReadyOrder(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	p.StartRedis(t, 6379)
	p.StartRedis(t, 6390)
	d := launchDaemon(t, p, 19464, "--capture", "tc", "--port", "redis=6379", "--redis-url", "redis://127.0.0.1:6390")
	var first503 string
	healthyEarly := false
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := d.get("/readyz")
		if code == http.StatusServiceUnavailable && first503 == "" {
			first503 = body
			if hc, _ := d.get("/healthz"); hc == http.StatusOK {
				healthyEarly = true
			}
		}
		if code == http.StatusOK {
			if !strings.Contains(body, "adopted 0 hot key(s)") {
				t.Errorf("/readyz when ready: %q", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready: %d %q\n%s", code, body, d.log())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(first503, "capture not attached") || !healthyEarly {
		t.Fatalf("before capture attached: /readyz said %q, /healthz ok %v; want 503 and 200", first503, healthyEarly)
	}
	// The daemon logged that it listened before it captured.
	log := d.log()
	if i, j := strings.Index(log, "capture mode chosen"), strings.Index(log, "msg=capturing"); i < 0 || j < i {
		t.Fatalf("log order:\n%s", log)
	}
}
