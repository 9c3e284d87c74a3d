package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
)

const hotkeyFixture = "../../testdata/redis/hotkey.pcap.gz"

// subscribeEvents follows the channel with a plain go-redis subscriber (it
// reconnects by itself) and returns decoded events as they arrive.
func subscribeEvents(t *testing.T, addr string) <-chan event.Event {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	ps := rdb.Subscribe(context.Background(), publish.DefaultChannel)
	t.Cleanup(func() { ps.Close() })
	if _, err := ps.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := make(chan event.Event, 100)
	go func() {
		for msg := range ps.Channel() {
			var e event.Event
			if err := json.Unmarshal([]byte(msg.Payload), &e); err == nil {
				out <- e
			}
		}
	}()
	return out
}

func nextEvent(t *testing.T, ch <-chan event.Event) event.Event {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
		return event.Event{}
	}
}

// TestReplayPublishes replays the hot-key fixture into a real Redis: a
// subscriber gets hot, invalidate, cold for item:hot, in order, numbered
// without gaps, exactly as printed; the snapshot ends empty at the last seq.
func TestReplayPublishes(t *testing.T) {
	r := testutil.StartRedis(t)
	events := subscribeEvents(t, r.Addr)
	out, errOut, code := runCLI(t, "replay", "--redis-url", "redis://"+r.Addr, "--node", "n1", hotkeyFixture)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	printed := strings.Split(strings.TrimSpace(out), "\n")
	if len(printed) != 3 {
		t.Fatalf("printed %d events:\n%s", len(printed), out)
	}
	var last event.Event
	for i, want := range []string{"hot", "invalidate", "cold"} {
		e := nextEvent(t, events)
		if e.Type != want || string(e.Key) != "item:hot" || e.Server != "127.0.0.1:6379" || e.NS != "0" || e.Node != "n1" {
			t.Fatalf("event %d: %+v, want %s item:hot", i, e, want)
		}
		if i > 0 && e.Seq != last.Seq+1 {
			t.Errorf("seq %d after %d: a gap", e.Seq, last.Seq)
		}
		var p event.Event
		if err := json.Unmarshal([]byte(printed[i]), &p); err != nil || p.Seq != e.Seq || p.Type != e.Type {
			t.Errorf("printed %q, published seq %d %s", printed[i], e.Seq, e.Type)
		}
		last = e
	}
	snap, ok, err := publish.ReadSnapshot(context.Background(), redis.NewClient(&redis.Options{Addr: r.Addr}), publish.DefaultChannel)
	if err != nil || !ok {
		t.Fatalf("snapshot: ok=%v err=%v", ok, err)
	}
	if len(snap.Keys) != 0 || snap.Seq != last.Seq {
		t.Errorf("snapshot seq %d with %d keys, want seq %d and none", snap.Seq, len(snap.Keys), last.Seq)
	}
}

// TestReplayRedisOutage stops Redis in the middle of a real-time replay and
// brings it back on the same port: the replay finishes, publishing resumes
// (the cold event arrives), and the snapshot is right at the end.
func TestReplayRedisOutage(t *testing.T) {
	port := testutil.FreePort(t)
	r := testutil.StartRedisOn(t, port)
	events := subscribeEvents(t, r.Addr)
	type result struct {
		out, err string
		code     int
	}
	done := make(chan result, 1)
	go func() {
		out, errOut, code := runCLI(t, "replay", "--speed", "1", "--redis-url", "redis://"+r.Addr, hotkeyFixture)
		done <- result{out, errOut, code}
	}()
	if e := nextEvent(t, events); e.Type != "hot" {
		t.Fatalf("first event %+v", e)
	}
	r.Stop() // the invalidate (at ~1.1 s of packet time) falls in the outage
	time.Sleep(800 * time.Millisecond)
	r = testutil.StartRedisOn(t, port)
	var res result
	select {
	case res = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("replay did not finish")
	}
	if res.code != 0 {
		t.Fatalf("replay exit %d: %s", res.code, res.err)
	}
	printed := strings.Split(strings.TrimSpace(res.out), "\n")
	var lastPrinted event.Event
	if err := json.Unmarshal([]byte(printed[len(printed)-1]), &lastPrinted); err != nil || lastPrinted.Type != "cold" {
		t.Fatalf("last printed event %q", printed[len(printed)-1])
	}
	// The subscriber reconnects by itself; the cold event is published
	// after the restart.
	for {
		e := nextEvent(t, events)
		if e.Type == "cold" {
			if e.Seq != lastPrinted.Seq {
				t.Errorf("cold seq %d, printed %d", e.Seq, lastPrinted.Seq)
			}
			break
		}
	}
	snap, ok, err := publish.ReadSnapshot(context.Background(), redis.NewClient(&redis.Options{Addr: r.Addr}), publish.DefaultChannel)
	if err != nil || !ok {
		t.Fatalf("snapshot after restart: ok=%v err=%v", ok, err)
	}
	if len(snap.Keys) != 0 || snap.Seq != lastPrinted.Seq {
		t.Errorf("snapshot seq %d with %d keys, want seq %d and none", snap.Seq, len(snap.Keys), lastPrinted.Seq)
	}
}
