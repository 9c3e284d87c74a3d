package client

import (
	"container/heap"
	"time"

	"github.com/hotsniff/hotsniff/client/event"
)

// entryID identifies one hot-set entry. Detected entries belong to the node
// that reported them (one node's cold must not end another's hot); manual
// entries are shared, so a remove from any host ends an add from any other.
func entryID(e *event.Event) string {
	node := e.Node
	if e.Source == event.SourceManual {
		node = ""
	}
	p := "0"
	if e.Prefix {
		p = "1"
	}
	return node + "\x00" + e.Proto + "\x00" + e.Server + "\x00" + e.NS + "\x00" + p + "\x00" + string(e.Key)
}

// lookupID is what an application asks about: proto, ns and key, on any
// server and from any node.
func lookupID(proto, ns string, key []byte) string {
	return proto + "\x00" + ns + "\x00" + string(key)
}

type entry struct {
	ev      *event.Event
	expires time.Time // zero: until cold
}

// hotSet is the subscriber's view of the hot set. Not safe for concurrent use.
type hotSet struct {
	m      map[string]entry
	lookup map[string]map[string]struct{} // lookupID -> entry IDs
	// max bounds the entries (0: no bound); full counts the new entries
	// refused past it.
	max  int
	full int
	// due orders the entries that lapse by their expiry, so expire looks
	// only at those due: idle cost does not grow with the hot set. An item
	// whose entry was refreshed or removed since is stale and skipped; the
	// queue is rebuilt when stale items outnumber the entries.
	due      dueQueue
	examined int // items expire looked at (tests of its cost)
}

type dueItem struct {
	at time.Time
	id string
}

type dueQueue []dueItem

func (q dueQueue) Len() int           { return len(q) }
func (q dueQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q dueQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *dueQueue) Push(x any)        { *q = append(*q, x.(dueItem)) }
func (q *dueQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}

func newHotSet(max int) *hotSet {
	return &hotSet{m: make(map[string]entry), lookup: make(map[string]map[string]struct{}), max: max}
}

func (h *hotSet) put(e *event.Event, now time.Time) {
	id := entryID(e)
	if _, ok := h.m[id]; !ok {
		if h.max > 0 && len(h.m) >= h.max {
			// A hot set this large is a runaway or forged publisher: keep
			// what is held, refuse the rest (counted).
			h.full++
			return
		}
		l := lookupID(e.Proto, e.NS, e.Key)
		ids := h.lookup[l]
		if ids == nil {
			ids = make(map[string]struct{}, 1)
			h.lookup[l] = ids
		}
		ids[id] = struct{}{}
	}
	var exp time.Time
	if e.TTLms > 0 {
		// Counted from arrival, not from e.ts: immune to clock skew.
		exp = now.Add(time.Duration(e.TTLms) * time.Millisecond)
	}
	h.set(id, e, exp)
}

// set stores e under id, lapsing at exp (zero: until cold).
func (h *hotSet) set(id string, e *event.Event, exp time.Time) {
	h.m[id] = entry{ev: e, expires: exp}
	if exp.IsZero() {
		return
	}
	if len(h.due) >= 2*len(h.m)+1024 {
		h.compact()
	}
	heap.Push(&h.due, dueItem{at: exp, id: id})
}

// compact rebuilds the due queue from the live entries.
func (h *hotSet) compact() {
	q := h.due[:0]
	for id, en := range h.m {
		if !en.expires.IsZero() {
			q = append(q, dueItem{at: en.expires, id: id})
		}
	}
	h.due = q
	heap.Init(&h.due)
}

// carry copies into h the entries of old whose node has no section in sec
// (see Subscriber.reload) and reports whether it copied any. They keep their
// expiry; one already past it (it lapsed while the channel was down, when
// nothing lapses) gets a fresh ttl from now when renew is set, else is left.
func (h *hotSet) carry(old *hotSet, sec map[string]uint64, now time.Time, renew bool) bool {
	copied := false
	for id, en := range old.m {
		if _, ok := sec[en.ev.Node]; ok {
			continue
		}
		exp := en.expires
		if !exp.IsZero() && !now.Before(exp) {
			if !renew {
				continue
			}
			exp = now.Add(time.Duration(en.ev.TTLms) * time.Millisecond)
		}
		h.put(en.ev, now)
		if _, ok := h.m[id]; ok {
			h.set(id, en.ev, exp)
			copied = true
		}
	}
	return copied
}

func (h *hotSet) del(id string) {
	en, ok := h.m[id]
	if !ok {
		return
	}
	delete(h.m, id)
	l := lookupID(en.ev.Proto, en.ev.NS, en.ev.Key)
	delete(h.lookup[l], id)
	if len(h.lookup[l]) == 0 {
		delete(h.lookup, l)
	}
}

// hot reports whether any live entry matches, and the freshest one.
func (h *hotSet) hot(proto, ns string, key []byte, now time.Time) (*event.Event, bool) {
	var best *event.Event
	for id := range h.lookup[lookupID(proto, ns, key)] {
		en := h.m[id]
		if !en.expires.IsZero() && !now.Before(en.expires) {
			continue
		}
		if best == nil || en.ev.TTLms > best.TTLms {
			best = en.ev
		}
	}
	return best, best != nil
}

// apply folds one message in: hot adds or refreshes, cold removes,
// invalidate leaves the set as it is.
func (h *hotSet) apply(e *event.Event, now time.Time) {
	switch e.Type {
	case event.TypeHot:
		h.put(e, now)
	case event.TypeCold:
		h.del(entryID(e))
	}
}

func (h *hotSet) expire(now time.Time) {
	for len(h.due) > 0 && !now.Before(h.due[0].at) {
		it := heap.Pop(&h.due).(dueItem)
		h.examined++
		if en, ok := h.m[it.id]; ok && en.expires.Equal(it.at) {
			h.del(it.id)
		}
	}
}

// hotUntil is hot restricted to the entries match accepts: the shim counts
// only events for the servers its client talks to. It returns when the key
// stops being hot without a refresh (zero: not before a cold message).
func (h *hotSet) hotUntil(proto, ns string, key []byte, now time.Time, match func(*event.Event) bool) (time.Time, bool) {
	var until time.Time
	found := false
	for id := range h.lookup[lookupID(proto, ns, key)] {
		en := h.m[id]
		if !en.expires.IsZero() && !now.Before(en.expires) {
			continue
		}
		if match != nil && !match(en.ev) {
			continue
		}
		if en.expires.IsZero() {
			return time.Time{}, true
		}
		if !found || en.expires.After(until) {
			until = en.expires
		}
		found = true
	}
	return until, found
}
