package detect

import (
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/event"
)

// recorder is an Emitter that keeps every event.
type recorder struct{ ev []event.Event }

func (r *recorder) Emit(e *event.Event) { r.ev = append(r.ev, *e) }

// of returns the types of the events for key, in order.
func (r *recorder) of(key string) []string {
	var t []string
	for _, e := range r.ev {
		if string(e.Key) == key {
			t = append(t, e.Type)
		}
	}
	return t
}

func (r *recorder) count(key, typ string) int {
	n := 0
	for _, e := range r.ev {
		if string(e.Key) == key && e.Type == typ {
			n++
		}
	}
	return n
}

var (
	srvA = netip.MustParseAddrPort("10.0.0.5:6379")
	srvB = netip.MustParseAddrPort("10.0.0.6:6379")
)

const base = int64(1_700_000_000) * 1e9

// stream is a key read (or written) at an exact rate, evenly spaced, so the
// true rate is known to the request.
type stream struct {
	key    string
	qps    float64
	server netip.AddrPort
	proto  decode.Proto
	ns     int32
	prefix bool
	write  bool
	weight uint32
}

// play feeds the streams from t0 to t1 (ns since base), merged in time order.
func play(d *Detector, from, to time.Duration, ss ...stream) {
	next := make([]int64, len(ss))
	for i := range ss {
		next[i] = int64(from) + int64(float64(i)*1e9/ss[i].qps/float64(len(ss)))
	}
	var r decode.Request
	for {
		i := -1
		for j := range ss {
			if next[j] < int64(to) && (i < 0 || next[j] < next[i]) {
				i = j
			}
		}
		if i < 0 {
			return
		}
		s := &ss[i]
		srv := s.server
		if !srv.IsValid() {
			srv = srvA
		}
		p := s.proto
		if p == decode.ProtoUnknown {
			p = decode.ProtoRedis
		}
		f := decode.Flow{Server: srv, Proto: p, TS: base + next[i]}
		r = decode.Request{Op: "GET", NS: s.ns, Write: s.write}
		w := s.weight
		if w == 0 {
			w = 1
		}
		d.Key(&f, &r, decode.Key{Bytes: []byte(s.key), Weight: w, Prefix: s.prefix})
		next[i] += int64(1e9 / s.qps)
	}
}

func newDet(t *testing.T, c Config) (*Detector, *recorder) {
	t.Helper()
	rec := &recorder{}
	d, err := New(c, rec)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d, rec
}

const T = 1000.0 // threshold used by the unit tests

func TestHotRefreshCold(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T, RefreshEvery: 500 * time.Millisecond})
	noise := stream{key: "other", qps: 50}
	play(d, 0, time.Second, stream{key: "k", qps: 1.5 * T}, noise)
	if got := rec.of("k"); len(got) == 0 || slices.Contains(got, "cold") {
		t.Fatalf("after 1s at 1.5×: events %v, want hot (and refreshes)", got)
	}
	e := rec.ev[0]
	if e.QPS < 1.2*T || e.QPS > 1.8*T || e.Proto != "redis" || e.Server != "10.0.0.5:6379" ||
		e.NS != "0" || e.Source != "detected" || e.TTLms != 60000 || e.V != 1 || e.TS.UnixNano() <= base {
		t.Fatalf("hot event %+v", e)
	}
	// 0.8× is between the cold ratio and the threshold: stays hot, refreshed.
	play(d, time.Second, 3*time.Second, stream{key: "k", qps: 0.8 * T}, noise)
	if n := rec.count("k", "cold"); n != 0 {
		t.Fatalf("cold at 0.8× (hysteresis broken): %v", rec.of("k"))
	}
	if n := rec.count("k", "hot"); n < 5 || n > 7 {
		t.Fatalf("refreshes in 3s at RefreshEvery 500ms: %d hot events, want 6±1", n)
	}
	if hs := d.HotSet(); len(hs) != 1 || string(hs[0].Key) != "k" || hs[0].QPS < 0.7*T || hs[0].QPS > 0.9*T {
		t.Fatalf("HotSet %+v", hs)
	}
	// 0.5× is below the cold ratio: cold within a window.
	play(d, 3*time.Second, 4*time.Second, stream{key: "k", qps: 0.5 * T}, noise)
	if got := rec.of("k"); got[len(got)-1] != "cold" || rec.count("k", "cold") != 1 {
		t.Fatalf("after 0.5×: %v, want one cold at the end", got)
	}
	// 0.9× is not enough to become hot again.
	play(d, 4*time.Second, 5*time.Second, stream{key: "k", qps: 0.9 * T}, noise)
	if n := rec.count("k", "hot"); rec.of("k")[len(rec.of("k"))-1] != "cold" {
		t.Fatalf("0.9× became hot again (%d hot events)", n)
	}
	if rec.count("other", "hot") != 0 {
		t.Fatal("a key at 5% of the threshold became hot")
	}
}

