package detect

import (
	"math"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/event"
)

// sized is a key read at qps, each read answered by a reply of size bytes.
type sized struct {
	key  string
	qps  float64
	size uint64
}

// playSized feeds reads and their reply bytes, evenly spaced, merged in
// time order.
func playSized(d *Detector, from, to time.Duration, ss ...sized) {
	next := make([]int64, len(ss))
	for i := range ss {
		next[i] = int64(from) + int64(float64(i)*1e9/ss[i].qps/float64(len(ss)))
	}
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
		f := decode.Flow{Server: srvA, Proto: decode.ProtoRedis, TS: base + next[i]}
		r := decode.Request{Op: "GET"}
		k := decode.Key{Bytes: []byte(s.key), Weight: 1}
		d.Key(&f, &r, k)
		f.TS += 50_000 // the reply 50 µs later
		d.ReplyKey(&f, 0, k, s.size)
		next[i] += int64(1e9 / s.qps)
	}
}

func lastHot(rec *recorder, key string) (event.Event, bool) {
	var out event.Event
	ok := false
	for _, e := range rec.ev {
		if string(e.Key) == key && e.Type == event.TypeHot {
			out, ok = e, true
		}
	}
	return out, ok
}

func TestHotByBytes(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T, HotBytes: 1e6, RefreshEvery: 250 * time.Millisecond})
	var noise []sized
	for i := range 200 {
		noise = append(noise, sized{key: "n" + string(rune('A'+i%26)) + string(rune('a'+i/26)), qps: 20, size: 2000})
	}
	ss := append([]sized{
		{"big", 50, 100_000},   // 5 MB/s at 50 reads/s: bytes only
		{"both", 2 * T, 1000},  // 2 MB/s at 2000 reads/s: both
		{"many", 2 * T, 10},    // 20 kB/s: qps only
		{"warm", 0.5 * T, 500}, // 250 kB/s at 500 reads/s: neither
	}, noise...)
	playSized(d, 0, 3*time.Second, ss...)
	want := map[string]string{"big": event.ReasonBytes, "both": event.ReasonQPSBytes, "many": event.ReasonQPS}
	for key, reason := range want {
		e, ok := lastHot(rec, key)
		if !ok {
			t.Errorf("%s never hot: %v", key, rec.of(key))
			continue
		}
		if e.Reason != reason {
			t.Errorf("%s: reason %q, want %q", key, e.Reason, reason)
		}
	}
	for _, e := range rec.ev {
		if _, ok := want[string(e.Key)]; !ok {
			t.Errorf("unexpected event %s %s", e.Type, e.Key)
		}
	}
	e, _ := lastHot(rec, "big")
	if math.Abs(e.BytesPS-5e6)/5e6 > 0.1 || math.Abs(e.ValueBytes-100_000)/100_000 > 0.1 || math.Abs(e.QPS-50)/50 > 0.1 {
		t.Errorf("big: bytes_ps %v value_bytes %v qps %v, want ~5e6, ~100000, ~50", e.BytesPS, e.ValueBytes, e.QPS)
	}
	// Every event's mean reply size (when known: a key promoted on reads
	// alone has no bytes yet) is the size of each reply, exactly:
	// it is computed from the replies themselves, whichever stage
	// promoted the key and however its reads and bytes straddle a window.
	for _, ev := range rec.ev {
		if ev.Type != event.TypeHot {
			continue
		}
		for _, s := range ss[:3] {
			if string(ev.Key) == s.key && ev.ValueBytes != 0 && ev.ValueBytes != float64(s.size) {
				t.Errorf("%s: value_bytes %v, every reply is %d bytes", s.key, ev.ValueBytes, s.size)
			}
		}
	}
	// The first event already carries both measurements.
	for _, ev := range rec.ev {
		if string(ev.Key) == "big" {
			if ev.QPS < 25 || ev.BytesPS < 1e6 {
				t.Errorf("first event of big: qps %v bytes_ps %v", ev.QPS, ev.BytesPS)
			}
			break
		}
	}
	// When the reads stop, the bytes-hot key turns cold too.
	playSized(d, 3*time.Second, 6*time.Second, ss[1:]...)
	if rec.count("big", event.TypeCold) != 1 {
		t.Errorf("big after its reads stopped: %v", rec.of("big"))
	}
	if rec.count("both", event.TypeCold) != 0 {
		t.Errorf("both turned cold while still read: %v", rec.of("both"))
	}
}

