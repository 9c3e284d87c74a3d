package shimtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client"
	"github.com/hotsniff/hotsniff/client/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
)

// TestSubscriberReadsBothFormats: one publisher sending v1 messages and
// another sending v2 batches on the same channel (a fleet mid-migration);
// the subscriber applies every event of both, in seq order, with no gap,
// and rejects a malformed batch whole (counted), repairing from the
// snapshot.
func TestSubscriberReadsBothFormats(t *testing.T) {
	srv := testutil.StartRedis(t)
	rdb := dial(t, srv.Addr)
	rec := &recorder{}
	sub := run(t, rdb, client.Options{Channel: "mix", Handler: rec})
	pubs := map[string]*publish.Publisher{}
	for _, f := range []string{publish.FormatV1, publish.FormatV2} {
		p, err := publish.New(rdb, publish.Options{Channel: "mix", Node: "node-" + f, Format: f, Logger: quiet, SnapshotInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close(context.Background()) })
		pubs[f] = p
	}
	for i := range 200 {
		for f, p := range pubs {
			p.Emit(&event.Event{Type: event.TypeHot, Proto: "redis", Server: "10.0.0.5:6379", NS: "0",
				Key: []byte(fmt.Sprint(f, ":", i)), QPS: 1500, TTLms: 60000, TS: time.Now()})
		}
	}
	eventually(t, "all hot", func() bool { return sub.Stats().HotKeys == 400 })
	st := sub.Stats()
	if st.Gaps != 0 || st.Invalid != 0 {
		t.Fatalf("gaps %d, invalid %d", st.Gaps, st.Invalid)
	}
	v2 := pubs[publish.FormatV2].Stats()
	t.Logf("400 events: subscriber got %d messages; the v2 node sent %d messages for 200 events", st.Messages, v2.Messages)
	if v2.Messages >= 200 || st.Messages >= 400 {
		t.Fatalf("v2 node sent %d messages, subscriber got %d: not batched", v2.Messages, st.Messages)
	}
	last := map[string]uint64{}
	rec.mu.Lock()
	for _, e := range rec.events {
		if l, ok := last[e.Node]; ok && e.Seq != l+1 {
			t.Errorf("node %s: seq %d after %d", e.Node, e.Seq, l)
		}
		last[e.Node] = e.Seq
	}
	rec.mu.Unlock()

	// A batch with one bad event is dropped whole and counted.
	bad := `{"v":2,"node":"x","events":[{"v":1,"seq":1,"type":"hot","proto":"redis","server":"","ns":"0","key":"ok","ttl_ms":0,"ts":"","source":"manual","node":"x"},{"key_b64":"!!"}]}`
	if err := rdb.Publish(context.Background(), "mix", bad).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "bad batch counted", func() bool { return sub.Stats().Invalid == 1 })
	if sub.Hot("redis", "0", []byte("ok")) {
		t.Fatal("an event of a rejected batch was applied")
	}
}
