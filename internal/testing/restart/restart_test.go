// Package restart measures what a daemon restart costs the cache servers:
// a real hotsniff daemon captures real redis-servers in a network namespace
// while one application process per shim language (Go, Python with
// redis-py, Node with ioredis) reads one hot key through its shim; each
// cache server's cmdstat_get is sampled every 100 ms. The daemon is
// restarted (SIGTERM, SIGKILL, the chart's rolling update), the channel
// Redis is restarted, and the daemon is frozen (SIGSTOP) for 30 s while the
// key is written. See docs/kubernetes.md, "Upgrades and restarts".
package restart

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

const (
	hotQPS  = 250 // daemon threshold
	readers = 4   // workers per application
	rate    = 250 // reads/s per worker: 1,000/s per application, 4× the threshold
	// bound is the shims' default staleness bound, LocalTTL + StaleGrace
	// (docs/client-shim.md).
	bound = 150 * time.Millisecond
	// settle is how long a variant is watched after the daemon is ready
	// again: the detection window at --hot-qps 250 (800 reads / 250/s =
	// 3.2 s, the earliest an adopted key may turn cold) plus a sub-window,
	// the daemon's tick and delivery.
	settle = 5 * time.Second
	// The chart's values (helm/hotsniff/values.yaml).
	chartGrace = 30 * time.Second // terminationGracePeriodSeconds
)

// lang is one shim language's application.
type lang struct {
	name string
	port int // its own cache server, so its GETs are counted apart
	argv func(t *testing.T) ([]string, []string)
}

func langs(t *testing.T) []lang {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	here, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	rt := testutil.RepoRoot()
	return []lang{
		{"go", 6379, func(*testing.T) ([]string, []string) {
			return []string{self, "-test.run=^$"}, []string{"HOTSNIFF_RESTART_APP=1"}
		}},
		{"python", 6380, func(t *testing.T) ([]string, []string) {
			py := "/usr/bin/python3"
			if p := os.Getenv("HOTSNIFF_PYTHON"); p != "" {
				py = p
			}
			if out, err := exec.Command(py, "-c", "import redis").CombinedOutput(); err != nil {
				netnstest.Skip(t, "%s cannot import redis-py (apt-get install python3-redis): %v: %s", py, err, out)
			}
			return []string{py, filepath.Join(here, "app.py")},
				[]string{"PYTHONPATH=" + filepath.Join(rt, "client", "python"), "PYTHONDONTWRITEBYTECODE=1"}
		}},
		{"node", 6381, func(t *testing.T) ([]string, []string) {
			dir := filepath.Join(rt, "client", "node")
			if _, err := exec.LookPath("node"); err != nil {
				netnstest.Skip(t, "node not installed (apt-get install nodejs npm)")
			}
			if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
				netnstest.Skip(t, "client/node has no node_modules: run `npm ci` there")
			}
			// Compiled into a directory of its own: `npm run build` empties
			// client/node/dist, which the conformance suite may be running
			// from at the same moment under `make test`.
			out := filepath.Join(t.TempDir(), "dist")
			cmd := exec.Command("node", filepath.Join(dir, "node_modules", "typescript", "bin", "tsc"),
				"-p", filepath.Join(dir, "tsconfig.json"), "--outDir", out, "--declaration", "false")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("compile client/node: %v: %s", err, b)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "src", "writes.json")); err != nil {
				t.Fatal(err)
			} else if err := os.WriteFile(filepath.Join(out, "writes.json"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			return []string{"node", filepath.Join(here, "app.js")}, []string{"HOTSNIFF_NODE_DIR=" + dir,
				"HOTSNIFF_NODE_DIST=" + out, "NODE_PATH=" + filepath.Join(dir, "node_modules")}
		}},
	}
}

// limit is the most GETs a 100 ms sample may take: twice the steady rate,
// but at least two reads per worker. At a steady 2 GETs per 100 ms (one
// refresh per LocalTTL), a write's invalidation (also a late one, published
// when the frozen daemon resumes) or a stall of the application longer
// than LocalTTL+StaleGrace costs one refresh: the workers' reads wait for
// it (docs/client-shim.md, "After an invalidation"), but at most
// StaleGrace, after which a worker goes to the server itself, by the
// shims' design; the control period shows that noise with no restart at
// all. A key dropped by a restart costs the key's whole demand, 100 GETs
// per 100 ms here.
func limit(steady float64) float64 { return max(2*steady, 2*readers) }

