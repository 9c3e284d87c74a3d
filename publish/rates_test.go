package publish_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
)

// TestUpdateRates: current rates reach the snapshot without a message on
// the channel; small changes do not rewrite it; keys not in the set are
// not added.
func TestUpdateRates(t *testing.T) {
	srv := testutil.StartRedis(t)
	rdb := dial(t, "redis://"+srv.Addr, publish.TLSOptions{})
	ch := subscribe(t, rdb, "r", false)
	p := newPublisher(t, rdb, publish.Options{Channel: "r", Node: "n", SnapshotInterval: 20 * time.Millisecond})
	e := ev(event.TypeHot, "k")
	e.QPS, e.WriteQPS = 1000, 0
	p.Emit(e)
	receive(t, ch, 1, 5*time.Second)
	snapKey := func() *event.Event {
		var s event.Snapshot
		b, err := rdb.Get(context.Background(), "r:snapshot").Bytes()
		if err != nil || json.Unmarshal(b, &s) != nil || len(s.Keys) != 1 {
			return nil
		}
		return s.Keys[0]
	}
	now := *e
	now.QPS, now.WriteQPS = 12000, 4000
	other := *e
	other.Key = []byte("not-hot")
	p.UpdateRates([]event.Event{now, other})
	deadline := time.Now().Add(5 * time.Second)
	for {
		if k := snapKey(); k != nil && k.QPS == 12000 && k.WriteQPS == 4000 {
			if k.Seq != e.Seq || k.Uncacheable {
				t.Fatalf("snapshot entry %+v: seq or verdict changed", k)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot never showed the new rates: %+v", snapKey())
		}
		time.Sleep(10 * time.Millisecond)
	}
	w0 := p.Stats().SnapshotWrites
	now.QPS = 12500 // +4 %: not worth a write
	p.UpdateRates([]event.Event{now})
	time.Sleep(100 * time.Millisecond)
	if w := p.Stats().SnapshotWrites; w != w0 {
		t.Fatalf("%d snapshot writes for a 4%% change", w-w0)
	}
	select {
	case m := <-ch:
		t.Fatalf("UpdateRates published %q", m.Payload)
	default:
	}
	if p.Stats().HotKeys != 1 {
		t.Fatalf("hot set grew to %d", p.Stats().HotKeys)
	}
	// Sampling starting at the same rates rewrites the snapshot: its rates
	// are estimates from then on, and top --redis-url says so.
	now.Sample = 0.1367
	p.UpdateRates([]event.Event{now})
	deadline = time.Now().Add(5 * time.Second)
	for {
		if k := snapKey(); k != nil && k.Sample == 0.1367 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot never showed the sampling rate: %+v", snapKey())
		}
		time.Sleep(10 * time.Millisecond)
	}
	w0 = p.Stats().SnapshotWrites
	now.Sample = 0.14 // a fine budget step: not worth a write
	p.UpdateRates([]event.Event{now})
	time.Sleep(100 * time.Millisecond)
	if w := p.Stats().SnapshotWrites; w != w0 {
		t.Fatalf("%d snapshot writes for a 2%% change of the sampling rate", w-w0)
	}
}

// TestUpdateRatesClearsLowerBound: a key's first event carries a floor
// (qps_lower_bound); when the detector measures its rate, the snapshot
// shows the measurement without the mark, even at the same figure.
func TestUpdateRatesClearsLowerBound(t *testing.T) {
	srv := testutil.StartRedis(t)
	rdb := dial(t, "redis://"+srv.Addr, publish.TLSOptions{})
	ch := subscribe(t, rdb, "lb", false)
	p := newPublisher(t, rdb, publish.Options{Channel: "lb", Node: "n", SnapshotInterval: 20 * time.Millisecond})
	e := ev(event.TypeHot, "k")
	e.QPS, e.QPSLowerBound = 32000, true
	p.Emit(e)
	receive(t, ch, 1, 5*time.Second)
	measured := *e
	measured.QPSLowerBound = false
	p.UpdateRates([]event.Event{measured})
	deadline := time.Now().Add(5 * time.Second)
	for {
		var s event.Snapshot
		b, err := rdb.Get(context.Background(), "lb:snapshot").Bytes()
		if err == nil && json.Unmarshal(b, &s) == nil && len(s.Keys) == 1 && !s.Keys[0].QPSLowerBound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot still marks the measured rate as a lower bound: %s", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