func TestNoFlapAroundThreshold(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T})
	at := time.Duration(0)
	for i := range 20 {
		q := 1.1 * T
		if i%2 == 1 {
			q = 0.9 * T
		}
		play(d, at, at+300*time.Millisecond, stream{key: "k", qps: q})
		at += 300 * time.Millisecond
	}
	if got := rec.of("k"); !slices.Equal(got, []string{"hot"}) {
		t.Fatalf("oscillating 0.9×–1.1×: %v, want a single hot", got)
	}
}

func TestLifetimeViaTick(t *testing.T) {
	for _, det := range []string{DetectorDefault, DetectorTair} {
		t.Run(det, func(t *testing.T) {
			c := Config{HotQPS: T, Detector: det, TTL: 10 * time.Second,
				Tair: TairConfig{SampleMax: 2000}}
			d, rec := newDet(t, c)
			play(d, 0, 2*time.Second, stream{key: "k", qps: 5 * T}, stream{key: "bg", qps: 100})
			if rec.count("k", "hot") != 1 {
				t.Fatalf("events %v, want one hot", rec.of("k"))
			}
			last := base + int64(2*time.Second)
			// Without Tick nothing happens: there is no other clock.
			if rec.count("k", "cold") != 0 {
				t.Fatal("cold without traffic or Tick")
			}
			before, after := last+int64(c.TTL)-int64(time.Second), last+int64(c.TTL)+int64(100*time.Millisecond)
			if det == DetectorDefault {
				// The default cools on rate: within a window (800ms here)
				// without reads.
				before, after = last+int64(100*time.Millisecond), last+int64(time.Second)
			}
			d.Tick(before)
			if rec.count("k", "cold") != 0 {
				t.Fatalf("cold before its time: %v", rec.of("k"))
			}
			d.Tick(after)
			if got := rec.of("k"); got[len(got)-1] != "cold" {
				t.Fatalf("no cold after the lifetime: %v", got)
			}
			if len(d.HotSet()) != 0 || d.Stats().HotKeys != 0 {
				t.Fatal("hot set not empty after expiry")
			}
		})
	}
}

