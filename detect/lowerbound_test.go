package detect

import (
	"bytes"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/event"
)

// TestFirstRateLowerBound: a key far above the threshold is caught within
// milliseconds, faster than its rate can be timed: the first hot event's
// qps is a floor (32 × the threshold) and says so with qps_lower_bound;
// the refresh reports the measured rate without the mark. A key near the
// threshold is timed over enough span: its first event is a measurement.
func TestFirstRateLowerBound(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T, RefreshEvery: 500 * time.Millisecond})
	play(d, 0, 2*time.Second, stream{key: "blazing", qps: 200 * T}, stream{key: "warm", qps: 1.5 * T})
	var first, later *event.Event
	for i := range rec.ev {
		e := &rec.ev[i]
		if string(e.Key) != "blazing" || e.Type != event.TypeHot {
			continue
		}
		if first == nil {
			first = e
		} else if e.TS.Sub(first.TS) >= time.Second {
			later = e
			break
		}
	}
	if first == nil || later == nil {
		t.Fatalf("blazing: events %v", rec.of("blazing"))
	}
	t.Logf("first event qps %.1f (lower bound %v), a second later %.1f", first.QPS, first.QPSLowerBound, later.QPS)
	if !first.QPSLowerBound || first.QPS > 40*T {
		t.Errorf("first hot event of a key at 200× the threshold: qps %.1f, lower bound %v; want a floor (≤ 40× the threshold) marked as one", first.QPS, first.QPSLowerBound)
	}
	if later.QPSLowerBound || later.QPS < 150*T || later.QPS > 250*T {
		t.Errorf("refresh a second later: qps %.1f, lower bound %v; want the measured ~%.0f, unmarked", later.QPS, later.QPSLowerBound, 200*T)
	}
	for _, e := range rec.ev {
		if string(e.Key) == "warm" && e.Type == event.TypeHot && e.QPSLowerBound {
			t.Errorf("key at 1.5× the threshold marked as a lower bound: %+v", e)
		}
	}
	// The mark travels on the wire and back.
	b, err := first.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var back event.Event
	if err := back.UnmarshalJSON(b); err != nil || !back.QPSLowerBound {
		t.Errorf("round trip of %s: %+v, %v", b, back, err)
	}
	b, _ = later.MarshalJSON()
	if len(b) == 0 || bytes.Contains(b, []byte("qps_lower_bound")) {
		t.Errorf("a measured rate carries the mark: %s", b)
	}
}
