package detect

import (
	"testing"
	"time"
)

// TestIncompleteHoldsCold: a hot key whose reads the capture missed for a
// second (a stopped reader, a ring that dropped) is not announced cold when
// the pipeline reports the gap; without the report it is (the old
// behaviour); and once the window holds only complete sub-windows, a key
// whose demand really fell turns cold.
func TestIncompleteHoldsCold(t *testing.T) {
	hot := stream{key: "k", qps: 1.5 * T}
	noise := stream{key: "other", qps: 50}
	for _, report := range []bool{false, true} {
		d, rec := newDet(t, Config{HotQPS: T})
		play(d, 0, 2*time.Second, hot, noise)
		if rec.count("k", "hot") == 0 {
			t.Fatal("not hot after 2s at 1.5×")
		}
		// 2s–3s: the key is still read at 1.5×, but the capture sees only
		// the noise.
		if report {
			d.Incomplete(base+int64(2*time.Second), base+int64(3*time.Second))
		}
		play(d, 2*time.Second, 3*time.Second, noise)
		play(d, 3*time.Second, 6*time.Second, hot, noise)
		cold := rec.count("k", "cold")
		if !report {
			if cold == 0 {
				t.Fatal("without the report the gap reads as cold: the test no longer shows the problem")
			}
			continue
		}
		if cold != 0 {
			t.Fatalf("cold during a reported gap: %v", rec.of("k"))
		}
		st := d.Stats()
		if st.IncompleteSpans != 1 || st.ColdHeld == 0 {
			t.Fatalf("stats: %d spans, %d held, want 1 and > 0", st.IncompleteSpans, st.ColdHeld)
		}
		// Demand really falls at 6s, with complete evidence: cold within a
		// window and a sub-window (W = 800ms at T).
		play(d, 6*time.Second, 7*time.Second, noise)
		if got := rec.of("k"); got[len(got)-1] != "cold" {
			t.Fatalf("no cold after demand fell with complete evidence: %v", got)
		}
	}
}

// TestIncompleteKeepsLifetime: a hold does not outlive the lifetime rule:
// a key not read at all for ttl turns cold even while the capture keeps
// reporting gaps.
func TestIncompleteKeepsLifetime(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T, TTL: 2 * time.Second})
	play(d, 0, 2*time.Second, stream{key: "k", qps: 1.5 * T})
	for ms := int64(2000); ms <= 5000; ms += 100 {
		now := base + ms*int64(time.Millisecond)
		d.Incomplete(now-int64(100*time.Millisecond), now)
		d.Tick(now)
	}
	if rec.count("k", "cold") != 1 {
		t.Fatalf("events %v, want cold once the lifetime passed", rec.of("k"))
	}
}

// liveTicks plays the streams from `from` to `to` the way the live
// pipeline feeds the detector: traffic, then at every 100 ms the capture's
// loss check (Confirm, when confirm is set) and a Tick.
func liveTicks(d *Detector, from, to time.Duration, confirm bool, ss ...stream) {
	for t := from; t < to; t += 100 * time.Millisecond {
		play(d, t, t+100*time.Millisecond, ss...)
		now := base + int64(t+100*time.Millisecond)
		if confirm {
			d.Confirm(now)
		}
		d.Tick(now)
	}
}

// TestIncompleteReportedLate: a live capture learns of a loss only after
// the reads around it reached the detector (a reader resumed after a stop
// decodes its backlog first, then reads its counters at the next tick).
// With Confirm, the cold verdict the backlog suggests waits for the check,
// which reports the span: no cold. Without it (the pipeline before
// Confirm), the same late report comes after the cold was announced.
func TestIncompleteReportedLate(t *testing.T) {
	hot := stream{key: "k", qps: 1.5 * T}
	noise := stream{key: "other", qps: 50}
	for _, confirm := range []bool{false, true} {
		d, rec := newDet(t, Config{HotQPS: T})
		liveTicks(d, 0, 2*time.Second, confirm, hot, noise)
		if rec.count("k", "hot") == 0 {
			t.Fatal("not hot after 2s at 1.5×")
		}
		// The backlog of 2s–3s, decoded in one go: the key's connections
		// were shed, only the noise is left.
		play(d, 2*time.Second, 3*time.Second, noise)
		// The first tick after it: the loss counters grew.
		d.Incomplete(base+int64(2*time.Second), base+int64(3*time.Second))
		if confirm {
			d.Confirm(base + int64(3*time.Second))
		}
		d.Tick(base + int64(3*time.Second))
		liveTicks(d, 3*time.Second, 6*time.Second, confirm, hot, noise)
		cold := rec.count("k", "cold")
		if !confirm {
			if cold == 0 {
				t.Fatal("without Confirm the late report did not come too late: the test no longer shows the problem")
			}
			continue
		}
		if cold != 0 {
			t.Fatalf("cold although the span was reported at the first check after it: %v", rec.of("k"))
		}
		if st := d.Stats(); st.ColdAwaiting == 0 || st.ColdHeld == 0 {
			t.Fatalf("stats: %d awaiting, %d held, want both > 0", st.ColdAwaiting, st.ColdHeld)
		}
		// Demand really falls at 6s, complete evidence: cold within a
		// window, a sub-window and a tick.
		liveTicks(d, 6*time.Second, 7*time.Second, confirm, noise)
		if got := rec.of("k"); got[len(got)-1] != "cold" {
			t.Fatalf("no cold after demand fell with complete evidence: %v", got)
		}
	}
}