// dropped describes an app's dropped values, when it reports them.
func dropped(st appStat) string {
	if len(st.Dropped) == 0 {
		return ""
	}
	return fmt.Sprintf(", values dropped %v", st.Dropped)
}

// renice raises the priority of the redis-server behind rdb (its main
// thread, which serves the commands).
func renice(t *testing.T, rdb *redis.Client) {
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(info, "process_id:")
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]))
	if err != nil {
		t.Fatalf("redis-server pid in %q: %v", rest, err)
	}
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, pid, -10); err != nil {
		t.Fatal(err)
	}
}

// variant is one disturbance and the time it was watched.
type variant struct {
	name     string
	from, to time.Time
	note     string
}

// TestRestartShims: one application per shim language reads its hot key
// while the node's daemon is restarted with SIGTERM and SIGKILL (three
// times each; HOTSNIFF_RESTART_ROUNDS), started beside its successor (a
// surge), replaced as the chart's rolling update does, frozen for 30 s
// (SIGSTOP) while the key is written, and while its channel Redis restarts
// empty. In every variant no 100 ms sample at a cache server exceeds twice
// its steady GET rate (at least two reads per worker: see limit), no cold
// is published for a key while it is read, and after the write no read that
// started more than LocalTTL+StaleGrace later returns the old value.
// HOTSNIFF_RESTART_VARIANTS (sigterm, sigkill, surge, rolling, sigstop,
// channel) runs only the variants it names.
func TestRestartShims(t *testing.T) {
	netnstest.RequireRoot(t)
	ls := langs(t)
	type app struct {
		lang
		proc *appProc
		gets *getSampler
		key  string
	}
	var apps []*app
	var argvs [][2][]string
	for _, l := range ls {
		argv, env := l.argv(t)
		argvs = append(argvs, [2][]string{argv, env})
	}
	bin := buildHotsniff(t)
	p := netnstest.NewPair(t)
	ctx := context.Background()
	args := []string{"--capture", "tc", "--hot-qps", strconv.Itoa(hotQPS),
		// The hot entries must outlive the 30 s freeze: refreshed every
		// 2 s, a key's entry lapses 38–40 s after the daemon stops.
		"--ttl", "40s", "--refresh-every", "2s",
		"--redis-url", "redis://127.0.0.1:6390"}
	for _, l := range ls {
		srv := p.StartRedis(t, l.port)
		args = append(args, "--port", "redis="+strconv.Itoa(l.port))
		a := &app{lang: l, key: "restart:" + l.name}
		admin := redis.NewClient(&redis.Options{Addr: srv.String()})
		if err := admin.Set(ctx, a.key, "v1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		renice(t, admin) // as the applications (see startApp)
		admin.Close()
		apps = append(apps, a)
	}
	chanAddr := p.StartRedis(t, 6390).String()
	cl := followChannel(t, chanAddr)
	port := 19464
	d := launch(t, bin, p, port, args...)
	first := d.waitReady(t, 90*time.Second)
	t.Logf("first daemon ready after %v", first.Round(time.Millisecond))
	for i, a := range apps {
		cache := fmt.Sprintf("%s:%d", p.NSIP, a.port)
		env := append(argvs[i][1], "APP_CACHE="+cache, "APP_CHANNEL="+chanAddr, "APP_KEY="+a.key,
			"APP_READERS="+strconv.Itoa(readers), "APP_RATE="+strconv.Itoa(rate))
		a.proc = startApp(t, a.name, argvs[i][0], env)
	}
	for _, a := range apps {
		a.proc.waitReady(t, 60*time.Second)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range apps {
		for !d.hot(a.key) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never hot\n%s", a.key, d.log())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, a := range apps {
		a.gets = sampleGets(t, fmt.Sprintf("%s:%d", p.NSIP, a.port))
	}
	time.Sleep(4 * time.Second) // the shims serve locally
	t0 := time.Now()
	time.Sleep(4 * time.Second)
	steady := map[string]float64{}
	for _, a := range apps {
		mean, peak := a.gets.stats(t0, time.Now())
		steady[a.name] = mean
		reads, local := a.proc.rate(t0, time.Now())
		t.Logf("%s steady: %.0f GETs/s at the server (peak %.0f per 100 ms); app %.0f reads/s, %.0f/s local",
			a.name, mean*10, peak.gets, reads, local)
		if mean*10 > 100 || reads == 0 || local < 0.9*reads {
			t.Fatalf("%s: steady %.0f GETs/s at the server, %.0f reads/s in the app, %.0f/s local: the shim is not serving the key locally\n%s",
				a.name, mean*10, reads, local, a.proc.errb.String())
		}
	}

	hl := pollHot(t, d)
	start := time.Now()
	var vs []variant
	watch := func(name string, from time.Time, note string) {
		time.Sleep(settle)
		vs = append(vs, variant{name, from, time.Now(), note})
	}
	// restart stops the daemon with sig and starts a new one for the node;
	// wait is the kubelet's gap between the old container's exit and the
	// new one's start (0 for a process supervisor).
	restarted := false
	// sig 0 is a surge: the new daemon starts beside the old one, which is
	// stopped (SIGTERM) once the new one is ready.
	restart := func(name string, sig syscall.Signal, gap time.Duration, samePort bool) {
		restarted = true
		t1 := time.Now()
		var down time.Duration
		if sig != 0 {
			down = d.stop(t, sig, chartGrace)
		}
		time.Sleep(gap)
		if !samePort {
			port = 19464 + (port-19463)%2 // the killed one's port may linger
		}
		old := d
		d = launch(t, bin, p, port, args...)
		hl.follow(d)
		ready := d.waitReady(t, 120*time.Second)
		if sig == 0 {
			down = old.stop(t, syscall.SIGTERM, chartGrace)
		}
		watch(name, t1, fmt.Sprintf("old daemon gone in %v, new one ready %v after its start",
			down.Round(time.Millisecond), ready.Round(time.Millisecond)))
	}
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("HOTSNIFF_RESTART_ROUNDS")); err == nil && v >= 0 {
		rounds = v
	}
	// The control: no disturbance at all, measured like the variants.
	t0 = time.Now()
	time.Sleep(3 * time.Second)
	watch("none (control)", t0, "no disturbance")
	only := os.Getenv("HOTSNIFF_RESTART_VARIANTS") // e.g. "sigstop,channel": a quicker look at some
	run := func(name string) bool { return only == "" || strings.Contains(only, name) }
	for i := range rounds {
		if run("sigterm") {
			restart(fmt.Sprintf("SIGTERM %d", i+1), syscall.SIGTERM, 0, false)
		}
	}
	for i := range rounds {
		if run("sigkill") {
			restart(fmt.Sprintf("SIGKILL %d", i+1), syscall.SIGKILL, 0, false)
		}
	}
	if run("surge") {
		restart("surge (new daemon first)", 0, 0, false)
	}
	// The chart's rolling update (maxUnavailable 1, no surge, host network):
	// the old pod gets SIGTERM and up to terminationGracePeriodSeconds to
	// exit; only then does the DaemonSet create the new pod on the node,
	// same node name and port; the rollout moves on once /readyz is 200.
	if run("rolling") {
		restart("rolling update", syscall.SIGTERM, time.Second, true)
	}

	written := map[string]time.Time{}
	if run("sigstop") {
		// The daemon frozen for 30 s; each key is written 5 s in.
		t1 := time.Now()
		if err := d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		for _, a := range apps {
			admin := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("%s:%d", p.NSIP, a.port)})
			if err := admin.Set(ctx, a.key, "v2", 0).Err(); err != nil {
				t.Fatal(err)
			}
			written[a.name] = time.Now()
			admin.Close()
		}
		time.Sleep(25 * time.Second)
		_ = d.cmd.Process.Signal(syscall.SIGCONT)
		watch("SIGSTOP 30 s", t1, "keys written 5 s in")
		// What the freeze did to the capture: the rings fill while the
		// reader is stopped (past three quarters, the programs sample
		// connections out), and the detector holds cold verdicts over
		// what was missed.
		t.Logf("after the freeze: %s", strings.Join(strings.Fields(strings.Join([]string{
			d.metric("hotsniff_capture_sample_rate"), d.metric("hotsniff_capture_dropped_total"),
			d.metric("hotsniff_detect_cold_held_total")}, " ")), " "))
	}
	if run("channel") {
		// The channel Redis restarts empty, 5 s down. The variant lasts until
		// the daemon publishes again (its reconnect backoff) plus settle.
		t1 := time.Now()
		cr := redis.NewClient(&redis.Options{Addr: chanAddr})
		_ = cr.Shutdown(ctx).Err()
		cr.Close()
		time.Sleep(5 * time.Second)
		p.StartRedis(t, 6390)
		back := time.Now()
		for !strings.Contains(d.metric("hotsniff_channel_up"), " 1") {
			if time.Since(back) > 60*time.Second {
				t.Fatalf("daemon not publishing 60 s after the channel Redis came back\n%s", d.log())
			}
			time.Sleep(100 * time.Millisecond)
		}
		watch("channel Redis restart", t1, fmt.Sprintf("5 s down; the daemon published again %v after it was back",
			time.Since(back).Round(100*time.Millisecond)))
	}
	end := time.Now()

	// Figures and verdicts.
	for _, v := range vs {
		t.Logf("%s (%v watched; %s):", v.name, v.to.Sub(v.from).Round(100*time.Millisecond), v.note)
		for _, a := range apps {
			_, peak := a.gets.stats(v.from, v.to)
			cold, hot := cl.colds(a.key, v.from, v.to)
			lim := limit(steady[a.name])
			over := 0
			for _, x := range a.gets.between(v.from, v.to) {
				if x.gets > 2*steady[a.name] {
					over++
				}
			}
			t.Logf("  %-6s worst 100 ms %2.0f GETs (%.1f× steady %.1f) at +%v, %d sample(s) over 2× steady; %d cold, %d hot events",
				a.name, peak.gets, peak.gets/max(steady[a.name], 0.1), steady[a.name],
				peak.at.Sub(v.from).Round(100*time.Millisecond), over, cold, hot)
			if peak.gets > lim {
				t.Errorf("%s, %s: a 100 ms sample took %.0f GETs at +%v, over %.1f (steady %.1f)",
					v.name, a.name, peak.gets, peak.at.Sub(v.from).Round(100*time.Millisecond), lim, steady[a.name])
			}
			if cold != 0 {
				t.Errorf("%s, %s: %d cold event(s) for %s while it was read", v.name, a.name, cold, a.key)
			}
		}
	}
	for _, a := range apps {
		// Between variants too.
		if cold, _ := cl.colds(a.key, start, end); cold != 0 {
			t.Errorf("%s: %d cold event(s) for %s while it was read", a.name, cold, a.key)
		}
	}
	for _, a := range apps {
		// The stats lines come every 200 ms; let one more arrive.
		time.Sleep(250 * time.Millisecond)
		st := a.proc.last()
		w, ok := written[a.name]
		if !ok {
			continue
		}
		old, new := st.Seen["v1"], st.Seen["v2"]
		lag := time.Duration(old - w.UnixNano())
		t.Logf("%s: %d reads, %d errors, %d local, %d snapshot reloads%s; last read of the old value started %v after the write (bound %v)",
			a.name, st.Reads, st.Errors, st.Local, st.Reloads, dropped(st), lag.Round(time.Millisecond), bound)
		if old > w.Add(bound).UnixNano() {
			t.Errorf("%s: a read started %v after the write (during the daemon's freeze) returned the old value; bound %v",
				a.name, lag, bound)
		}
		if new <= w.Add(bound).UnixNano() {
			t.Errorf("%s: no read returned the new value after the write", a.name)
		}
		if st.Errors != 0 {
			t.Errorf("%s: %d read errors\n%s", a.name, st.Errors, a.proc.errb.String())
		}
	}
	if _, body := d.get("/readyz"); restarted && !strings.Contains(body, "adopted 3 hot key") {
		t.Errorf("last daemon's /readyz %q: want the 3 adopted keys", body)
	}
	t.Logf("%d variants in %v", len(vs), end.Sub(start).Round(time.Second))
	if t.Failed() {
		for _, a := range apps {
			for _, x := range a.gets.between(start, end) {
				if x.gets > limit(steady[a.name]) {
					t.Logf("%s sample over the limit: %.0f GETs at %s", a.name, x.gets, x.at.Format("15:04:05.000"))
				}
			}
			t.Logf("%s app stderr:\n%s", a.name, a.proc.errb.String())
		}
		t.Logf("last daemon:\n%s", d.log())
		t.Logf("the daemons' /hotkeys every 500 ms:\n%s", hl)
	}
}
