package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// The workload of TestRunKernelCountExact: a planted key paced at
// plantedQPS over two connections beside random background reads, with a
// detector window of exactWindow (sub-window exactWindow/8) and a refresh
// at every sub-window, so each refresh carries the key's rate over the
// seven sub-windows before it.
const (
	exactHotQPS  = 1000
	exactWindow  = 800 * time.Millisecond
	plantedQPS   = 3000
	plantedFor   = 3 * time.Second
	plantedKey   = "planted:hot"
	exactRateTol = 0.02
)

// TestRunKernelCountExact: with --kernel-count, in each capture mode, every
// GET the server executed is counted exactly once (in the kernel, or
// decoded in user space, never both), and a planted hot key's reported rate
// is within 2 % of the rate the test sent it at over the same span, while
// random keys are read beside it.
func TestRunKernelCountExact(t *testing.T) {
	netnstest.RequireRoot(t)
	netnstest.Need(t, "nsenter")
	p := netnstest.NewPair(t)
	port := testPorts(7)[6]
	srv := p.StartRedis(t, port)
	// Written before any daemon runs: GET is the only keyed command the
	// daemons see.
	setup := redis.NewClient(&redis.Options{Addr: srv.String(), Protocol: 2, DisableIdentity: true})
	if err := setup.Set(context.Background(), plantedKey, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	setup.Close()
	// tc again with the connections opened before the daemon: joined
	// mid-stream, anchored by a reply header each.
	for _, run := range []struct {
		mode      string
		midstream bool
	}{{"tc", false}, {"xdp", false}, {"cgroup", false}, {"tc", true}} {
		mode, midstream := run.mode, run.midstream
		name := mode
		if midstream {
			name += "/midstream"
		}
		t.Run(name, func(t *testing.T) {
			args := []string{"--capture", mode}
			if mode == "cgroup" {
				if _, ok := cgroupRoot(); !ok {
					netnstest.Skip(t, "no cgroup v2 hierarchy mounted")
				}
			} else {
				args = append(args, "--iface", p.NSIface)
			}
			args = append(args, "--port", fmt.Sprintf("redis=%d", port), "--kernel-count",
				"--hot-qps", strconv.Itoa(exactHotQPS), "--window", exactWindow.String(), "--refresh-every", "1ms")
			// The planted key's connections and one for fallbacks, opened
			// after the daemon started (it sees their handshakes) or
			// before: joined mid-stream.
			var planted *redis.Client
			var fb, fx net.Conn
			conns := func() {
				planted = redis.NewClient(&redis.Options{Addr: srv.String(), PoolSize: 2, MinIdleConns: 2, Protocol: 2, DisableIdentity: true})
				for range 2 {
					if err := planted.Ping(context.Background()).Err(); err != nil {
						t.Fatal(err)
					}
				}
				var err error
				if fb, err = net.Dial("tcp", srv.String()); err != nil {
					t.Fatal(err)
				}
				if fx, err = net.Dial("tcp", srv.String()); err != nil {
					t.Fatal(err)
				}
			}
			if midstream {
				conns()
			}
			d := startNodeDaemon(t, p.NS, p.NSIP, args...)
			if !midstream {
				conns()
			}
			defer planted.Close()
			defer fb.Close()
			defer fx.Close()
			info := redis.NewClient(&redis.Options{Addr: srv.String(), Protocol: 2, DisableIdentity: true})
			defer info.Close()
			calls0 := commandCalls(t, info)
			before, mgetsBefore := calls0["get"], calls0["mget"]

			ctx, cancel := context.WithTimeout(context.Background(), plantedFor+500*time.Millisecond)
			defer cancel()
			var bgTotal, bgHot atomic.Int64
			bgDone := make(chan struct{})
			go func() {
				defer close(bgDone)
				netnstest.LoadMix(ctx, t, srv, 2, 16, 10000, "", 0, &bgTotal, &bgHot)
			}()
			fbDone := make(chan struct{})
			go func() {
				defer close(fbDone)
				sendFallbacks(t, fb)
			}()
			fxDone := make(chan struct{})
			go func() {
				defer close(fxDone)
				sendFamilies(t, fx)
			}()
			sent := pacePlanted(t, planted, plantedQPS, plantedFor)
			<-bgDone
			<-fbDone
			<-fxDone
			calls := commandCalls(t, info)
			executed := calls["get"] - before
			mgets := calls["mget"] - mgetsBefore
			mgetKeys := float64(familyMGETKeys + familyManyKeys)

			// Every GET counted: by the programs (keys: the only keyed
			// command sent is GET), or decoded in user space from a
			// segment they did not count.
			m := waitCounted(t, &d.daemonProc, executed, executed+mgetKeys)
			kernelKeys := m[`hotsniff_kernel_counted_total{what="keys"}`]
			userGets := m[`hotsniff_requests_total{op="GET",proto="redis"}`]
			copiedGets := m[`hotsniff_kernel_copied_requests_total{op="GET",proto="redis"}`]
			counted := kernelKeys + userGets - copiedGets
			// The MGETs' keys: no segment of them parses whole (the large
			// one spans many, the small one has too many keys), so the
			// programs count none of them (kc_request adds a segment's
			// keys only when it parsed whole) and user space decodes them
			// all. keys_total counts every key decoded, GETs' (one each)
			// and the MGETs'.
			userMGETs := m[`hotsniff_requests_total{op="MGET",proto="redis"}`]
			userMGETKeys := m[`hotsniff_keys_total{proto="redis"}`] - userGets
			if mgets != 2 || userMGETs != mgets || userMGETKeys != mgetKeys ||
				m[`hotsniff_kernel_copied_requests_total{op="MGET",proto="redis"}`] != 0 {
				t.Errorf("%s: MGETs executed %v (want 2), decoded %v with %v keys (want %v), %v of them counted in the kernel too (want 0)",
					mode, mgets, userMGETs, userMGETKeys, mgetKeys, m[`hotsniff_kernel_copied_requests_total{op="MGET",proto="redis"}`])
			}
			fallback := 0.0
			reasons := ""
			for _, r := range []string{"split", "long_key", "inline", "midstream", "unknown", "complex", "keys", "large", "proto", "malformed", "load"} {
				v := m[`hotsniff_kernel_fallback_total{reason="`+r+`"}`]
				fallback += v
				if v != 0 {
					reasons += fmt.Sprintf(" %s=%v", r, v)
				}
			}
			copiedSegs := m[`hotsniff_kernel_counted_total{what="copied"}`]
			t.Logf("%s: MGET keys executed %.0f, decoded in user space %.0f; fallbacks by reason:%s", mode, mgetKeys, userMGETKeys, reasons)
			t.Logf("%s: GETs executed %.0f, counted %.0f (kernel %.0f + user space %.0f - both %.0f); planted %d, background %d; request segments copied %.0f (%.0f counted and copied, %.0f fallbacks:%s), %.4f per GET; duplicates %.0f",
				mode, executed, counted, kernelKeys, userGets, copiedGets, len(sent), bgTotal.Load(), copiedSegs+fallback, copiedSegs, fallback, reasons,
				(copiedSegs+fallback)/executed, m[`hotsniff_kernel_counted_total{what="duplicates"}`])
			if counted != executed {
				t.Errorf("%s: GETs counted %.0f, the server executed %.0f\n%s", mode, counted, executed, kernelMetrics(m))
			}
			if kernelKeys == 0 || userGets >= executed {
				t.Errorf("%s: kernel counted %v GETs, user space decoded %v of %v: the programs kept none", mode, kernelKeys, userGets, executed)
			}
			// The segments with a long key are left whole to user space:
			// the first as long_key, the others as split (after a
			// fallback the programs do not know where the next command
			// starts until a segment parses whole).
			// Joined mid-stream, the first of them is the midstream one.
			first := `hotsniff_kernel_fallback_total{reason="long_key"}`
			if midstream {
				first = `hotsniff_kernel_fallback_total{reason="midstream"}`
			}
			if only := userGets - copiedGets; only < fallbackGets || m[first] < 1 {
				t.Errorf("%s: %v GETs counted in user space alone, %v %s; want at least %d and 1", mode, only,
					m[first], first, fallbackGets)
			}
			// Each inline GET and the small MGET follow a RESP GET that
			// parsed whole, so they start on a known command boundary and
			// fall back by their own reason. (The large MGET and the
			// pipeline fall back as large where the capture sees GSO
			// packets over 4 KiB, tc and cgroup, else as split: logged.)
			if in, ks := m[`hotsniff_kernel_fallback_total{reason="inline"}`], m[`hotsniff_kernel_fallback_total{reason="keys"}`]; in < familyInline || ks < 1 {
				t.Errorf("%s: fallbacks inline %v, keys %v; want at least %d and 1", mode, in, ks, familyInline)
			}
			// Nothing rejected: a FIN after requests the programs kept
			// resumes the stream (it landed out of the window user space
			// last knew), and connections joined mid-stream are anchored
			// by a reply header.
			for name, v := range m {
				if v != 0 && (strings.HasPrefix(name, "hotsniff_capture_dropped_total") || name == "hotsniff_stream_lost_bytes_total" ||
					strings.HasPrefix(name, "hotsniff_stream_rejected_total")) {
					t.Errorf("%s: %s = %v, want 0", mode, name, v)
				}
			}

			checkPlantedRate(t, d, mode, sent)
			for _, e := range d.hotkeys(t) {
				if string(e.Key) != plantedKey {
					t.Errorf("%s: a random key reported hot: %+v", mode, e)
				}
			}
			if err := d.stop(t, syscall.SIGTERM); err != nil {
				t.Errorf("exit after SIGTERM: %v\n%s", err, d.log())
			}
		})
	}
}

// sendFallbacks sends, on c, fallbackRounds pipelines of 8 GETs of which
// one names a key longer than the programs count (bpf.KernelMaxKey): each
// segment is copied uncounted, for user space to count all 8.
const fallbackRounds, fallbackGets = 200, 200 * 8

func sendFallbacks(t *testing.T, c net.Conn) {
	long := strings.Repeat("x", 300)
	rd := bufio.NewReader(c)
	for i := range fallbackRounds {
		var req []byte
		for j := range 8 {
			k := "fb:" + strconv.Itoa(i*8+j)
			if j == i%8 {
				k = long + strconv.Itoa(i)
			}
			req = append(req, netnstest.RESP("GET", k)...)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(req); err != nil {
			t.Errorf("fallback GETs: %v", err)
			return
		}
		for range 8 {
			if line, err := rd.ReadString('\n'); err != nil || line != "$-1\r\n" {
				t.Errorf("fallback GET reply %q: %v", line, err)
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The fallback families sendFamilies drives besides long keys.
const (
	familyMGETKeys = 10000 // keys of the large MGET: its request spans many segments
	familyManyKeys = 150   // keys of a small MGET, in one segment: more than bpf.KernelMaxKeys
	familyInline   = 100   // inline GETs, each after a RESP GET
	familyPipeline = 2000  // GETs written at once (73 KB), packed across segments
)

// sendFamilies sends on c, one after the other, requests the programs
// cannot count, for user space to count every key of them: one MGET of
// familyMGETKeys keys, one of familyManyKeys one-byte keys (1 KiB, one
// segment), familyInline inline GETs ("GET k\r\n", which the
// server executes as GETs) and one write of familyPipeline GETs. Each is
// preceded by a RESP GET in a segment of its own: it parses whole, so the
// programs know the next request starts on a command boundary and name the
// fallback by its own reason (inline, large, keys), not as the split that
// follows any fallback.
func sendFamilies(t *testing.T, c net.Conn) {
	rd := bufio.NewReaderSize(c, 64<<10)
	roundTrip := func(what string, req []byte, replies int) bool {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(req); err != nil {
			t.Errorf("%s: %v", what, err)
			return false
		}
		for range replies {
			if line, err := rd.ReadString('\n'); err != nil || line != "$-1\r\n" {
				t.Errorf("%s: reply %q: %v", what, line, err)
				return false
			}
		}
		return true
	}
	boundary := func(i int) bool { return roundTrip("sync GET", netnstest.RESP("GET", "fx:sync:"+strconv.Itoa(i)), 1) }

	// mget sends one MGET of keys after a boundary GET and reads its reply.
	mget := func(b int, keys []string) bool {
		if !boundary(b) {
			return false
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(netnstest.RESP(append([]string{"MGET"}, keys...)...)); err != nil {
			t.Errorf("MGET: %v", err)
			return false
		}
		if line, err := rd.ReadString('\n'); err != nil || line != "*"+strconv.Itoa(len(keys))+"\r\n" {
			t.Errorf("MGET: reply %q: %v", line, err)
			return false
		}
		return roundTrip("MGET", nil, len(keys))
	}
	var big, many []string
	for i := range familyMGETKeys {
		big = append(big, "fx:m:"+strconv.Itoa(i))
	}
	for i := range familyManyKeys {
		many = append(many, string(rune('a'+i%26)))
	}
	if !mget(0, big) || !mget(1, many) {
		return
	}
	for i := range familyInline {
		if !boundary(2+i) || !roundTrip("inline GET", []byte("GET fx:i:"+strconv.Itoa(i)+"\r\n"), 1) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	var req []byte
	for i := range familyPipeline {
		req = append(req, netnstest.RESP("GET", "fx:pipelined:"+strconv.Itoa(i))...)
	}
	if boundary(2 + familyInline) {
		roundTrip("pipelined GETs", req, familyPipeline)
	}
}

// sentGet is one GET of the planted key: sent no earlier than t0, answered
// by t1 (Unix ns); the capture saw it in between.
type sentGet struct{ t0, t1 int64 }

// pacePlanted GETs plantedKey at qps over two connections for d, each
// connection on a schedule of its own (a late send goes at once, so the
// schedule catches up), and returns every GET answered.
func pacePlanted(t *testing.T, c *redis.Client, qps int, d time.Duration) []sentGet {
	t.Helper()
	const conns = 2
	ctx := context.Background()
	every := time.Duration(int64(time.Second) * conns / int64(qps))
	var mu sync.Mutex
	var out []sentGet
	var wg sync.WaitGroup
	start := time.Now()
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []sentGet
			for n := 0; ; n++ {
				at := start.Add(every*time.Duration(n) + every*time.Duration(i)/conns)
				if at.Sub(start) >= d {
					break
				}
				if w := time.Until(at); w > 0 {
					time.Sleep(w)
				}
				t0 := time.Now().UnixNano()
				if err := c.Get(ctx, plantedKey).Err(); err != nil {
					t.Errorf("GET %s: %v", plantedKey, err)
					return
				}
				mine = append(mine, sentGet{t0, time.Now().UnixNano()})
			}
			mu.Lock()
			out = append(out, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(out, func(a, b int) bool { return out[a].t0 < out[b].t0 })
	return out
}

// waitCounted polls /metrics until the GETs counted (kernel + user space
// only) reach want and the keys counted reach wantKeys, then takes one
// more refresh so a count beyond them shows, and returns the last scrape.
func waitCounted(t *testing.T, d *daemonProc, want, wantKeys float64) map[string]float64 {
	t.Helper()
	counted := func(m map[string]float64) (gets, keys float64) {
		k, c := m[`hotsniff_kernel_counted_total{what="keys"}`], m[`hotsniff_kernel_copied_requests_total{op="GET",proto="redis"}`]
		return k + m[`hotsniff_requests_total{op="GET",proto="redis"}`] - c, k + m[`hotsniff_keys_total{proto="redis"}`] - c
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, m := d.scrape(t)
		if gets, keys := counted(m); gets >= want && keys >= wantKeys || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(1200 * time.Millisecond) // metrics refresh once a second
	_, m := d.scrape(t)
	return m
}

// kernelMetrics lists the kernel-counting metrics of a scrape.
func kernelMetrics(m map[string]float64) string {
	var names []string
	for k := range m {
		for _, p := range []string{"hotsniff_kernel_", "hotsniff_requests_", "hotsniff_capture_", "hotsniff_stream_", "hotsniff_detect_"} {
			if strings.HasPrefix(k, p) {
				names = append(names, k)
				break
			}
		}
	}
	sort.Strings(names)
	s := ""
	for _, k := range names {
		s += fmt.Sprintf("%s %v\n", k, m[k])
	}
	return s
}

// checkPlantedRate compares the rate of every refresh of the planted key
// that measured a full window inside the paced span with the rate sent
// over that window.
//
// A refresh at packet time ts, in sub-window E, carries the reads counted
// in sub-windows E-7 .. E divided by ts - start of E-7 (docs/detection.md:
// the entry's window, its span from the oldest sub-window in the ring once
// the entry is older than that). The capture saw a GET somewhere between
// its send and its answer: one whose round trip straddles an end of the
// window may have been counted on either side. The reported count is held
// to the range from the GETs surely inside to those possibly inside
// (windowGets), each end widened by the tolerance; on a quiet machine a
// round trip is a fraction of a millisecond and the range is a GET or two
// wide, but a load generator starved for CPU (both cores busy) can sit
// tens of milliseconds between a send and its answer.
func checkPlantedRate(t *testing.T, d *nodeDaemon, mode string, sent []sentGet) {
	t.Helper()
	sub := int64(exactWindow / 8)
	genStart, genEnd := sent[0].t0, sent[len(sent)-1].t0
	d.mu.Lock()
	evs := append([]event.Event(nil), d.events...)
	d.mu.Unlock()
	var first int64
	var errs []float64
	straddled, worstMid := 0, 0.0
	worst, sumErr := 0.0, 0.0
	promotions := 0
	for _, e := range evs {
		if string(e.Key) != plantedKey {
			continue
		}
		if e.Type == event.TypeCold {
			// The key went cold: a load generator starved for CPU sends
			// below the threshold for a while. Its next hot event is a new
			// entry, whose rate is over its own age until it is a window
			// old.
			first = 0
			continue
		}
		if e.Type != event.TypeHot {
			continue
		}
		ts := e.TS.UnixNano()
		if first == 0 {
			first = ts
			promotions++
			continue
		}
		start := (ts/sub - 7) * sub
		if ts-first < int64(exactWindow) || start < genStart || ts > genEnd {
			continue // the entry's window or the span not yet full, or past the load
		}
		lo, hi := windowGets(sent, start, ts)
		span := float64(ts-start) / 1e9
		got := e.QPS * span
		// The error is the distance to the nearer end of the range (0
		// inside it), relative to the range's middle.
		mid := float64(lo+hi) / 2
		rel := 0.0
		if got < float64(lo) {
			rel = (got - float64(lo)) / mid
		} else if got > float64(hi) {
			rel = (got - float64(hi)) / mid
		}
		straddled = max(straddled, hi-lo)
		if r := (got - mid) / mid; math.Abs(r) > math.Abs(worstMid) {
			worstMid = r
		}
		errs = append(errs, rel)
		sumErr += rel
		if math.Abs(rel) > math.Abs(worst) {
			worst = rel
		}
		if math.Abs(rel) > exactRateTol {
			t.Errorf("%s: refresh at %s: qps %.1f (%.0f GETs over %v), sent %d to %d GETs (%d round trips straddle an end): %+.2f %%", mode,
				e.TS.Format("15:04:05.000"), e.QPS, got, time.Duration(ts-start), lo, hi, hi-lo, 100*rel)
		}
	}
	sentQPS := float64(len(sent)) * 1e9 / float64(genEnd-genStart)
	if promotions == 0 {
		t.Fatalf("%s: %s never reported hot (sent %.0f/s)\n%s", mode, plantedKey, sentQPS, d.log())
	}
	if len(errs) < 3 {
		t.Fatalf("%s: %d refreshes of %s measured a full window inside the load, want at least 3", mode, len(errs), plantedKey)
	}
	t.Logf("%s: planted %s sent at %.1f/s on average; %d refreshes over full windows: reported vs sent, mean %+.3f %%, worst %+.3f %% (at most %d round trips straddled a window's end; against the range's middle, worst %+.3f %%); promoted %d times",
		mode, plantedKey, sentQPS, len(errs), 100*sumErr/float64(len(errs)), 100*worst, straddled, 100*worstMid, promotions)
}

// windowGets counts the GETs of sent that the capture saw in [start, end):
// lo surely (the whole round trip inside), hi possibly (any of it inside).
func windowGets(sent []sentGet, start, end int64) (lo, hi int) {
	for _, g := range sent {
		if g.t1 >= start && g.t0 < end {
			hi++
			if g.t0 >= start && g.t1 < end {
				lo++
			}
		}
	}
	return lo, hi
}

// TestWindowGets: a round trip inside the window counts surely, one over
// either end possibly, one outside not at all.
func TestWindowGets(t *testing.T) {
	sent := []sentGet{{10, 20}, {95, 105}, {100, 110}, {190, 199}, {195, 205}, {200, 210}, {5, 9}}
	if lo, hi := windowGets(sent, 100, 200); lo != 2 || hi != 4 {
		t.Fatalf("windowGets = %d, %d; want 2, 4", lo, hi)
	}
}