func TestInvalidate(t *testing.T) {
	// A 1ms gap and no cacheable verdict: this test is about merging alone
	// (TestWriteHot covers the verdict).
	d, rec := newDet(t, Config{HotQPS: T, InvalidateGap: time.Millisecond, UncacheableWrites: -1})
	play(d, 0, time.Second, stream{key: "k", qps: 2 * T}, stream{key: "cool", qps: 10})
	// Writes to a cold key never invalidate.
	play(d, time.Second, time.Second+10*time.Millisecond, stream{key: "cool", qps: 1000, write: true})
	if n := rec.count("cool", "invalidate"); n != 0 {
		t.Fatalf("invalidate for a key that is not hot: %d", n)
	}
	// A burst of writes 0.1ms apart for 1.55ms: the first is sent at once,
	// the next ones merged into one per millisecond (sent at 1.0ms), and
	// those after it (1.1–1.5ms) sent once the gap has passed.
	start := time.Second + 20*time.Millisecond
	play(d, start, start+1550*time.Microsecond, stream{key: "k", qps: 10000, write: true})
	n0 := rec.count("k", "invalidate")
	if n0 != 2 {
		t.Fatalf("invalidates during a 1.5ms burst: %d, want 2", n0)
	}
	first := rec.ev[slices.IndexFunc(rec.ev, func(e event.Event) bool { return e.Type == "invalidate" })]
	if first.TS.UnixNano() != base+int64(start) || first.QPS != 0 {
		t.Fatalf("first invalidate %+v not sent at the first write", first)
	}
	d.Tick(base + int64(start+30*time.Millisecond))
	if n := rec.count("k", "invalidate"); n != n0+1 {
		t.Fatalf("merged write not invalidated after the gap: %d then %d", n0, n)
	}
	// Writes never count toward hotness.
	d2, rec2 := newDet(t, Config{HotQPS: T})
	play(d2, 0, 2*time.Second, stream{key: "w", qps: 10 * T, write: true})
	if len(rec2.ev) != 0 {
		t.Fatalf("writes made events: %v", rec2.ev)
	}
}

func TestRulesAndIgnore(t *testing.T) {
	c := Config{
		HotQPS: T,
		Rules: []Rule{
			{Pattern: "session:*", HotQPS: 5 * T},
			{Pattern: "cfg:*:flag", HotQPS: 0.2 * T},
			{Pattern: "mc:*", HotQPS: 0.2 * T, Proto: "memcache"},
		},
		Ignore: []string{"health*", "exact-key"},
	}
	d, rec := newDet(t, c)
	play(d, 0, 2*time.Second,
		stream{key: "session:1", qps: 3 * T},      // below its own 5×
		stream{key: "session:2", qps: 6 * T},      // above it
		stream{key: "cfg:a/b:flag", qps: 0.3 * T}, // '*' crosses '/'; above 0.2×
		stream{key: "cfg:a:flags", qps: 0.3 * T},  // no match: default threshold
		stream{key: "mc:1", qps: 0.3 * T},         // rule is memcache only
		stream{key: "mc:2", qps: 0.3 * T, proto: decode.ProtoMemcache, ns: decode.NoNS},
		stream{key: "healthcheck", qps: 5 * T},
		stream{key: "exact-key", qps: 5 * T},
		stream{key: "exact-key2", qps: 5 * T},
	)
	want := map[string]bool{"session:1": false, "session:2": true, "cfg:a/b:flag": true, "cfg:a:flags": false,
		"mc:1": false, "mc:2": true, "healthcheck": false, "exact-key": false, "exact-key2": true}
	for k, hot := range want {
		if got := rec.count(k, "hot") > 0; got != hot {
			t.Errorf("%s: hot %v, want %v", k, got, hot)
		}
	}
	for _, e := range rec.ev {
		if string(e.Key) == "mc:2" && (e.Proto != "memcache" || e.NS != "") {
			t.Errorf("memcache event %+v", e)
		}
	}
	if s := (d.Stats()); s.Ignored < 2 {
		t.Errorf("Stats.Ignored = %d, want >= 2", s.Ignored)
	}
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		p, k string
		ok   bool
	}{
		{"a*", "abc", true}, {"a*", "ba", false}, {"*", "", true}, {"a?c", "abc", true},
		{"a?c", "ac", false}, {"*:x", "a:b:x", true}, {"*:x", "a:b:xy", false},
		{"a*b*c", "aXbYbZc", true}, {"a*b*c", "aXbYbZ", false}, {"abc", "abc", true}, {"abc", "abcd", false},
	} {
		p := compilePattern(c.p)
		if got := p.match([]byte(c.k)); got != c.ok {
			t.Errorf("%q ~ %q = %v, want %v", c.p, c.k, got, c.ok)
		}
	}
}

