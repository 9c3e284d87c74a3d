package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

// Fleet test parameters. The detector's window at --hot-qps 500 is 800/500
// = 1.6 s; the stated cold delay is that window plus one sub-window (W/8)
// plus the daemon's 100 ms tick.
const (
	fleetHotQPS  = 500
	fleetReaders = 8
	fleetRate    = 250 // reads/s per reader: 2000/s per process, 4× the threshold
	fleetWindow  = 1600 * time.Millisecond
	coldDelay    = fleetWindow + fleetWindow/8 + 100*time.Millisecond
	// deliverySlack covers PUBLISH, the channel and the subscriber.
	deliverySlack = 500 * time.Millisecond
)

// fleetSeconds is how long the main fleet reads: 60 s, or
// HOTSNIFF_FLEET_SECONDS for a quicker local run.
func fleetSeconds(t *testing.T) float64 {
	if s := os.Getenv("HOTSNIFF_FLEET_SECONDS"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v < 10 {
			t.Fatalf("HOTSNIFF_FLEET_SECONDS=%q: want a number >= 10", s)
		}
		return v
	}
	return 60
}

// fleetProc is one application process of the fleet.
type fleetProc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	stats []fleetStat
	done  chan struct{}
	errb  testutil.Buffer
}

func startFleetApp(t *testing.T, cache, channel, key string, shim bool, secs float64) *fleetProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), "HOTSNIFF_FLEET_APP=1", "FLEET_CACHE="+cache, "FLEET_CHANNEL="+channel,
		"FLEET_KEY="+key, "FLEET_READERS="+strconv.Itoa(fleetReaders), "FLEET_RATE="+strconv.Itoa(fleetRate),
		"FLEET_SECONDS="+strconv.FormatFloat(secs, 'f', -1, 64), "FLEET_SHIM="+map[bool]string{true: "1", false: "0"}[shim])
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	fp := &fleetProc{cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &fp.errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-fp.done
		}
	})
	go func() {
		defer close(fp.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var s fleetStat
			if json.Unmarshal(sc.Bytes(), &s) == nil {
				fp.mu.Lock()
				fp.stats = append(fp.stats, s)
				fp.mu.Unlock()
			}
		}
		_ = cmd.Wait()
	}()
	return fp
}

// wait waits for the process to finish and returns its final line.
func (fp *fleetProc) wait(t *testing.T, timeout time.Duration) fleetStat {
	t.Helper()
	select {
	case <-fp.done:
	case <-time.After(timeout):
		t.Fatalf("fleet app did not finish; stderr:\n%s", fp.errb.String())
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if n := len(fp.stats); n == 0 || !fp.stats[n-1].Done || fp.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("fleet app failed (exit %v); stderr:\n%s", fp.cmd.ProcessState, strings.Join(fp.errb.Lines(), "\n"))
	}
	return fp.stats[len(fp.stats)-1]
}

// rateBetween is the process's reads/s and local hits/s between two times,
// from its once-a-second lines.
func (fp *fleetProc) rateBetween(from, to time.Time) (reads, local float64) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	var a, b *fleetStat
	for i := range fp.stats {
		s := &fp.stats[i]
		if a == nil && s.T >= from.UnixNano() {
			a = s
		}
		if s.T <= to.UnixNano() {
			b = s
		}
	}
	if a == nil || b == nil || b.T <= a.T {
		return 0, 0
	}
	dt := float64(b.T-a.T) / 1e9
	return float64(b.Reads-a.Reads) / dt, float64(b.Local-a.Local) / dt
}

// keyEvents collects the channel's events for keys, with their arrival time.
type keyEvents struct {
	mu sync.Mutex
	ev []timedEvent
}

type timedEvent struct {
	at time.Time
	e  *event.Event
}

func followChannel(t *testing.T, addr string) *keyEvents {
	t.Helper()
	sub := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { sub.Close() })
	ps := sub.Subscribe(context.Background(), "hotsniff:hotkeys")
	t.Cleanup(func() { ps.Close() })
	if _, err := ps.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	ke := &keyEvents{}
	go func() {
		for msg := range ps.Channel() {
			evs, err := event.DecodeMessage(nil, []byte(msg.Payload))
			if err != nil {
				continue
			}
			now := time.Now()
			ke.mu.Lock()
			for _, e := range evs {
				ke.ev = append(ke.ev, timedEvent{now, e})
			}
			ke.mu.Unlock()
		}
	}()
	return ke
}

