package publish_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
)

// TestOutageResumes kills Redis mid-stream and starts an empty one on the
// same port: publishing must resume on its own, the events queued meanwhile
// must arrive, the snapshot must be rewritten into the new server, and no
// Emit may block while Redis is gone.
func TestOutageResumes(t *testing.T) {
	port := testutil.FreePort(t)
	srv := startRedisOn(t, port)
	url := fmt.Sprintf("redis://127.0.0.1:%d?dial_timeout=300ms&max_retries=-1", port)
	rdb := dial(t, url, publish.TLSOptions{})
	p := newPublisher(t, rdb, publish.Options{Channel: "hk", Node: "n1",
		BackoffMin: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond, SnapshotInterval: 10 * time.Millisecond})

	sub1 := dial(t, url, publish.TLSOptions{})
	msgs := subscribe(t, sub1, "hk", false)
	var worst time.Duration
	emit := func(e *event.Event) {
		t0 := time.Now()
		p.Emit(e)
		worst = max(worst, time.Since(t0))
	}
	emit(hot("before"))
	receive(t, msgs, 1, 3*time.Second)

	srv.Stop()
	// Emit all through the outage, including while the publisher is
	// failing to dial.
	for i := 0; i < 20; i++ {
		emit(hot(fmt.Sprintf("during%d", i)))
		time.Sleep(5 * time.Millisecond)
	}
	waitStats(t, p, func(st publish.Stats) bool { return !st.Connected })
	if st := p.Stats(); st.Connected {
		t.Fatalf("publisher did not notice the outage: %+v", st)
	}

	startRedisOn(t, port)
	sub2 := dial(t, fmt.Sprintf("redis://127.0.0.1:%d", port), publish.TLSOptions{})
	msgs2 := subscribe(t, sub2, "hk", false)
	emit(hot("after"))
	// Everything queued during the outage comes out, in order, then "after".
	seen := map[string]bool{}
	deadline := time.After(5 * time.Second)
	for !seen["after"] {
		select {
		case m := <-msgs2:
			var e event.Event
			if err := json.Unmarshal([]byte(m.Payload), &e); err != nil {
				t.Fatal(err)
			}
			seen[string(e.Key)] = true
		case <-deadline:
			t.Fatalf("publishing did not resume; got %v, stats %+v", seen, p.Stats())
		}
	}
	// The subscriber may have joined after some outage events went out;
	// the snapshot must hold them all anyway.
	s := waitSnapshot(t, sub2, "hk", 3*time.Second, func(s *event.Snapshot) bool {
		return len(s.Keys) == 22
	})
	k := keysOf(s)
	for _, want := range []string{"before", "during0", "during19", "after"} {
		if k[want] == nil {
			t.Errorf("snapshot after restart lacks %q", want)
		}
	}
	st := p.Stats()
	if st.Reconnects == 0 || st.Errors == 0 || st.Dropped != 0 || !st.Connected {
		t.Errorf("stats %+v", st)
	}
	if worst > 20*time.Millisecond {
		t.Errorf("slowest Emit took %v during the outage", worst)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
}
