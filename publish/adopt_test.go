package publish_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
)

// A restarted publisher for the same node takes over its predecessor's
// section: its keys are handed to Adopt, the section is never rewritten
// empty, and seq keeps growing.
func TestAdoptPreviousSection(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := dial(t, "redis://"+r.Addr, publish.TLSOptions{})
	ctx := context.Background()
	p1, err := publish.New(rdb, publish.Options{Channel: "hk", Node: "n1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	p1.Emit(hot("a"))
	p1.Emit(hot("b"))
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := p1.Close(cctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	prev, ok, bad, err := publish.ReadSection(ctx, rdb, "hk", "n1")
	if err != nil || !ok || bad != 0 || len(prev.Keys) != 2 {
		t.Fatalf("section of the first publisher: %+v ok %v bad %d err %v", prev, ok, bad, err)
	}

	// Watch the section while the second publisher starts: it must never
	// lose a key.
	var emptied atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if s, ok, _, err := publish.ReadSection(ctx, rdb, "hk", "n1"); err == nil && (!ok || len(s.Keys) < 2) {
				emptied.Add(1)
			}
		}
	}()
	got := make(chan []*event.Event, 1)
	p2 := newPublisher(t, rdb, publish.Options{Channel: "hk", Node: "n1", StartSeq: prev.Seq - 1000, // a clock that went back
		Adopt: func(evs []*event.Event) { got <- evs }})
	var adopted []*event.Event
	select {
	case adopted = <-got:
	case <-time.After(3 * time.Second):
		t.Fatal("Adopt was not called")
	}
	st := waitStats(t, p2, func(st publish.Stats) bool { return st.SnapshotWrites > 0 })
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	if len(adopted) != 2 || !st.Adopted || st.AdoptedKeys != 2 || st.HotKeys != 2 {
		t.Fatalf("adopted %v, stats %+v", adopted, st)
	}
	if n := emptied.Load(); n > 0 {
		t.Fatalf("the section lost keys %d times while the new publisher started", n)
	}
	now, ok, _, err := publish.ReadSection(ctx, rdb, "hk", "n1")
	if err != nil || !ok || len(now.Keys) != 2 || now.Seq <= prev.Seq {
		t.Fatalf("section after adoption: %+v (seq before %d) ok %v err %v", now, prev.Seq, ok, err)
	}
}

// During a surge rollout two daemons run for one node a moment: once the
// newer one (higher seq) has written its section, the older one stops
// publishing and never overwrites it.
func TestSupersededStopsPublishing(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := dial(t, "redis://"+r.Addr, publish.TLSOptions{})
	msgs := subscribe(t, rdb, "hk", false)
	old := newPublisher(t, rdb, publish.Options{Channel: "hk", Node: "n1", StartSeq: 1000, SnapshotInterval: 10 * time.Millisecond})
	old.Emit(hot("a"))
	receive(t, msgs, 1, 3*time.Second)
	// Until its section holds the key: a snapshot write counted before
	// the key reached the hot set left the newer one an empty section to
	// adopt (AdoptedKeys 0 in one CI run).
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if s, ok, _, err := publish.ReadSection(context.Background(), rdb, "hk", "n1"); err == nil && ok && len(s.Keys) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the old publisher's section never held its key")
		}
	}

	newer := newPublisher(t, rdb, publish.Options{Channel: "hk", Node: "n1", StartSeq: 5000, SnapshotInterval: 10 * time.Millisecond,
		Adopt: func([]*event.Event) {}})
	st := waitStats(t, newer, func(st publish.Stats) bool { return st.SnapshotWrites > 0 })
	if st.AdoptedKeys != 1 {
		t.Fatalf("newer publisher: %+v", st)
	}
	old.Emit(hot("from-old")) // its snapshot write is refused
	if st := waitStats(t, old, func(st publish.Stats) bool { return st.Superseded }); !st.Superseded {
		t.Fatalf("old publisher not superseded: %+v", st)
	}
	for i := range 5 {
		old.Emit(hot(fmt.Sprintf("late%d", i)))
	}
	newer.Emit(hot("marker"))
	for {
		var m *event.Event
		select {
		case msg := <-msgs:
			m = new(event.Event)
			if err := m.UnmarshalJSON([]byte(msg.Payload)); err != nil {
				t.Fatal(err)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("marker not received")
		}
		// "from-old" may go out before the refused section write.
		if m.Seq < 5000 && string(m.Key) != "from-old" {
			t.Fatalf("the superseded publisher still published %q (seq %d)", m.Key, m.Seq)
		}
		if string(m.Key) == "marker" {
			break
		}
	}
	time.Sleep(50 * time.Millisecond)
	sec, _, _, err := publish.ReadSection(context.Background(), rdb, "hk", "n1")
	if err != nil || sec.Seq < 5000 {
		t.Fatalf("section %+v, %v: the old publisher overwrote it", sec, err)
	}
	for _, e := range sec.Keys {
		if string(e.Key) != "a" && string(e.Key) != "marker" {
			t.Fatalf("section holds %q from the superseded publisher", e.Key)
		}
	}
}

// Closing while the channel Redis has been down tries once and says so: it
// does not spend the whole deadline, and an empty queue loses nothing.
func TestCloseWhileChannelDown(t *testing.T) {
	rdb := dial(t, fmt.Sprintf("redis://127.0.0.1:%d?dial_timeout=100ms", testutil.FreePort(t)), publish.TLSOptions{})
	p, err := publish.New(rdb, publish.Options{Channel: "hk", Node: "n1", Logger: quiet, Adopt: func([]*event.Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	if st := waitStats(t, p, func(st publish.Stats) bool { return !st.Connected }); st.Connected || st.Adopted {
		t.Fatalf("stats %+v: want down and not adopted", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t0 := time.Now()
	err = p.Close(ctx)
	if d := time.Since(t0); d > time.Second || !errors.Is(err, publish.ErrChannelDown) {
		t.Fatalf("close took %v and returned %v, want ErrChannelDown at once", d, err)
	}
	if st := p.Stats(); st.Dropped != 0 {
		t.Fatalf("stats %+v: nothing was queued, nothing lost", st)
	}
}
