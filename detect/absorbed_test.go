package detect

import (
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/event"
)

// fleet simulates application processes reading one key at demand reads/s
// in total. Until the key is hot every read reaches the server. Once it is
// hot (and report is set) each process serves its reads locally and sends
// one refresh read per localTTL, followed (when report is set) by a report
// of its local hits since its previous report, as a client shim does.
type fleet struct {
	d        *Detector
	key      string
	procs    int
	demand   float64
	localTTL time.Duration
	report   bool
	// unseen, when set, says the capture does not see process p's
	// connection (flow sampling): its reads and reports never reach d.
	unseen func(p int) bool
	// apart gives each process its own client address (else they share
	// one host's).
	apart bool

	last []int64 // per process: time of its previous report
	hits []float64
}

func (fl *fleet) run(from, to time.Duration) {
	if fl.last == nil {
		fl.last = make([]int64, fl.procs)
		fl.hits = make([]float64, fl.procs)
	}
	step := int64(time.Millisecond)
	per := fl.demand / float64(fl.procs) / 1000 // reads per process per ms
	wire := make([]float64, fl.procs)
	f := decode.Flow{Server: srvA, Proto: decode.ProtoRedis}
	r := decode.Request{Op: "GET"}
	for t := int64(from); t < int64(to); t += step {
		f.TS = base + t
		hot := len(fl.d.hot.e) > 0
		for p := range fl.procs {
			if fl.unseen != nil && fl.unseen(p) {
				continue
			}
			if fl.apart {
				f.Client = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(p + 1)}), 40000)
			}
			if !hot {
				wire[p] += per
				for ; wire[p] >= 1; wire[p]-- {
					fl.d.Key(&f, &r, decode.Key{Bytes: []byte(fl.key), Weight: 1})
				}
				continue
			}
			if fl.last[p] == 0 {
				fl.last[p] = f.TS
			}
			// Processes refresh out of phase.
			if (t+int64(p)*int64(fl.localTTL)/int64(fl.procs))%int64(fl.localTTL) < step {
				fl.d.Key(&f, &r, decode.Key{Bytes: []byte(fl.key), Weight: 1})
				fl.hits[p] += per - 1
				if h := uint64(fl.hits[p]); h > 0 && fl.report {
					win := uint64(max((f.TS-fl.last[p])/1e6, 1))
					fl.d.Absorbed(&f, &decode.Absorbed{Key: []byte(fl.key), Hits: h, WindowMS: win})
					fl.hits[p] -= float64(h)
					fl.last[p] = f.TS
				}
				continue
			}
			fl.hits[p] += per
		}
	}
}

// With reports, a key whose readers moved to local memory stays hot for as
// long as they read it, at its real demand; without, it flaps.
func TestAbsorbedKeepsDemand(t *testing.T) {
	for _, report := range []bool{true, false} {
		d, rec := newDet(t, Config{HotQPS: T, RefreshEvery: 2 * time.Second})
		fl := &fleet{d: d, key: "k", procs: 3, demand: 3 * T, localTTL: 50 * time.Millisecond, report: report}
		fl.run(0, 60*time.Second)
		hot, cold := d.Stats().Hot, rec.count("k", "cold")
		if !report {
			if cold == 0 {
				t.Fatalf("without reports: no cold event (%d hot): the test cannot tell", hot)
			}
			t.Logf("without reports: %d hot, %d cold in 60s", hot, cold)
			continue
		}
		if cold != 0 || hot != 1 {
			t.Fatalf("with reports: %d hot, %d cold, want 1 and 0 (%v)", hot, cold, rec.of("k"))
		}
		var last event.Event
		for _, e := range rec.ev {
			if string(e.Key) == "k" && e.Type == event.TypeHot {
				last = e
			}
		}
		// Reports lag the reads by up to one localTTL: over an 800ms window
		// that reads a few percent low.
		if math.Abs(last.QPS-3*T) > 0.07*3*T || math.Abs(last.AbsorbedQPS-(3*T-60)) > 0.07*3*T {
			t.Fatalf("last refresh qps %v absorbed %v, want demand %v with %v absorbed", last.QPS, last.AbsorbedQPS, 3*T, 3*T-60)
		}
		st := d.Stats()
		if st.AbsorbedReports < 3000 || st.AbsorbedCapped != 0 || st.AbsorbedNotHot != 0 {
			t.Fatalf("stats %+v", st)
		}
		// Readers stop: cold within the window and one sub-window.
		stop := base + int64(60*time.Second)
		w := int64(d.Config().Window)
		var coldAt int64
		for now := stop; now < stop+3*w; now += int64(10 * time.Millisecond) {
			d.Tick(now)
			if rec.count("k", "cold") > 0 {
				coldAt = now
				break
			}
		}
		if coldAt == 0 || coldAt-stop > w+w/8 {
			t.Fatalf("cold %v after the readers stopped, want within %v", time.Duration(coldAt-stop), time.Duration(w+w/8))
		}
		t.Logf("with reports: %d hot, last qps %.0f absorbed %.0f, cold %v after stop (window %v)", hot, last.QPS, last.AbsorbedQPS, time.Duration(coldAt-stop), d.Config().Window)
	}
}

