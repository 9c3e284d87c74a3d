package starve

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

const syscallCONT = syscall.SIGCONT

const (
	hotQPS  = 2000
	planted = "planted:hot"
	// stressFor is how long each run keeps the daemon off the CPU; with
	// the warm-up and the drain each test takes well under a minute.
	stressFor = 30 * time.Second
)

// stress is what keeps the daemon from reading its rings.
type stress int

const (
	stopEvery5s stress = iota // SIGSTOP for 1 s every 5 s
	hogs                      // a nice-0 busy loop on every core (the daemon runs at nice 10)
)

// TestStarvedStop and TestStarvedHogs: under -P 16 load with random keys
// over 16 connections, a planted key read continuously over only 2
// connections above --hot-qps is never announced cold while it is read, and
// no other key is announced hot, while the daemon is (a) stopped for a
// second every five seconds, or (b) kept off the CPU by busy loops at a
// higher priority on every core. Both for the default copy path and for
// --kernel-count.
//
// With --kernel-count the programs shed the planted key's connections too
// (its reads are copied to user space), and a connection whose handshake
// they shed cannot be confirmed by the stream layer afterwards (no reply
// reaches user space in that mode): its requests are rejected as
// unconfirmed until it closes. The kernel still counts them, and the
// detector holds the key's cold verdict on those counts.
//
// TestStarvedStop also runs a planted key hot by its reply bytes only
// (a 20 000-byte value, --hot-bytes, a reads threshold no key reaches)
// with --kernel-count: the kernel counts its reply bytes by bucket, and
// the bytes it counted hold the cold verdict as its reads do.
func TestStarvedStop(t *testing.T) {
	for _, a := range []arm{copyPath, kernelCount, kernelBytes} {
		t.Run(a.String(), func(t *testing.T) { starved(t, stopEvery5s, a) })
	}
}

func TestStarvedHogs(t *testing.T) {
	for _, a := range []arm{copyPath, kernelCount} {
		t.Run(a.String(), func(t *testing.T) { starved(t, hogs, a) })
	}
}

// arm is how the daemon counts, and by what the planted key is hot.
type arm int

const (
	copyPath    arm = iota // every request copied to user space; hot by reads
	kernelCount            // --kernel-count; hot by reads
	kernelBytes            // --kernel-count; hot by reply bytes only
)

func (a arm) String() string {
	return [...]string{"copy", "kernel-count", "kernel-count-bytes"}[a]
}

const (
	// The bytes arm: the planted key's value, and a bytes threshold its
	// reads pass at a fraction of their rate here (thousands a second)
	// while the reads threshold is far above any key's reads.
	plantedValue = 20000
	hotBytes     = 4_000_000
	bytesArmQPS  = 50000
)