// of returns key's events received in [from, to).
func (ke *keyEvents) of(key string, from, to time.Time) []timedEvent {
	ke.mu.Lock()
	defer ke.mu.Unlock()
	var out []timedEvent
	for _, te := range ke.ev {
		if string(te.e.Key) == key && !te.at.Before(from) && te.at.Before(to) {
			out = append(out, te)
		}
	}
	return out
}

// onsets counts hot events that start a hot period (not refreshes), and
// colds.
func onsets(evs []timedEvent) (hot, cold int) {
	isHot := false
	for _, te := range evs {
		switch te.e.Type {
		case event.TypeHot:
			if !isHot {
				hot++
			}
			isHot = true
		case event.TypeCold:
			cold++
			isHot = false
		}
	}
	return hot, cold
}

// hotkey reads the daemon's /hotkeys entry for key.
func (d *daemonProc) hotkey(t *testing.T, key string) (*event.Event, bool) {
	t.Helper()
	for _, e := range d.hotkeys(t) {
		if string(e.Key) == key {
			return e, true
		}
	}
	return nil, false
}

// hotkeys reads the daemon's /hotkeys.
func (d *daemonProc) hotkeys(t *testing.T) []*event.Event {
	t.Helper()
	resp, err := http.Get(d.http + "/hotkeys")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Keys []*event.Event `json:"keys"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc.Keys
}

// commandCalls returns INFO commandstats calls per command.
func commandCalls(t *testing.T, rdb *redis.Client) map[string]float64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseFloat(strings.SplitN(rest, ",", 2)[0], 64)
		out[name] = n
	}
	return out
}

// TestAbsorbedFleet runs the real daemon capturing live (TC on a veth
// pair, as root) in front of a real redis-server, with application
// processes reading one key through the client shim:
//
//   - baseline: 3 processes without the shim, the GET rate the shard takes;
//   - fleet: 3 processes with the shim, 8 readers each, for 60 s: exactly
//     one hot and no cold while they read, the last refresh's qps within
//     ±15 % of the reads the processes counted, cold within the stated
//     delay once they stop; the shard's GET rate with shims against the
//     baseline, and the ECHO rate the reports add;
//   - mixed: one process with the shim and one without: no flapping, and
//     absorbed_qps close to the shim process's own local hits.
func TestAbsorbedFleet(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	cache := p.StartRedis(t, 6379)
	chanRedis := p.StartRedis(t, 6390)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: cache.String()})
	defer admin.Close()
	for _, k := range []string{"base:hot", "fleet:hot", "mixed:hot"} {
		if err := admin.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ke := followChannel(t, chanRedis.String())
	d := startDaemon(t, p, "--capture", "tc", "--port", "redis=6379", "--hot-qps", strconv.Itoa(fleetHotQPS),
		"--ttl", "20s", "--redis-url", "redis://127.0.0.1:6390")
	secs := fleetSeconds(t)
	var report []string
	logf := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		report = append(report, s)
		t.Log(s)
	}

	// Baseline: the same fleet without the shim.
	const baseSecs = 10
	var base []*fleetProc
	for range 3 {
		base = append(base, startFleetApp(t, cache.String(), chanRedis.String(), "base:hot", false, baseSecs))
	}
	time.Sleep(4 * time.Second)
	c0, t0 := commandCalls(t, admin), time.Now()
	time.Sleep(5 * time.Second)
	c1, t1 := commandCalls(t, admin), time.Now()
	baseGet := (c1["get"] - c0["get"]) / t1.Sub(t0).Seconds()
	var baseReads float64
	for _, fp := range base {
		fp.wait(t, 30*time.Second)
		r, _ := fp.rateBetween(t0, t1)
		baseReads += r
	}
	logf("baseline (no shim): shard GET rate %.0f/s, reads counted by the 3 processes %.0f/s", baseGet, baseReads)

	// The fleet with the shim.
	fleetStart := time.Now()
	var fleet []*fleetProc
	for range 3 {
		fleet = append(fleet, startFleetApp(t, cache.String(), chanRedis.String(), "fleet:hot", true, secs))
	}
	// Steady state: from 15 s in, for 10 s.
	time.Sleep(15 * time.Second)
	c0, t0 = commandCalls(t, admin), time.Now()
	time.Sleep(10 * time.Second)
	c1, t1 = commandCalls(t, admin), time.Now()
	shimGet := (c1["get"] - c0["get"]) / t1.Sub(t0).Seconds()
	echoRate := (c1["echo"] - c0["echo"]) / t1.Sub(t0).Seconds()
	var steadyReads float64
	for _, fp := range fleet {
		r, _ := fp.rateBetween(t0, t1)
		steadyReads += r
	}
	logf("fleet (3 processes with the shim): shard GET rate %.1f/s in steady state, %.2f%% of the baseline's %.0f/s (ratio %.4f); reads counted %.0f/s",
		shimGet, 100*shimGet/baseGet, baseGet, shimGet/baseGet, steadyReads)
	logf("reports: %.1f ECHO/s at the shard, %.1f per process per hot key", echoRate, echoRate/3)
	if shimGet > baseGet/10 {
		t.Errorf("with shims the shard still takes %.0f GET/s of %.0f", shimGet, baseGet)
	}
	if echoRate/3 > 25 {
		t.Errorf("reports add %.1f commands/s per process, want about 20 (one per 50 ms refresh)", echoRate/3)
	}

	var finals []fleetStat
	for _, fp := range fleet {
		finals = append(finals, fp.wait(t, time.Duration(secs+30)*time.Second))
	}
	var lastEnd int64
	var reads, local, reported uint64
	var dur float64
	for _, s := range finals {
		lastEnd = max(lastEnd, s.T)
		reads += s.Reads
		local += s.Local
		reported += s.Reported
		dur += float64(s.T-s.Start) / 1e9 / 3
		if s.Errors != 0 || s.NotHot != 0 || s.ColdInval != 0 {
			t.Errorf("a process saw %d read errors, dropped %d entries as not hot, %d cold messages", s.Errors, s.NotHot, s.ColdInval)
		}
	}
	stop := time.Unix(0, lastEnd)
	readRate := float64(reads) / dur
	logf("fleet: %d reads in %.1f s (%.0f/s), %d served locally (%.2f%%), %d reported", reads, dur, readRate, local, 100*float64(local)/float64(reads), reported)

	during := ke.of("fleet:hot", fleetStart, stop)
	hot, cold := onsets(during)
	var last *event.Event
	var lastAt time.Time
	for _, te := range during {
		if te.e.Type == event.TypeHot {
			last, lastAt = te.e, te.at
		}
	}
	if hot != 1 || cold != 0 || last == nil {
		t.Fatalf("while the fleet read: %d hot onsets, %d cold, want 1 and 0", hot, cold)
	}
	// The refresh measured the last window before it: compare it with what
	// the processes counted over that stretch (their once-a-second lines
	// around it), not only with the whole run's average (a loaded machine
	// slows paced readers unevenly).
	var winRate float64
	for _, fp := range fleet {
		r, _ := fp.rateBetween(lastAt.Add(-fleetWindow-time.Second), lastAt)
		winRate += r
	}
	logf("fleet: %d events while reading (1 hot, %d refreshes, 0 cold); last refresh qps %.1f, absorbed_qps %.1f; reads counted over the window before it %.0f/s (%+.1f%%), over the whole run %.0f/s (%+.1f%%)",
		len(during), len(during)-1, last.QPS, last.AbsorbedQPS, winRate, 100*(last.QPS-winRate)/winRate, readRate, 100*(last.QPS-readRate)/readRate)
	if math.Abs(last.QPS-winRate) > 0.15*winRate {
		t.Errorf("last refresh qps %.1f, want within ±15%% of the %.0f/s the processes counted", last.QPS, winRate)
	}
	if last.AbsorbedQPS < 0.8*last.QPS {
		t.Errorf("absorbed_qps %.1f of qps %.1f: the shims served most reads", last.AbsorbedQPS, last.QPS)
	}

	// Readers stopped: cold within the stated delay.
	var coldAt time.Time
	for deadline := time.Now().Add(coldDelay + 5*time.Second); coldAt.IsZero() && time.Now().Before(deadline); {
		for _, te := range ke.of("fleet:hot", stop, time.Now().Add(time.Hour)) {
			if te.e.Type == event.TypeCold {
				coldAt = te.at
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if coldAt.IsZero() {
		t.Fatalf("no cold within %v of the last read", coldDelay+5*time.Second)
	}
	logf("fleet: cold %v after the last read (stated delay %v, + %v delivery)", coldAt.Sub(stop).Round(time.Millisecond), coldDelay, deliverySlack)
	if coldAt.Sub(stop) > coldDelay+deliverySlack {
		t.Errorf("cold %v after the last read, want within %v", coldAt.Sub(stop), coldDelay+deliverySlack)
	}

	// Mixed fleet: one process with the shim, one without.
	const mixedSecs = 20
	mixedStart := time.Now()
	withShim := startFleetApp(t, cache.String(), chanRedis.String(), "mixed:hot", true, mixedSecs)
	without := startFleetApp(t, cache.String(), chanRedis.String(), "mixed:hot", false, mixedSecs)
	time.Sleep(8 * time.Second)
	var absorbed []float64
	a0 := time.Now()
	for range 8 {
		time.Sleep(time.Second)
		if e, ok := d.hotkey(t, "mixed:hot"); ok {
			absorbed = append(absorbed, e.AbsorbedQPS)
		}
	}
	a1 := time.Now()
	fs := withShim.wait(t, 30*time.Second)
	ws := without.wait(t, 30*time.Second)
	mixedEnd := time.Unix(0, max(fs.T, ws.T))
	_, localRate := withShim.rateBetween(a0.Add(-fleetWindow), a1)
	var meanAbs float64
	for _, a := range absorbed {
		meanAbs += a / float64(len(absorbed))
	}
	mh, mc := onsets(ke.of("mixed:hot", mixedStart, mixedEnd))
	logf("mixed: %d hot onsets, %d cold while reading; /hotkeys absorbed_qps %.0f/s (mean of %d samples), the shim process's local hits %.0f/s (%+.1f%%)",
		mh, mc, meanAbs, len(absorbed), localRate, 100*(meanAbs-localRate)/localRate)
	if mh != 1 || mc != 0 {
		t.Errorf("mixed fleet: %d hot onsets, %d cold, want 1 and 0", mh, mc)
	}
	if len(absorbed) < 6 || math.Abs(meanAbs-localRate) > 0.15*localRate {
		t.Errorf("mixed fleet: absorbed_qps %v, want within ±15%% of %.0f", absorbed, localRate)
	}
	_, m := d.scrape(t)
	logf("daemon metrics: reports %v, hits %v, rejected unpaired %v not_hot %v capped %v malformed %v",
		m["hotsniff_absorbed_reports_total"], m["hotsniff_absorbed_hits_total"], m[`hotsniff_absorbed_rejected_total{reason="unpaired"}`],
		m[`hotsniff_absorbed_rejected_total{reason="not_hot"}`], m[`hotsniff_absorbed_rejected_total{reason="capped"}`], m[`hotsniff_absorbed_rejected_total{reason="malformed"}`])
	if m["hotsniff_absorbed_reports_total"] == 0 || m[`hotsniff_absorbed_rejected_total{reason="unpaired"}`] != 0 ||
		m[`hotsniff_absorbed_rejected_total{reason="malformed"}`] != 0 || m[`hotsniff_absorbed_rejected_total{reason="capped"}`] != 0 {
		t.Errorf("daemon absorbed metrics unexpected")
	}
	if out := os.Getenv("HOTSNIFF_FLEET_REPORT"); out != "" {
		os.WriteFile(out, []byte(strings.Join(report, "\n")+"\n"), 0o644)
	}
}