func TestSeparation(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T})
	// Same key on two servers, each at 0.6×: together 1.2×, but not hot.
	// Same key in two namespaces of one server, each at 0.6×: not hot.
	play(d, 0, 2*time.Second,
		stream{key: "srv", qps: 0.6 * T, server: srvA}, stream{key: "srv", qps: 0.6 * T, server: srvB},
		stream{key: "ns", qps: 0.6 * T, ns: 0}, stream{key: "ns", qps: 0.6 * T, ns: 3},
		stream{key: "proto", qps: 0.6 * T}, stream{key: "proto", qps: 0.6 * T, proto: decode.ProtoTair},
	)
	if len(rec.ev) != 0 {
		t.Fatalf("keys split below the threshold became hot: %+v", rec.ev)
	}
	// Each above the threshold: two separate hot keys with their own identity.
	play(d, 2*time.Second, 3*time.Second,
		stream{key: "srv", qps: 1.5 * T, server: srvA}, stream{key: "srv", qps: 1.5 * T, server: srvB},
		stream{key: "ns", qps: 1.5 * T, ns: 0}, stream{key: "ns", qps: 1.5 * T, ns: 3},
	)
	got := map[string]bool{}
	for _, e := range rec.ev {
		got[fmt.Sprintf("%s/%s/%s/%s", e.Type, e.Server, e.NS, e.Key)] = true
	}
	for _, w := range []string{"hot/10.0.0.5:6379/0/srv", "hot/10.0.0.6:6379/0/srv", "hot/10.0.0.5:6379/0/ns", "hot/10.0.0.5:6379/3/ns"} {
		if !got[w] {
			t.Errorf("missing %s in %v", w, got)
		}
	}
	if len(rec.ev) != 4 {
		t.Errorf("%d events, want 4", len(rec.ev))
	}
}

func TestPrefixAndWeight(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T})
	// 300 prefix reads/s of 5 skeys each: weighted 1500/s, hot; the same
	// count of weight-1 reads is not.
	play(d, 0, 2*time.Second,
		stream{key: "pkey", qps: 300, weight: 5, prefix: true, proto: decode.ProtoTair, ns: 12},
		stream{key: "plain", qps: 300, proto: decode.ProtoTair, ns: 12})
	if len(rec.ev) != 1 || string(rec.ev[0].Key) != "pkey" || !rec.ev[0].Prefix || rec.ev[0].NS != "12" || rec.ev[0].Proto != "tair" {
		t.Fatalf("events %+v, want one prefix hot event for pkey", rec.ev)
	}
	if q := rec.ev[0].QPS; q < 1200 || q > 1800 {
		t.Fatalf("qps %v, want the weighted rate ~1500", q)
	}
}

func TestMaxHot(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T, MaxHot: 3})
	var ss []stream
	for i := range 5 {
		ss = append(ss, stream{key: fmt.Sprint("k", i), qps: 2 * T})
	}
	play(d, 0, 2*time.Second, ss...)
	d.Tick(base + int64(2*time.Second))
	if n := len(d.HotSet()); n != 3 {
		t.Fatalf("hot set has %d keys, MaxHot 3", n)
	}
	st := d.Stats()
	if st.HotKeys != 3 || st.Evictions == 0 || st.Cold != st.Evictions {
		t.Fatalf("stats %+v", st)
	}
	// Every eviction is announced: hot minus cold events = current hot set.
	if h, c := countType(rec, "hot"), countType(rec, "cold"); h-c != 3 {
		t.Fatalf("%d hot, %d cold events, want a difference of 3", h, c)
	}
}