// Reports for a key that is not hot add nothing: a key read at a tenth of
// the threshold stays cold whatever its reports claim.
func TestAbsorbedNeverMakesHot(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T})
	f := decode.Flow{Server: srvA, Proto: decode.ProtoRedis}
	r := decode.Request{Op: "GET"}
	for ms := range 10_000 {
		f.TS = base + int64(ms)*1e6
		if ms%10 == 0 {
			d.Key(&f, &r, decode.Key{Bytes: []byte("k"), Weight: 1})
			d.Absorbed(&f, &decode.Absorbed{Key: []byte("k"), Hits: 1e6, WindowMS: 10})
		}
	}
	d.Tick(f.TS + 1)
	if len(rec.ev) != 0 {
		t.Fatalf("events %v", rec.of("k"))
	}
	if st := d.Stats(); st.AbsorbedNotHot != 1000 || st.AbsorbedReports != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// One report cannot add more than AbsorbedCap × threshold per second to a
// key, however large its claim or however many reports there are.
func TestAbsorbedCap(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T, AbsorbedCap: 10, RefreshEvery: 100 * time.Millisecond})
	play(d, 0, 2*time.Second, stream{key: "k", qps: 2 * T})
	if rec.count("k", "hot") == 0 {
		t.Fatal("not hot")
	}
	f := decode.Flow{Server: srvA, Proto: decode.ProtoRedis}
	r := decode.Request{Op: "GET"}
	for ms := 2000; ms < 6000; ms++ {
		f.TS = base + int64(ms)*1e6
		d.Key(&f, &r, decode.Key{Bytes: []byte("k"), Weight: 1})
		d.Absorbed(&f, &decode.Absorbed{Key: []byte("k"), Hits: math.MaxUint64, WindowMS: math.MaxUint64})
	}
	d.Tick(f.TS + 1)
	hs := d.HotSet()
	if len(hs) != 1 {
		t.Fatalf("hot set %v", hs)
	}
	// 1000 wire reads/s + at most 10 × 1000 absorbed.
	if hs[0].AbsorbedQPS > 10*T*1.01 || hs[0].QPS > 11*T*1.01 || hs[0].AbsorbedQPS < 9*T {
		t.Fatalf("qps %v absorbed %v, want absorbed capped at %v", hs[0].QPS, hs[0].AbsorbedQPS, 10*T)
	}
	// The first report may fill the window behind it (W = 800ms) too.
	if st := d.Stats(); st.AbsorbedCapped != st.AbsorbedReports || st.AbsorbedHits > uint64(10*T*(4+0.8)) {
		t.Fatalf("stats %+v", st)
	}
}

