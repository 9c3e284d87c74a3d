package publish

import (
	"time"

	"github.com/hotsniff/hotsniff/event"
)

// entryID identifies a hot key within one publisher: the same key bytes on
// two servers, or as a Tair prefix and as a plain key, are distinct entries.
func entryID(e *event.Event) string {
	p := "0"
	if e.Prefix {
		p = "1"
	}
	return e.Proto + "\x00" + e.Server + "\x00" + e.NS + "\x00" + p + "\x00" + string(e.Key)
}

type entry struct {
	ev *event.Event // never mutated once stored: snapshots share it
	// expires is when the entry lapses without a refresh (zero: never).
	// It is counted from arrival, not from e.TS, so replayed events with
	// packet times in the past and skewed clocks do not expire at once.
	expires time.Time
}

// hotSet is the publisher's current hot set. Not safe for concurrent use.
type hotSet struct {
	m map[string]entry
}

func newHotSet() *hotSet { return &hotSet{m: make(map[string]entry)} }

// apply folds e into the set and reports whether the set changed: hot adds or
// refreshes, cold removes, invalidate leaves the set alone.
func (h *hotSet) apply(e *event.Event, now time.Time) bool {
	switch e.Type {
	case event.TypeHot:
		var exp time.Time
		if e.TTLms > 0 {
			exp = now.Add(time.Duration(e.TTLms) * time.Millisecond)
		}
		h.m[entryID(e)] = entry{ev: e, expires: exp}
		return true
	case event.TypeCold:
		id := entryID(e)
		if _, ok := h.m[id]; ok {
			delete(h.m, id)
			return true
		}
	}
	return false
}

// expire drops lapsed entries and reports whether any went.
func (h *hotSet) expire(now time.Time) bool {
	changed := false
	for id, en := range h.m {
		if !en.expires.IsZero() && !now.Before(en.expires) {
			delete(h.m, id)
			changed = true
		}
	}
	return changed
}

// events returns the current entries; the events are shared, read-only.
func (h *hotSet) events() []*event.Event {
	out := make([]*event.Event, 0, len(h.m))
	for _, en := range h.m {
		out = append(out, en.ev)
	}
	return out
}