// TestConfirmAwaits: once the capture confirms its evidence, a cold
// verdict beyond the time confirmed waits for the next Confirm, and is
// then given (it is put off, not lost).
func TestConfirmAwaits(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T})
	noise := stream{key: "other", qps: 50}
	liveTicks(d, 0, 2*time.Second, true, stream{key: "k", qps: 1.5 * T}, noise)
	play(d, 2*time.Second, 4*time.Second, noise) // no check meanwhile
	if n := rec.count("k", "cold"); n != 0 {
		t.Fatalf("cold on unconfirmed time: %v", rec.of("k"))
	}
	d.Confirm(base + int64(4*time.Second))
	d.Tick(base + int64(4*time.Second))
	if n := rec.count("k", "cold"); n != 1 {
		t.Fatalf("events %v, want cold at the Confirm", rec.of("k"))
	}
}

// TestIncompleteSeconds: the time reported missed is counted once where
// spans overlap.
func TestIncompleteSeconds(t *testing.T) {
	d, _ := newDet(t, Config{HotQPS: T})
	s := int64(time.Second)
	d.Incomplete(base, base+s)
	d.Incomplete(base+s/2, base+3*s/2)
	d.Incomplete(base+s/4, base+s/2) // inside what was reported
	d.Incomplete(base+2*s, base+3*s)
	d.Tick(base + 3*s) // Stats is the view published at a tick
	if got := d.Stats().IncompleteNs; got != uint64(5*s/2) {
		t.Fatalf("IncompleteNs %d, want %d", got, 5*s/2)
	}
}

// TestLateReadsHoldCold: a second of a hot key's reads reaches the
// detector after a second of other reads (a starved daemon catching up
// unevenly): more than a sub-window late, they cannot be counted where
// they belong. Those sub-windows are then incomplete, and a hot key read
// at 1.5× throughout is not turned cold on them (the live pipeline
// confirms its evidence after each drain, so no verdict is given between
// the two rings). Without that, the key's late second reads as a second
// without reads.
func TestLateReadsHoldCold(t *testing.T) {
	hot := stream{key: "k", qps: 1.5 * T}
	noise := stream{key: "other", qps: 50}
	d, rec := newDet(t, Config{HotQPS: T})
	liveTicks(d, 0, 2*time.Second, true, hot, noise)
	if rec.count("k", "hot") == 0 {
		t.Fatal("not hot after 2s at 1.5×")
	}
	play(d, 2*time.Second, 3*time.Second, noise)
	play(d, 2*time.Second, 3*time.Second, hot)
	d.Confirm(base + int64(3*time.Second))
	d.Tick(base + int64(3*time.Second))
	liveTicks(d, 3*time.Second, 6*time.Second, true, hot, noise)
	if late := d.Stats().Late; late < 1000 {
		t.Fatalf("%d late reads: the test does not exercise them", late)
	}
	if n := rec.count("k", "cold"); n != 0 {
		t.Fatalf("cold on a second whose reads came late: %v (%d late reads)", rec.of("k"), d.Stats().Late)
	}
	if st := d.Stats(); st.ColdHeld == 0 || st.IncompleteSpans > 12 {
		t.Fatalf("stats: %d held, %d spans: want verdicts held, a span per sub-window at most", st.ColdHeld, st.IncompleteSpans)
	}
	// Demand really falls: cold on complete evidence.
	liveTicks(d, 6*time.Second, 8*time.Second, true, noise)
	if got := rec.of("k"); got[len(got)-1] != "cold" {
		t.Fatalf("no cold after demand fell: %v", got)
	}
}