// Rejected reports are counted by reason and change nothing.
func TestAbsorbedRejected(t *testing.T) {
	d, _ := newDet(t, Config{HotQPS: T})
	play(d, 0, time.Second, stream{key: "k", qps: 2 * T})
	f := decode.Flow{Server: srvA, Proto: decode.ProtoRedis, TS: base + int64(time.Second)}
	d.Absorbed(&f, &decode.Absorbed{Key: []byte("k"), Hits: 1e6, WindowMS: 10, Reject: decode.AbsorbedUnpaired})
	d.Absorbed(&f, &decode.Absorbed{Reject: decode.AbsorbedMalformed})
	// Same key at another server or DB is another identity.
	f.Server = srvB
	d.Absorbed(&f, &decode.Absorbed{Key: []byte("k"), Hits: 5, WindowMS: 10})
	f.Server = srvA
	d.Absorbed(&f, &decode.Absorbed{NS: 1, Key: []byte("k"), Hits: 5, WindowMS: 10})
	d.Tick(f.TS + 1)
	st := d.Stats()
	if st.AbsorbedUnpaired != 1 || st.AbsorbedMalformed != 1 || st.AbsorbedNotHot != 2 || st.AbsorbedReports != 0 {
		t.Fatalf("stats %+v", st)
	}
	if hs := d.HotSet(); len(hs) != 1 || hs[0].AbsorbedQPS != 0 {
		t.Fatalf("hot set %+v", hs)
	}
}

func TestAbsorbedAllocs(t *testing.T) {
	d, _ := newDet(t, Config{HotQPS: T})
	play(d, 0, time.Second, stream{key: "k", qps: 2 * T})
	f := decode.Flow{Server: srvA, Proto: decode.ProtoRedis, TS: base + int64(time.Second)}
	a := &decode.Absorbed{Key: []byte("k"), Hits: 10, WindowMS: 50}
	if n := testing.AllocsPerRun(1000, func() { d.Absorbed(&f, a) }); n != 0 {
		t.Fatalf("%v allocs per report", n)
	}
}

func TestAbsorbedCapConfig(t *testing.T) {
	if _, err := New(Config{HotQPS: T, AbsorbedCap: -1}, nil); err == nil {
		t.Error("negative absorbed_cap accepted")
	}
	d, err := New(Config{HotQPS: T}, nil)
	if err != nil || d.Config().AbsorbedCap != 1000 {
		t.Errorf("default absorbed_cap %v, %v", d.Config().AbsorbedCap, err)
	}
}

// The attack of a forged report: once real reads stop, one plain client
// sends 20 GET+ECHO pairs a second claiming far more hits than any bound.
// Before, that kept the key hot for as long as it ran, at the per-key cap
// (1000 × the threshold). Now the client's credit is at most
// AbsorbedClientCap × the threshold (and the events say "capped"), and
// past AbsorbedHold, as it alone keeps the key hot, its reports stop
// counting and the key turns cold.
func TestAbsorbedForgedClient(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T, AbsorbedHold: 5 * time.Second, RefreshEvery: 200 * time.Millisecond})
	play(d, 0, 2*time.Second, stream{key: "k", qps: 2 * T})
	if rec.count("k", "hot") == 0 {
		t.Fatal("not hot from real reads")
	}
	forger := decode.Flow{Server: srvA, Proto: decode.ProtoRedis, Client: netip.MustParseAddrPort("10.9.9.9:5555")}
	r := decode.Request{Op: "GET"}
	for ms := 2000; ms < 30000; ms += 50 {
		forger.TS = base + int64(ms)*1e6
		d.Key(&forger, &r, decode.Key{Bytes: []byte("k"), Weight: 1})
		d.Absorbed(&forger, &decode.Absorbed{Key: []byte("k"), Hits: 1e12, WindowMS: 1000})
	}
	d.Tick(forger.TS + 1)
	var coldAt time.Time
	var maxQPS float64
	uncapped := 0
	for _, e := range rec.events("k") {
		if e.Type == event.TypeCold && coldAt.IsZero() {
			coldAt = e.TS
		}
		if e.Type == event.TypeHot && e.TS.After(time.Unix(0, base+int64(3*time.Second))) && coldAt.IsZero() {
			maxQPS = max(maxQPS, e.QPS)
			if !e.Capped {
				uncapped++
			}
		}
	}
	st := d.Stats()
	t.Logf("forged reports: max qps %.0f, cold at %v, held %d reports, stats %+v", maxQPS, coldAt.Sub(time.Unix(0, base)), st.AbsorbedHeld, st)
	if maxQPS > 16*T*1.1+50 {
		t.Errorf("one client inflated the key to %.0f qps, above 16 × the threshold", maxQPS)
	}
	if uncapped > 0 {
		t.Errorf("%d hot events while capped do not say capped", uncapped)
	}
	// Real reads stopped at 2 s; the forger alone holds it from about
	// one window later; held after 5 s; cold within a window after that.
	if coldAt.IsZero() || coldAt.Sub(time.Unix(0, base)) > 2*time.Second+d.Config().Window+5*time.Second+2*d.Config().Window+time.Second {
		t.Errorf("cold at %v: one client's reports kept the key hot", coldAt.Sub(time.Unix(0, base)))
	}
	if rec.count("k", "hot") != 1+countRefreshes(rec, "k") || st.AbsorbedHeld == 0 {
		t.Errorf("hot again after cold, or nothing held: %+v", st)
	}
}