func countType(r *recorder, typ string) int {
	n := 0
	for _, e := range r.ev {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func TestDeterminism(t *testing.T) {
	for _, det := range []string{DetectorDefault, DetectorTair} {
		run := func() []event.Event {
			d, rec := newDet(t, Config{HotQPS: T, Detector: det, TTL: time.Second, Tair: TairConfig{SampleMax: 5000}})
			var ss []stream
			for i := range 20 {
				ss = append(ss, stream{key: fmt.Sprint("k", i), qps: float64(200 * (i + 1))})
			}
			play(d, 0, 3*time.Second, ss...)
			play(d, 3*time.Second, 4*time.Second, stream{key: "k19", qps: 100, write: true})
			d.Tick(base + int64(10*time.Second))
			return rec.ev
		}
		a, b := run(), run()
		if len(a) == 0 || !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: runs differ or are empty (%d vs %d events)", det, len(a), len(b))
		}
	}
}

func TestTairFindsDominantKey(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T, Detector: DetectorTair})
	var ss []stream
	for i := range 200 {
		ss = append(ss, stream{key: fmt.Sprint("bg", i), qps: 500})
	}
	ss = append(ss, stream{key: "big", qps: 20 * T}, stream{key: "second", qps: 10 * T})
	play(d, 0, 3*time.Second, ss...)
	if rec.count("big", "hot") != 1 {
		t.Fatalf("tair missed a key at 20× holding 17%% of traffic: %v", rec.ev)
	}
	// One key per round, and the top bucket is always the same: the second
	// key is never reached. This is the flaw the default detector fixes.
	if rec.count("second", "hot") != 0 {
		t.Logf("tair also found the second key")
	}
}

