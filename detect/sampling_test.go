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
func TestSampleRateScalesCounts(t *testing.T) {
	for _, rate := range []float64{1, 0.25} {
		var rec recorder
		d, err := New(Config{HotQPS: 1000}, &rec)
		if err != nil {
			t.Fatal(err)
		}
		d.SetSampleRate(rate)
		// 2000/s true, 500/s seen.
		play(d, 0, 3*time.Second, stream{key: "hot", qps: 500, server: srvA})
		d.Tick(base + int64(3*time.Second))
		hot := d.HotSet()
		if rate == 1 {
			if len(hot) != 0 {
				t.Fatalf("unscaled 500/s reported hot: %+v", hot)
			}
			continue
		}
		if len(hot) != 1 {
			t.Fatalf("rate %v: hot set %+v, want the key", rate, hot)
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

// Rates between powers of two (the budget's fine levels) scale by their
// inverse, rounded stochastically: the scaled count is unbiased.
func TestSampleRateFractionalScale(t *testing.T) {
	d, _ := New(Config{HotQPS: 1000}, nil)
	d.SetSampleRate(0.3)
	var sum uint64
	const n = 1_000_000
	for range n {
		sum += uint64(d.scaleWeight(1))
	}
	if got := float64(sum) / n; math.Abs(got-1/0.3) > 0.01 {
		t.Fatalf("mean scaled weight %.4f, want %.4f", got, 1/0.3)
	}
	if got := d.scaleWeight(math.MaxUint32 / 2); got != math.MaxUint32 {
		t.Fatalf("scaleWeight saturates to %d", got)
	}
	if got := d.scaleHits(math.MaxUint64 / 2); got != math.MaxUint64 {
		t.Fatalf("scaleHits saturates to %d", got)
	}
	if got := d.sampleRate(); got != 0.3 {
		t.Fatalf("event sample %v, want 0.3", got)
	}
}

// The fraction the capture measured replaces the nominal rate, trusted
// within a factor of 4 of it; a measurement of another rate is ignored; a
// small change of rate keeps its ratio to the nominal rate, a change of
// more than half an octave forgets it.
func TestSeenFraction(t *testing.T) {
	d, _ := New(Config{HotQPS: 1000}, nil)
	d.SetSampleRate(0.25)
	d.SetSeenFraction(0.25, 0.2)
	if got := d.SampleRate(); got != 0.2 {
		t.Fatalf("rate %v after measuring 0.2", got)
	}
	d.SetSeenFraction(0.5, 0.4) // another rate's
	if got := d.SampleRate(); got != 0.2 {
		t.Fatalf("rate %v after another rate's measurement", got)
	}
	d.SetSeenFraction(0.25, 0.001)
	if got := d.SampleRate(); got != 0.25/4 {
		t.Fatalf("rate %v after an implausible measurement, want it bounded at 1/4 of nominal", got)
	}
	d.SetSeenFraction(0.25, 0.3)
	d.SetSampleRate(0.24)
	if got := d.SampleRate(); math.Abs(got-0.288) > 1e-9 {
		t.Fatalf("rate %v after a small change, want 0.24 × 1.2", got)
	}
	d.SetSampleRate(0.125)
	if got := d.SampleRate(); got != 0.125 {
		t.Fatalf("rate %v after the rate halved, want the nominal 0.125", got)
	}
	d.SetSampleRate(1)
	d.SetSeenFraction(1, 0.5)
	if got := d.SampleRate(); got != 1 || d.sampleRate() != 0 {
		t.Fatalf("rate %v (event %v) without sampling", got, d.sampleRate())
	}
	// Scaled by the measurement: 500/s seen at a measured 0.2 is 2500/s.
	var rec recorder
	d, _ = New(Config{HotQPS: 1000}, &rec)
	d.SetSampleRate(0.25)
	d.SetSeenFraction(0.25, 0.2)
	play(d, 0, 3*time.Second, stream{key: "hot", qps: 500, server: srvA})
	d.Tick(base + int64(3*time.Second))
	if hot := d.HotSet(); len(hot) != 1 || math.Abs(hot[0].QPS-2500) > 250 || hot[0].Sample != 0.2 {
		t.Fatalf("hot set %+v, want the key at 2500/s ± 10 %%, sample 0.2", hot)
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

func TestResolvableRate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want float64
	}{
		{Config{HotQPS: 1000}, 0.5},                          // default window: 800 reads at the threshold
		{Config{HotQPS: 1000, Window: 4 * time.Second}, 0.1}, // 4000 reads
		{Config{HotQPS: 1000, Rules: []Rule{{Pattern: "x:*", HotQPS: 100}}}, 1},
	} {
		d, err := New(c.cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.ResolvableRate(); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%+v: resolvable rate %v, want %v", c.cfg, got, c.want)
		}
	}
}

// Absorbed-demand reports travel on the connection of the read they follow,
// so flow sampling sees them with the reads' odds and they are scaled
// alike: with half the processes' connections seen at 1/2, the key's demand
// and its absorbed part still read true.
func TestSampledAbsorbedReports(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T, RefreshEvery: 2 * time.Second})
	d.SetSampleRate(0.5)
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

// Sampling deeper than the detector can resolve (1/244, the deepest): one
// seen read of a random key scaled up stands for hundreds, but a key is not
// confirmed on fewer than guardReads seen reads, so random keys never look
// hot while a key far over its threshold still is, at its true rate.
func TestDeepSamplingNoPhantoms(t *testing.T) {
	var rec recorder
	d, err := New(Config{HotQPS: 1000}, &rec)
	if err != nil {
		t.Fatal(err)
	}
	rate := 1.0 / 244
	d.SetSampleRate(rate)
	// Seen: 1000/s of one key (244 000/s true), 20/s of 50 others
	// (4880/s scaled, from 16 seen reads per window).
	ss := []stream{{key: "big", qps: 1000, server: srvA}}
	for i := range 50 {
		ss = append(ss, stream{key: "r" + string(rune('a'+i)), qps: 20, server: srvA})
	}
	play(d, 0, 3*time.Second, ss...)
	d.Tick(base + int64(3*time.Second))
	hot := d.HotSet()
	if len(hot) != 1 || string(hot[0].Key) != "big" {
		t.Fatalf("hot set %v: want only the key far over its threshold", hot)
	}
	if q := hot[0].QPS; math.Abs(q-1000/rate) > 0.1*1000/rate {
		t.Errorf("qps %.0f, want the true %.0f ± 10 %%", q, 1000/rate)
	}
	if e := d.EffectiveThreshold(); math.Abs(e-guardReads/rate/0.8) > 1 {
		t.Errorf("effective threshold %.0f, want %.0f", e, guardReads/rate/0.8)
	}
}