func starved(t *testing.T, how stress, a arm) {
	netnstest.RequireRoot(t)
	netnstest.Need(t, "redis-benchmark")
	p := netnstest.NewPair(t)
	cache := p.StartRedis(t, 6379)
	ch := p.StartRedis(t, 6380)
	sub := subscribe(t, ch, "hotsniff:hotkeys")
	// thr is the planted key's reads per second at which it is hot.
	thr := float64(hotQPS)
	args := []string{"--port", "redis=6379", "--hot-qps", strconv.Itoa(hotQPS)}
	switch a {
	case kernelCount:
		args = append(args, "--kernel-count")
	case kernelBytes:
		setKey(t, cache, planted, strings.Repeat("v", plantedValue))
		args = []string{"--port", "redis=6379", "--hot-qps", strconv.Itoa(bytesArmQPS),
			"--hot-bytes", strconv.Itoa(hotBytes), "--kernel-count"}
		thr = float64(hotBytes) / plantedValue
	}
	d := startDaemon(t, p, ch, args...)

	// Random keys: -P 16 over 16 connections.
	load := startProc(t, "redis-benchmark", "-h", cache.Addr().String(), "-p", "6379",
		"-c", "16", "-P", "16", "-r", "1000000", "-n", "2000000000", "-t", "get", "-q")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rd, wg := readKey(ctx, t, cache, planted, 2, 4, 3*time.Second)

	// Warm up: the planted key must be hot before the stress begins.
	warm := time.Now().Add(20 * time.Second)
	for !hasEvent(sub.events(), planted, "hot") {
		if time.Now().After(warm) {
			t.Fatalf("planted key never hot before the stress (read at %.0f/s)\n%s", rd.rate(time.Now()), d.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	hotAt := time.Now()
	if a == kernelBytes {
		for _, e := range sub.events() {
			if e.Key == planted && e.Type == "hot" && e.Reason != "bytes" {
				t.Fatalf("planted key hot for %q, want by its bytes only: %+v", e.Reason, e)
			}
		}
	}
	before := d.scrape(t)
	from := time.Now()
	switch how {
	case stopEvery5s:
		for end := from.Add(stressFor); time.Now().Before(end); {
			time.Sleep(4 * time.Second)
			if err := syscall.Kill(d.pid(), syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			if err := syscall.Kill(d.pid(), syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
	case hogs:
		var hs []*os.Process
		for range runtime.NumCPU() {
			hs = append(hs, startProc(t, "sh", "-c", "while :; do :; done").Process)
		}
		time.Sleep(stressFor)
		for _, h := range hs {
			_ = h.Kill()
		}
	}
	// A second more of reading after the stress: a verdict about the
	// stressed time may come once the daemon has caught up.
	time.Sleep(2 * time.Second)
	to := time.Now()
	cancel()
	wg.Wait()
	stopProc(load)
	time.Sleep(500 * time.Millisecond)
	after := d.scrape(t)

	lo := rd.minRate(from, to)
	t.Logf("planted key: %d reads in all over 2 connections (reconnected every 3 s), lowest 1-s rate during the run %.0f/s (hot at %.0f/s)", rd.total.Load(), lo, thr)
	if lo < thr {
		t.Logf("warning: the planted key's rate fell under the threshold for a while: cold verdicts are judged only where it stayed above")
	}
	colds, falseHot := 0, map[string]int{}
	for _, e := range sub.events() {
		switch {
		case e.Key == planted && e.Type == "cold" && !e.at.Before(hotAt) && !e.at.After(to):
			if rd.minRate(e.at.Add(-2*time.Second), e.at) >= thr {
				colds++
				t.Errorf("cold for the planted key at +%.1fs while it was read at ≥ %.0f/s: %+v", e.at.Sub(from).Seconds(), rd.minRate(e.at.Add(-2*time.Second), e.at), e)
			}
		case e.Key != planted && e.Type == "hot":
			falseHot[e.Key]++
		}
	}
	for k, n := range falseHot {
		t.Errorf("key %q reported hot %d time(s): only the planted key is hot", k, n)
	}
	delta := func(name string) float64 { return sum(after, name) - sum(before, name) }
	t.Logf("figures: cold events for the planted key %d, false hot keys %d; during the run: kernel sampling steps %.0f, segments sampled out %.0f, shed %.0f, ring drops %.0f, stream lost bytes %.0f, incomplete spans %.0f, incomplete seconds %.1f, cold verdicts held %.0f (on the kernel's counts %.0f), late reads %.0f, segments rejected as unconfirmed %.0f; sample rate now %.4g",
		colds, len(falseHot), delta("hotsniff_capture_sample_kernel_steps_total"), delta("hotsniff_capture_sampled_out_total"),
		delta("hotsniff_capture_shed_total"), delta("hotsniff_capture_dropped_total"), delta("hotsniff_stream_lost_bytes_total"),
		delta("hotsniff_detect_incomplete_spans_total"), delta("hotsniff_detect_incomplete_seconds_total"), delta("hotsniff_detect_cold_held_total"), delta("hotsniff_detect_cold_held_kernel_total"),
		delta("hotsniff_detect_late_reads_total"),
		delta(`hotsniff_stream_rejected_total{reason="unconfirmed"}`), after["hotsniff_capture_sample_rate"])
	if t.Failed() || testing.Verbose() {
		t.Logf("events for the planted key: %s", timeline(sub.events(), from))
	}
	if t.Failed() {
		var b strings.Builder
		for k, v := range after {
			if dv := v - before[k]; dv != 0 && !strings.Contains(k, "_bucket") {
				fmt.Fprintf(&b, "\n  %s %+g", k, dv)
			}
		}
		t.Logf("metrics that moved during the run:%s\ndaemon log:\n%s", b.String(), d.log())
	}
}

func hasEvent(evs []ev, key, typ string) bool {
	for _, e := range evs {
		if e.Key == key && e.Type == typ {
			return true
		}
	}
	return false
}

func timeline(evs []ev, from time.Time) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Key == planted {
			fmt.Fprintf(&b, "\n  +%.2fs %s qps=%.0f sample=%g", e.at.Sub(from).Seconds(), e.Type, e.QPS, e.Samp)
		}
	}
	return b.String()
}

// TestLargeKeysFillRing: one connection sending GETs with 65 KB keys fills
// a ring past three quarters. Every GET is counted, or what was not seen is
// counted as a loss, and the detector is told the counts of that time are
// incomplete. When the programs shed the connection whole, the request
// bytes counted shed account for every GET not counted; records a full
// ring dropped cut GETs in the middle (a GET lost per hole, whatever its
// bytes), so there the loss is checked to be counted, not its size in GETs.
func TestLargeKeysFillRing(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	cache := p.StartRedis(t, 6379)
	ch := p.StartRedis(t, 6380)
	d := startDaemon(t, p, ch, "--port", "redis=6379", "--hot-qps", strconv.Itoa(hotQPS))
	before := d.scrape(t)
	base := serverGets(t, cache)

	const n, batch = 8800, 50
	key := strings.Repeat("k", 65<<10)
	req := netnstest.RESP("GET", key)
	sendGets(t, cache, req, n, batch)
	sent := serverGets(t, cache) - base

	// Let the daemon drain its rings: until its counts stop moving.
	var after map[string]float64
	prev := -1.0
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		after = d.scrape(t)
		v := after[`hotsniff_requests_total{op="GET",proto="redis"}`] + after["hotsniff_capture_shed_bytes_total"] + after["hotsniff_stream_lost_bytes_total"]
		if v == prev || after[`hotsniff_requests_total{op="GET",proto="redis"}`] >= float64(sent) {
			break
		}
		prev = v
	}
	delta := func(name string) float64 { return sum(after, name) - sum(before, name) }
	counted := delta(`hotsniff_requests_total{op="GET",proto="redis"}`)
	shedBytes := delta("hotsniff_capture_shed_bytes_total")
	drops := delta(`hotsniff_capture_dropped_total`)
	dropBytes := delta("hotsniff_capture_dropped_bytes_total")
	lost := delta("hotsniff_stream_lost_bytes_total")
	incomplete := delta("hotsniff_detect_incomplete_seconds_total")
	perGet := float64(len(req))
	t.Logf("figures: server cmdstat_get %d, counted %.0f; shed: %.0f segments, %.0f request bytes (%.0f GETs); ring drops %.0f records, %.0f bytes; stream lost bytes %.0f, gaps %.0f, decode error bytes %.0f; kernel sampling steps %.0f; incomplete spans %.0f, %.2f s",
		sent, counted, delta("hotsniff_capture_shed_total"), shedBytes, shedBytes/perGet, drops, dropBytes, lost,
		delta("hotsniff_stream_gaps_total"), delta("hotsniff_decode_errors_total"), delta("hotsniff_capture_sample_kernel_steps_total"),
		delta("hotsniff_detect_incomplete_spans_total"), incomplete)
	if counted < float64(sent) {
		if shedBytes+drops+lost == 0 {
			t.Errorf("%.0f of %d GETs counted and no loss counted", counted, sent)
		}
		if drops == 0 && lost == 0 && counted+shedBytes/perGet < 0.99*float64(sent) {
			// Only whole connections were shed: their request bytes
			// account for the GETs not counted.
			t.Errorf("%.0f of %d GETs counted and only %.0f GETs' worth of request bytes counted shed: the rest vanished silently", counted, sent, shedBytes/perGet)
		}
		if incomplete <= 0 {
			t.Errorf("GETs were missed but hotsniff_detect_incomplete_seconds_total did not grow")
		}
	}
	if t.Failed() {
		t.Logf("daemon log:\n%s", d.log())
	}
}

// sendGets sends n copies of req over one connection, batch at a time, and
// reads the replies.
func sendGets(t *testing.T, srv netip.AddrPort, req []byte, n, batch int) {
	t.Helper()
	c, err := net.Dial("tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 0, len(req)*batch)
	for range batch {
		buf = append(buf, req...)
	}
	reply := make([]byte, 5*batch) // "$-1\r\n" each
	for sent := 0; sent < n; sent += batch {
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := readFull(c, reply); err != nil {
			t.Fatal(err)
		}
	}
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
