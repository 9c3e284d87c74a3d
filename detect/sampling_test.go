package detect

import (
	"math"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/event"
)

// Under flow sampling the detector sees one read in four of a key that is
// truly at 2× the threshold: scaled back, it is reported hot at its true
// rate, and the event says the sample rate. The same sampled stream without
// the scale stays cold.
func TestSampleShiftScalesCounts(t *testing.T) {
	for _, shift := range []uint8{0, 2} {
		var rec recorder
		d, err := New(Config{HotQPS: 1000}, &rec)
		if err != nil {
			t.Fatal(err)
		}
		d.SetSampleShift(shift)
		// 2000/s true, 500/s seen.
		play(d, 0, 3*time.Second, stream{key: "hot", qps: 500, server: srvA})
		d.Tick(base + int64(3*time.Second))
		hot := d.HotSet()
		if shift == 0 {
			if len(hot) != 0 {
				t.Fatalf("unscaled 500/s reported hot: %+v", hot)
			}
			continue
		}
		if len(hot) != 1 {
			t.Fatalf("shift %d: hot set %+v, want the key", shift, hot)
		}
		if q := hot[0].QPS; math.Abs(q-2000) > 200 {
			t.Errorf("qps %.0f, want the true 2000 ± 10 %%", q)
		}
		if hot[0].Sample != 0.25 {
			t.Errorf("sample %v, want 0.25", hot[0].Sample)
		}
		if rec.count("hot", "hot") == 0 || rec.ev[0].Sample != 0.25 {
			t.Errorf("hot event %+v, want one with sample 0.25", rec.ev)
		}
	}
}

func TestSampleRateAbsentWithoutSampling(t *testing.T) {
	var rec recorder
	d, _ := New(Config{HotQPS: 1000}, &rec)
	play(d, 0, 2*time.Second, stream{key: "k", qps: 3000, server: srvA})
	d.Tick(base + int64(2*time.Second))
	for _, e := range rec.ev {
		if e.Sample != 0 {
			t.Fatalf("event %+v carries a sample rate without sampling", e)
		}
	}
}

func TestMaxSampleShift(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want uint8
	}{
		{Config{HotQPS: 1000}, 1},                          // default window: 800 reads at the threshold
		{Config{HotQPS: 1000, Window: 4 * time.Second}, 3}, // 4000 reads
		{Config{HotQPS: 1000, Rules: []Rule{{Pattern: "x:*", HotQPS: 100}}}, 0},
	} {
		d, err := New(c.cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.MaxSampleShift(); got != c.want {
			t.Errorf("%+v: max shift %d, want %d", c.cfg, got, c.want)
		}
	}
}

func TestScaleSaturates(t *testing.T) {
	if got := scaleWeight(math.MaxUint32/2, 4); got != math.MaxUint32 {
		t.Fatalf("scaleWeight saturates to %d", got)
	}
	if got := scaleWeight(3, 4); got != 48 {
		t.Fatalf("scaleWeight(3, 4) = %d", got)
	}
	if got := scaleHits(math.MaxUint64/2, 4); got != math.MaxUint64 {
		t.Fatalf("scaleHits saturates to %d", got)
	}
}

// Absorbed-demand reports travel on the connection of the read they follow,
// so flow sampling sees them with the reads' odds and they are scaled
// alike: with half the processes' connections seen at 1/2, the key's demand
// and its absorbed part still read true.
func TestSampledAbsorbedReports(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T, RefreshEvery: 2 * time.Second})
	d.SetSampleShift(1)
	fl := &fleet{d: d, key: "k", procs: 8, demand: 3 * T, localTTL: 50 * time.Millisecond, report: true,
		unseen: func(p int) bool { return p%2 == 1 }}
	fl.run(0, 30*time.Second)
	if hot, cold := d.Stats().Hot, rec.count("k", "cold"); hot != 1 || cold != 0 {
		t.Fatalf("%d hot, %d cold: want hot once and kept", hot, cold)
	}
	var last *event.Event
	for i := range rec.ev {
		if string(rec.ev[i].Key) == "k" && rec.ev[i].Type == event.TypeHot {
			last = &rec.ev[i]
		}
	}
	if last == nil || math.Abs(last.QPS-3*T) > 0.1*3*T || last.AbsorbedQPS < 0.8*3*T || last.Sample != 0.5 {
		t.Fatalf("last hot event %+v: want qps ≈ %v, most of it absorbed, sample 0.5", last, 3*T)
	}
}

// Deeper sampling than the detector can resolve (the capture shedding load)
// is scaled only up to MaxSampleShift: random keys seen once must not look
// hot, and a key far over its threshold still is.
func TestDeepSamplingScaledToMax(t *testing.T) {
	var rec recorder
	d, err := New(Config{HotQPS: 1000}, &rec)
	if err != nil {
		t.Fatal(err)
	}
	d.SetSampleShift(12)
	// Seen: 4000/s of one key, 20/s of 50 others; scaled ×4 (not ×4096)
	// they read 16000/s and 80/s.
	ss := []stream{{key: "big", qps: 4000, server: srvA}}
	for i := range 50 {
		ss = append(ss, stream{key: "r" + string(rune('a'+i)), qps: 20, server: srvA})
	}
	play(d, 0, 3*time.Second, ss...)
	d.Tick(base + int64(3*time.Second))
	hot := d.HotSet()
	if len(hot) != 1 || string(hot[0].Key) != "big" {
		t.Fatalf("hot set %v: want only the key far over its threshold", hot)
	}
	if hot[0].Sample != 1.0/4096 {
		t.Errorf("sample %v, want the capture's 1/4096", hot[0].Sample)
	}
}
