package topview

import (
	"cmp"
	"container/heap"
	"slices"
	"strings"
	"time"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/event"
)

// topCounter is a decode.Sink that passes everything on to next and counts
// the weighted reads of each (proto, server, ns, key) over the current
// interval, to list the hottest keys whether or not they are hot. Memory is
// bounded: it keeps at most capacity keys with the Space-Saving algorithm
// (a key arriving when the table is full replaces the least counted one and
// inherits its count), so any key with more than 1/capacity of the reads is
// always listed, and the top counts are exact when the keys fit.
type topCounter struct {
	decode.Forward // replies and absorbed reports reach the detector untouched
	capacity       int
	byID           map[string]*topEntry
	heap           topHeap // least count first
	buf            []byte
}

type topEntry struct {
	id    string
	ev    event.Event // proto, server, ns, key
	count uint64
	idx   int
}

func newTopCounter(next decode.Sink, n int) *topCounter {
	c := min(max(256, 16*n), 1<<16)
	return &topCounter{Forward: decode.Forward{Next: next}, capacity: c, byID: make(map[string]*topEntry, c)}
}

func (t *topCounter) Key(f *decode.Flow, r *decode.Request, k decode.Key) {
	t.Next.Key(f, r, k)
	if r.Write {
		return
	}
	ns := decode.NSString(r.NS)
	b := append(t.buf[:0], f.Proto.String()...)
	b = append(b, 0)
	b = f.Server.AppendTo(b)
	b = append(b, 0)
	b = append(b, ns...)
	b = append(b, 0)
	b = append(b, k.Bytes...)
	t.buf = b
	if e := t.byID[string(b)]; e != nil {
		e.count += uint64(k.Weight)
		heap.Fix(&t.heap, e.idx)
		return
	}
	var e *topEntry
	base := uint64(0)
	if len(t.heap) >= t.capacity {
		e = heap.Pop(&t.heap).(*topEntry)
		delete(t.byID, e.id)
		base = e.count
	} else {
		e = new(topEntry)
	}
	*e = topEntry{
		id: string(b),
		ev: event.Event{Proto: f.Proto.String(), Server: f.Server.String(), NS: ns,
			Key: append(e.ev.Key[:0], k.Bytes...)}, // no source: counted, not detected hot
		count: base + uint64(k.Weight),
	}
	t.byID[e.id] = e
	heap.Push(&t.heap, e)
}

// take returns up to n entries by falling rate over iv, as events whose
// qps is that rate, and starts a new interval.
func (t *topCounter) take(n int, iv time.Duration, ts time.Time) []event.Event {
	entries := make([]*topEntry, len(t.heap))
	copy(entries, t.heap)
	// Largest counts first; ties by identity so frames are reproducible.
	sortEntries(entries)
	if len(entries) > n {
		entries = entries[:n]
	}
	out := make([]event.Event, len(entries))
	for i, e := range entries {
		out[i] = e.ev
		out[i].Key = append([]byte(nil), e.ev.Key...)
		out[i].QPS = float64(e.count) / iv.Seconds()
		out[i].TS = ts
	}
	clear(t.byID)
	t.heap = t.heap[:0]
	return out
}

type topHeap []*topEntry

func (h topHeap) Len() int           { return len(h) }
func (h topHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h topHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *topHeap) Push(x any) {
	e := x.(*topEntry)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *topHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

func sortEntries(es []*topEntry) {
	slices.SortFunc(es, func(a, b *topEntry) int {
		if a.count != b.count {
			return cmp.Compare(b.count, a.count)
		}
		return strings.Compare(a.id, b.id)
	})
}