func countRefreshes(rec *recorder, key string) int {
	n, first := 0, true
	for _, e := range rec.events(key) {
		if e.Type == event.TypeCold {
			break
		}
		if e.Type == event.TypeHot {
			if !first {
				n++
			}
			first = false
		}
	}
	return n
}

// Real demand through shims in several clients is not held nor capped: a
// fleet of three hosts reading at 12 × the threshold stays hot, at its
// demand, far past AbsorbedHold.
func TestAbsorbedFleetNotHeld(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T, AbsorbedHold: 5 * time.Second, RefreshEvery: 2 * time.Second})
	fl := &fleet{d: d, key: "k", procs: 3, demand: 12 * T, localTTL: 50 * time.Millisecond, report: true, apart: true}
	fl.run(0, 30*time.Second)
	var last event.Event
	for _, e := range rec.ev {
		if string(e.Key) == "k" && e.Type == event.TypeHot {
			last = e
		}
	}
	if hot, cold := d.Stats().Hot, rec.count("k", "cold"); hot != 1 || cold != 0 {
		t.Fatalf("%d hot, %d cold in 30 s, want 1 and 0", hot, cold)
	}
	if math.Abs(last.QPS-12*T) > 0.07*12*T || last.Capped || d.Stats().AbsorbedHeld != 0 {
		t.Fatalf("last refresh qps %v capped %v, held %d; want the demand %v, uncapped", last.QPS, last.Capped, d.Stats().AbsorbedHeld, 12*T)
	}
}

// One host whose shims alone keep a key hot is re-verified every
// AbsorbedHold: the key turns cold, its reads come back to the server and
// it is hot again: a bounded cost, one cycle per hold.
func TestAbsorbedSingleClientReverified(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T, AbsorbedHold: 5 * time.Second, RefreshEvery: 2 * time.Second})
	fl := &fleet{d: d, key: "k", procs: 1, demand: 4 * T, localTTL: 50 * time.Millisecond, report: true}
	fl.run(0, 30*time.Second)
	hot, cold := d.Stats().Hot, rec.count("k", "cold")
	t.Logf("single client at 4 × the threshold for 30 s: %d hot, %d cold", hot, cold)
	if cold < 2 || cold > 6 || hot != uint64(cold)+1 {
		t.Fatalf("%d hot, %d cold in 30 s with a 5 s hold; want one cycle per hold or so", hot, cold)
	}
}

// events returns the events for key, in order.
func (r *recorder) events(key string) []event.Event {
	var out []event.Event
	for _, e := range r.ev {
		if string(e.Key) == key {
			out = append(out, e)
		}
	}
	return out
}
