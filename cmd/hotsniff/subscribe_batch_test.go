package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
)

// TestSubscribeBatches: `hotsniff subscribe` prints the events of v2
// batch messages one per line, in order, beside single-event messages.
func TestSubscribeBatches(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	sub, stop := startSubscribe(t, rdb, "--redis-url", "redis://"+r.Addr, "--channel", "hk")
	defer stop()
	p, err := publish.New(rdb, publish.Options{Channel: "hk", Node: "n2", Format: publish.FormatV2, BatchWindow: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	for i := range 5 {
		p.Emit(&event.Event{Type: event.TypeHot, Proto: "redis", Server: "10.0.0.5:6379", NS: "0", Key: []byte(fmt.Sprint("k", i)),
			QPS: 1500, WriteQPS: 30, Uncacheable: i == 4, TTLms: 60000, TS: time.Now()})
	}
	lines := waitLines(t, sub, 5)
	for i, l := range lines {
		e := decodeLine(t, l)
		if string(e.Key) != fmt.Sprint("k", i) || e.Node != "n2" || e.WriteQPS != 30 || e.Uncacheable != (i == 4) {
			t.Errorf("line %d: %s", i, l)
		}
	}
	if st := p.Stats(); st.Messages != 1 {
		t.Errorf("%d messages for one batch", st.Messages)
	}
}
