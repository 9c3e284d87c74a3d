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