func TestConfig(t *testing.T) {
	bad := []Config{
		{},
		{HotQPS: -1},
		{HotQPS: 1, Detector: "magic"},
		{HotQPS: 1, Buckets: 1000},
		{HotQPS: 1, ColdRatio: 2},
		{HotQPS: 1, Rules: []Rule{{Pattern: ""}}},
		{HotQPS: 1, Rules: []Rule{{Pattern: "a", Proto: "mysql"}}},
		{HotQPS: 1, Ignore: []string{""}},
		{HotQPS: 1, TTL: -time.Second},
	}
	for i, c := range bad {
		if _, err := New(c, nil); err == nil || !strings.HasPrefix(err.Error(), "configure detector: ") {
			t.Errorf("config %d: err %v, want a configure error", i, err)
		}
	}
	// The file form of these settings is the config package's (its
	// TestPrecedence); here the detector fills in what is left zero.
	c := Config{HotQPS: 2000, Detector: "tair", TTL: 30 * time.Second,
		Rules: []Rule{{Pattern: "session:*", HotQPS: 5000, Proto: "redis"}}, Ignore: []string{"health*"}}
	d, err := New(c, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	got := d.Config()
	if got.HotQPS != 2000 || got.Detector != "tair" || got.TTL != 30*time.Second || got.RefreshEvery != 15*time.Second ||
		len(got.Rules) != 1 || got.Rules[0].HotQPS != 5000 || got.Rules[0].Proto != "redis" || got.Ignore[0] != "health*" ||
		got.Window != 400*time.Millisecond {
		t.Fatalf("config %+v", got)
	}
}

func TestObserveAllocs(t *testing.T) {
	for _, det := range []string{DetectorDefault, DetectorTair} {
		d, _ := newDet(t, Config{HotQPS: T, Detector: det})
		keys := make([][]byte, 4096)
		for i := range keys {
			keys[i] = fmt.Appendf(nil, "key:%d", i%37*(i%3+1))
		}
		f := decode.Flow{Server: srvA, Proto: decode.ProtoRedis, TS: base}
		r := decode.Request{Op: "GET"}
		i := 0
		step := func() {
			f.TS += 1000
			d.Key(&f, &r, decode.Key{Bytes: keys[i&4095], Weight: 1})
			i++
		}
		for range 1_000_000 { // warm up: keys become hot, slots fill
			step()
		}
		// Stay within one sub-window so the per-window publication (which
		// allocates a little, 8 times per window) is not counted.
		f.TS = (f.TS/int64(25*time.Millisecond) + 1) * int64(25*time.Millisecond)
		step()
		if a := testing.AllocsPerRun(10000, step); a != 0 {
			t.Errorf("%s: %v allocs per observation", det, a)
		}
	}
}

func TestIndexAgainstMap(t *testing.T) {
	x := newIndex(64)
	ref := map[uint64]int32{}
	rng := uint64(1)
	for i := range 30000 {
		rng = rng*6364136223846793005 + 1442695040888963407
		h := rng>>58 | 1<<6 // 64 distinct values, colliding low bits
		h = h*0x10000 + (h & 7) + 1
		if _, ok := ref[h]; ok && i%3 == 0 {
			x.del(h)
			delete(ref, h)
		} else if len(ref) < 64 {
			x.set(h, int32(i))
			ref[h] = int32(i)
		}
		for k, v := range ref {
			if got, ok := x.get(k); !ok || got != v {
				t.Fatalf("step %d: get(%x) = %v %v, want %v", i, k, got, ok, v)
			}
		}
	}
	for k := range ref {
		x.del(k)
	}
	for i, h := range x.h {
		if h != 0 {
			t.Fatalf("slot %d not empty after deleting all", i)
		}
	}
}

func TestClockRobustness(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T})
	play(d, 0, time.Second, stream{key: "bg", qps: 100})
	// 2000 reads of one key stamped 1s in the past: they cannot be placed in
	// the windows and must not make it hot now.
	f := decode.Flow{Server: srvA, Proto: decode.ProtoRedis}
	r := decode.Request{Op: "GET"}
	for i := range 2000 {
		f.TS = base + int64(i)
		d.Key(&f, &r, decode.Key{Bytes: []byte("late"), Weight: 1})
	}
	// A bogus packet an hour ahead, then normal time again: detection
	// resumes after the clock restarts.
	f.TS = base + int64(time.Hour)
	d.Key(&f, &r, decode.Key{Bytes: []byte("bg"), Weight: 1})
	play(d, time.Second, 3*time.Second, stream{key: "after", qps: 2 * T})
	// Odd inputs never panic: zero weight, empty key, huge weights.
	for i := range 100 {
		f.TS = base + int64(3*time.Second) + int64(i)*1000
		d.Key(&f, &r, decode.Key{Bytes: nil, Weight: 0})
		d.Key(&f, &r, decode.Key{Bytes: []byte("huge"), Weight: math.MaxUint32})
	}
	d.Tick(base + int64(4*time.Second))
	st := d.Stats()
	if rec.count("late", "hot") != 0 || st.Late != 2000 {
		t.Errorf("late reads: %v, Stats.Late %d", rec.of("late"), st.Late)
	}
	if rec.count("after", "hot") != 1 || st.ClockResets != 1 {
		t.Errorf("after a clock jump: %v, resets %d", rec.of("after"), st.ClockResets)
	}
	if rec.count("huge", "hot") != 1 {
		t.Errorf("huge weights: %v", rec.of("huge"))
	}
}

// TestConcurrentReaders runs HotSet and Stats (the HTTP handlers' calls)
// while the capture goroutine feeds Key; run with -race.
func TestConcurrentReaders(t *testing.T) {
	d, _ := newDet(t, Config{HotQPS: T})
	done := make(chan struct{})
	go func() {
		defer close(done)
		play(d, 0, 2*time.Second, stream{key: "k", qps: 3 * T}, stream{key: "w", qps: 10, write: true})
		d.Tick(base + int64(2*time.Second))
	}()
	for {
		select {
		case <-done:
			st := d.Stats()
			if st.Observations < 6000 || st.Observations > 6001 || st.Writes != 20 || st.HotKeys != 1 || st.Hot != 1 {
				t.Fatalf("stats %+v", st)
			}
			if hs := d.HotSet(); len(hs) != 1 || string(hs[0].Key) != "k" || hs[0].Type != "hot" {
				t.Fatalf("HotSet %+v", hs)
			}
			return
		default:
			for _, e := range d.HotSet() {
				e.Key[0] = 'X' // a copy: must not corrupt the detector
			}
			_ = d.Stats()
		}
	}
}