// TestHotBytesRules: a rule's hot-bytes applies to its keys only; without
// --hot-bytes events have no reason but carry the measured bytes.
func TestHotBytesRules(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T, Rules: []Rule{{Pattern: "blob:*", HotBytes: 1e5}}})
	// 10 reads a second: the bytes stage waits for them to tell blob:1 from
	// a key at 0.8× of its threshold (bytes.go), about 3 s.
	playSized(d, 0, 4*time.Second, sized{"blob:1", 10, 20_000}, sized{"other", 10, 20_000}, sized{"hot", 2 * T, 100})
	if e, ok := lastHot(rec, "blob:1"); !ok || e.Reason != event.ReasonBytes {
		t.Errorf("blob:1 (200 kB/s over its rule's 100 kB/s): %+v %v", e, ok)
	}
	if _, ok := lastHot(rec, "other"); ok {
		t.Errorf("other hot without a bytes threshold")
	}
	if e, ok := lastHot(rec, "hot"); !ok || e.Reason != "" || e.BytesPS < 100_000 || e.ValueBytes < 90 {
		t.Errorf("hot: %+v %v, want no reason, bytes_ps ~200000, value_bytes ~100", e, ok)
	}
	if _, err := New(Config{HotQPS: T, HotBytes: -1}, nil); err == nil {
		t.Error("negative hot_bytes accepted")
	}
}

// TestHotByBytesEvidence: a key hot by its bytes alone, with a value so
// large that it is read a few dozen times a window, is judged on its long
// view (bytes.go): not before its reads tell it from a key at 0.8× of the
// threshold, however the window's bytes look, and well within the long
// view; a key far above the threshold tells at once.
func TestHotByBytesEvidence(t *testing.T) {
	// T reads/s: a window W of 800 ms. 4 MB/s of 20 000-byte values: 200
	// reads a second at the threshold, 160 a window where the reads stage
	// has 800.
	d, rec := newDet(t, Config{HotQPS: T, HotBytes: 4e6})
	win := time.Duration(d.win)
	playSized(d, 0, 8*win, sized{"slow", 240, 20_000}, sized{"fast", 900, 20_000}, sized{"under", 160, 20_000})
	at := func(key string) time.Duration {
		for _, e := range rec.ev {
			if string(e.Key) == key && e.Type == event.TypeHot {
				return e.TS.Sub(time.Unix(0, base))
			}
		}
		return -1
	}
	// At 1.2× it makes 1.5 × the reads of a key at 0.8×: q + 5 √q ≤ 1.5 q
	// from q = 100 of those, 100 / 160 per second = 625 ms (the window
	// alone confirmed it after W/2, 400 ms).
	if s := at("slow"); s < 625*time.Millisecond || s > 4*win {
		t.Errorf("slow (1.2×) hot at %v, want between 625 ms and 4 W (W %v): %v", s, win, rec.of("slow"))
	}
	// At 4.5× (below the reads threshold): q + 5 √q ≤ 5.6 q from q = 1.2.
	if s := at("fast"); s < 0 || s > win/2 {
		t.Errorf("fast (4.5×) hot at %v, want within W/2 (%v): %v", s, win/2, rec.of("fast"))
	}
	if evs := rec.of("under"); len(evs) != 0 {
		t.Errorf("under (0.8×) reported: %v", evs)
	}
}

// TestColdEvidence: a hot key read too seldom for the window (bytes.go,
// coldOnEvidence) turns cold only on evidence. A window whose rate dips
// below the cold line, on a count a key at the threshold makes now and
// then, is not that: before, a key at 1.2× was published cold on such a
// dip. A key that stops is. Hot by bytes: 4 MB/s of 20 000-byte values,
// 160 reads a window at the threshold, the dip 0.65× (104 reads, 4.4
// standard deviations short). Under a rule at a tenth of the threshold the
// window is sized for: 80 reads a window, the dip 52 (3.1 short).
func TestColdEvidence(t *testing.T) {
	for _, c := range []struct {
		name      string
		cfg       Config
		rate, dip float64
		size      uint64
	}{
		{"bytes", Config{HotQPS: T, HotBytes: 4e6}, 240, 130, 20_000},
		{"rule", Config{HotQPS: T, Rules: []Rule{{Pattern: "k", HotQPS: T / 10}}}, 120, 65, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, rec := newDet(t, c.cfg)
			win := time.Duration(d.win)
			bg := sized{"bg", 20, 100}
			playSized(d, 0, 3*time.Second, sized{"k", c.rate, c.size}, bg)
			if _, ok := lastHot(rec, "k"); !ok {
				t.Fatalf("k (1.2×) never hot: %v", rec.of("k"))
			}
			playSized(d, 3*time.Second, 3*time.Second+win, sized{"k", c.dip, c.size}, bg)
			playSized(d, 3*time.Second+win, 6*time.Second, sized{"k", c.rate, c.size}, bg)
			if n := rec.count("k", event.TypeCold); n != 0 {
				t.Fatalf("k cold on one window at 0.65×: %v", rec.of("k"))
			}
			// Stopped: 15 reads at the threshold's rate of silence, from
			// the start of a coarse sub-window (W) at the latest.
			playSized(d, 6*time.Second, 6*time.Second+3*win, bg)
			if got := rec.of("k"); got[len(got)-1] != event.TypeCold {
				t.Fatalf("k not cold 3 W after it stopped: %v", got)
			}
		})
	}
}
