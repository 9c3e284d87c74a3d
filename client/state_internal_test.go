package client

import (
	"fmt"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client/event"
)

func hotEv(key string, ttl int64) *event.Event {
	return &event.Event{Type: event.TypeHot, Proto: "redis", NS: "0", Node: "n", Key: []byte(key), TTLms: ttl}
}

// TestHotSetExpireTouchesOnlyDue: the once-a-second sweep looks only at the
// entries that are due, however many are held, and entries lapse by their
// current expiry (a refresh moves it; until-cold and removed ones never
// lapse by an old item).
func TestHotSetExpireTouchesOnlyDue(t *testing.T) {
	h := newHotSet(0)
	now := time.Now()
	for i := range 40000 {
		h.put(hotEv(fmt.Sprint("far", i), 3600_000), now)
	}
	for i := range 5 {
		h.put(hotEv(fmt.Sprint("due", i), 500), now)
	}
	h.expire(now.Add(time.Second))
	if h.examined != 5 || len(h.m) != 40000 {
		t.Fatalf("sweep examined %d items, %d entries left; want 5 and 40000", h.examined, len(h.m))
	}
	for i := range 100 {
		h.expire(now.Add(time.Second + time.Duration(i)*time.Millisecond))
	}
	if h.examined != 5 {
		t.Errorf("100 idle sweeps examined %d items, want none", h.examined-5)
	}

	// Refreshed: lapses by its new expiry, not its first.
	h.put(hotEv("r", 500), now)
	h.put(hotEv("r", 5000), now.Add(400*time.Millisecond))
	// Turned until-cold, and removed then re-added with a later expiry.
	h.put(hotEv("c", 500), now)
	h.put(hotEv("c", 0), now)
	h.put(hotEv("d", 500), now)
	h.del(entryID(hotEv("d", 0)))
	h.put(hotEv("d", 3000), now)
	h.expire(now.Add(time.Second))
	for _, k := range []string{"r", "c", "d"} {
		if _, ok := h.hot("redis", "0", []byte(k), now.Add(time.Second)); !ok {
			t.Errorf("%s lapsed by a stale expiry", k)
		}
	}
	h.expire(now.Add(6 * time.Second))
	for k, want := range map[string]bool{"r": false, "c": true, "d": false} {
		if _, ok := h.hot("redis", "0", []byte(k), now.Add(6*time.Second)); ok != want {
			t.Errorf("%s hot = %v after its expiry, want %v", k, ok, want)
		}
	}
	// Many refreshes keep the queue bounded.
	for i := range 100000 {
		h.put(hotEv("r", 5000), now.Add(time.Duration(i)*time.Microsecond))
	}
	if len(h.due) > 2*len(h.m)+1024 {
		t.Errorf("due queue %d items for %d entries", len(h.due), len(h.m))
	}
}
