package decode

import "unsafe"

// Reply attribution: the request parser of a connection records each
// request (and the keys of reads) in the connection's Pending queue, and the
// reply parser takes them off in the order the server answers, attributing
// the reply's bytes to the keys. "Reply bytes" are the bytes of the reply
// message as TCP payload on the wire, framing included: what the server's
// NIC sends for the key.

// PendingConfig bounds the per-connection queue.
type PendingConfig struct {
	// MaxRequests is the most requests awaiting replies on one connection
	// (default 1024). Requests beyond it are remembered only as a count:
	// their replies keep the queue aligned but are attributed to nothing.
	MaxRequests int
	// MaxKeyBytes is the most key bytes held for them (default 256 KiB);
	// at most MaxKeyBytes/8 keys (and at least 64) are held.
	MaxKeyBytes int
	// MaxTotalBytes bounds the memory all queues of one stream hold
	// together (default 64 MiB): a queue that would grow beyond it keeps
	// requests only as a count and keys not at all (counted like the
	// per-queue bounds).
	MaxTotalBytes int64
	// QuietNS is how long (packet time) a connection joined mid-stream, or
	// that lost bytes, must be silent in both directions before a request
	// is taken to start a fresh, aligned exchange (default 1 ms): after such
	// a silence the server has answered everything it was asked before.
	QuietNS int64
}

// Defaults for PendingConfig.
const (
	DefaultPendingRequests = 1024
	DefaultPendingKeyBytes = 256 << 10
	DefaultQuietNS         = int64(1e6)
	DefaultPendingTotal    = int64(64 << 20)
)

func (c PendingConfig) withDefaults() PendingConfig {
	if c.MaxRequests <= 0 {
		c.MaxRequests = DefaultPendingRequests
	}
	if c.MaxKeyBytes <= 0 {
		c.MaxKeyBytes = DefaultPendingKeyBytes
	}
	if c.QuietNS <= 0 {
		c.QuietNS = DefaultQuietNS
	}
	if c.MaxTotalBytes <= 0 {
		c.MaxTotalBytes = DefaultPendingTotal
	}
	return c
}

// PendingStats counts what the queues could not keep.
type PendingStats struct {
	// Overflow counts requests recorded only as a count (queue full).
	Overflow uint64
	// KeysDropped counts read keys not kept (key bytes full): their share
	// of a reply goes to no key.
	KeysDropped uint64
	// Desyncs counts times a queue was thrown away because bytes were lost.
	Desyncs uint64
	// Held is the memory all queues hold now (capacity, bytes).
	Held int64
}

// Entry is one request awaiting its reply.
type Entry struct {
	Op    string // from the parser's fixed table
	NS    int32
	ID    uint32 // Request.ID
	Write bool
	Quiet bool
	done  bool // answered out of order (Take); popped when it reaches the head
	// anon is how many requests follow this one that were not kept.
	anon  uint32
	keys0 int32
	nkeys int32 // keys kept, in keys[keys0:]
	extra int32 // keys after those, not kept (bounds)
}

type pendKey struct {
	off, n int32
	weight uint32
	prefix bool
}

// Pending is the queue of one connection's requests awaiting replies. The
// stream layer owns one per connection (Flow.Pending) and records requests
// into it; reply parsers read it. Its memory is bounded by PendingConfig and
// reused across the connections a flow slot serves.
type Pending struct {
	cfg *PendingConfig
	st  *PendingStats

	ents  []Entry
	e0    int // first live entry
	keys  []pendKey
	k0    int
	arena []byte
	a0    int
	anon  uint32 // unkept requests ahead of ents[e0]
	open  bool   // the last entry is still receiving keys

	held   int64 // capacity of ents, keys and arena, in bytes (counted in st.Held)
	synced bool
	// framed: the capture frames this connection's replies (Align): only
	// the capture resynchronises the queue, never a quiet point.
	framed  bool
	epoch   uint32
	lastReq int64 // packet time of the latest request
	lastRep int64 // packet time of the latest reply bytes
}

// NewPending returns an empty, unsynchronised queue with cfg's bounds;
// st (shared by every queue of one stream) receives its counts.
func NewPending(cfg *PendingConfig, st *PendingStats) *Pending {
	*cfg = cfg.withDefaults()
	return &Pending{cfg: cfg, st: st}
}

// Reset empties the queue for a new connection: synced when the
// connection's start was seen, so replies pair from the first request.
func (q *Pending) Reset(synced bool) {
	q.clear()
	q.synced = synced
	q.framed = false
	q.lastReq, q.lastRep = 0, 0
	q.epoch++
	// A connection that once held a huge MGET should not pin its arena.
	if cap(q.arena) > 64<<10 {
		q.arena = nil
	}
	if cap(q.keys) > 4096 {
		q.keys = nil
	}
	if cap(q.ents) > 256 {
		q.ents = nil
	}
	q.account()
}

// Release frees what the queue holds: its flow is gone for good.
func (q *Pending) Release() {
	q.clear()
	q.ents, q.keys, q.arena = nil, nil, nil
	q.account()
}

const (
	entrySize   = int64(unsafe.Sizeof(Entry{}))
	pendKeySize = int64(unsafe.Sizeof(pendKey{}))
)

// account brings st.Held up to date with the queue's capacity.
func (q *Pending) account() {
	h := int64(cap(q.ents))*entrySize + int64(cap(q.keys))*pendKeySize + int64(cap(q.arena))
	q.st.Held += h - q.held
	q.held = h
}

// room reports whether growing the queue by n more bytes of capacity keeps
// all queues within MaxTotalBytes.
func (q *Pending) room(n int64) bool { return q.st.Held+n <= q.cfg.MaxTotalBytes }

// newCap is the capacity a slice of length l grows to for n more elements.
func newCap(c, l, n int) int { return max(2*c, l+n, 16) }

func (q *Pending) clear() {
	q.ents = q.ents[:0]
	q.keys = q.keys[:0]
	q.arena = q.arena[:0]
	q.e0, q.k0, q.a0, q.anon, q.open = 0, 0, 0, 0, false
}

// Desync throws the queue away after lost bytes in either direction: which
// reply answers which request is no longer known. Pairing resumes at the
// next quiet point.
func (q *Pending) Desync() {
	if q.synced || q.Len() > 0 {
		q.st.Desyncs++
	}
	q.clear()
	q.synced = false
	q.epoch++
}

// Align starts pairing at the request about to be pushed, whatever came
// before: the capture frames the connection's replies itself (in-kernel
// counting with reply bytes) and copies exactly the replies of the
// requests it copies from here on, leaving out those of the requests it
// counted and did not copy. The queue starts empty and in step, and from
// now on only the capture resynchronises it (Align, Unframed): with most
// packets left in the kernel, the silences user space sees are no quiet
// points.
func (q *Pending) Align() { q.reframe(true) }

// Unframed stops pairing: the capture lost the framing of the connection's
// replies and copies none until it aligns again (Align).
func (q *Pending) Unframed() { q.reframe(false) }

// reframe empties the queue for the capture's framing (Align, Unframed),
// pairing from now on or not. A reset is counted only when requests were
// waiting: the capture stops pairing as often as it meets a request it
// cannot parse (a large SET), and the bytes it then cannot attribute it
// counts itself.
func (q *Pending) reframe(synced bool) {
	if q.Len() > 0 {
		q.st.Desyncs++
	}
	q.clear()
	q.synced = synced
	q.framed = true
	q.epoch++
}

// Synced reports whether replies pair with the queue's requests.
func (q *Pending) Synced() bool { return q.synced }

// Epoch changes whenever the queue is thrown away or resynchronised: a reply
// parser that sees it change drops the reply it was in.
func (q *Pending) Epoch() uint32 { return q.epoch }

// Len is the number of requests awaiting replies, unkept ones included.
func (q *Pending) Len() int {
	n := int(q.anon)
	for i := q.e0; i < len(q.ents); i++ {
		n += 1 + int(q.ents[i].anon)
	}
	return n
}

// SawReply records reply bytes at packet time ts (for the quiet rule).
func (q *Pending) SawReply(ts int64) { q.lastRep = ts }

// StartReplies begins a reply parser's Parse call: it returns f's queue and
// the sink to report to, or a nil queue when replies are not being paired (the
// parser then consumes the bytes unread). It records the reply time, and
// reports fresh when the queue was thrown away or resynchronised since the
// parser last looked (*epoch is the epoch it saw): the parser must then
// drop the reply it was in.
func StartReplies(f *Flow, s Sink, epoch *uint32) (q *Pending, rs Sink, fresh bool) {
	q = f.Pending
	rs = s
	if q == nil {
		return nil, nil, false
	}
	q.SawReply(f.TS)
	if q.epoch != *epoch {
		*epoch = q.epoch
		return q, rs, true
	}
	return q, rs, false
}

// Push records request r seen at packet time ts.
func (q *Pending) Push(ts int64, r *Request) {
	last := max(q.lastReq, q.lastRep)
	q.lastReq = ts
	q.open = false
	if !q.synced {
		// Joined mid-stream or after a loss: the first request after a
		// silence in both directions starts an aligned exchange (unless
		// the capture frames the replies: it says when, Align).
		if q.framed || last == 0 || ts-last < q.cfg.QuietNS {
			return
		}
		q.clear()
		q.synced = true
		q.epoch++
	}
	if q.e0 > 0 && len(q.ents) == cap(q.ents) {
		n := copy(q.ents, q.ents[q.e0:])
		q.ents = q.ents[:n]
		q.e0 = 0
	}
	full := len(q.ents)-q.e0 >= q.cfg.MaxRequests
	if !full && len(q.ents) == cap(q.ents) {
		c := newCap(cap(q.ents), len(q.ents), 1)
		if full = !q.room(int64(c-cap(q.ents)) * entrySize); !full {
			q.ents = append(make([]Entry, 0, c), q.ents...)
			q.account()
		}
	}
	if full {
		q.st.Overflow++
		if len(q.ents) > q.e0 {
			q.ents[len(q.ents)-1].anon++
		} else {
			q.anon++
		}
		return
	}
	q.ents = append(q.ents, Entry{Op: r.Op, NS: r.NS, ID: r.ID, Write: r.Write, Quiet: r.Quiet, keys0: int32(len(q.keys))})
	q.open = !r.Write
}

// AddKey records read key k of the request last pushed.
func (q *Pending) AddKey(k Key) {
	if !q.open {
		return
	}
	e := &q.ents[len(q.ents)-1]
	if e.extra > 0 || len(q.arena)-q.a0+len(k.Bytes) > q.cfg.MaxKeyBytes || len(q.keys)-q.k0 >= max(q.cfg.MaxKeyBytes/8, 64) {
		q.dropKey(e)
		return
	}
	if q.a0 > 0 && len(q.arena)+len(k.Bytes) > cap(q.arena) {
		n := copy(q.arena, q.arena[q.a0:])
		q.arena = q.arena[:n]
		for i := q.k0; i < len(q.keys); i++ {
			if q.keys[i].off >= 0 {
				q.keys[i].off -= int32(q.a0)
			}
		}
		q.a0 = 0
	}
	if q.k0 > 0 && len(q.keys) == cap(q.keys) {
		n := copy(q.keys, q.keys[q.k0:])
		q.keys = q.keys[:n]
		for i := q.e0; i < len(q.ents); i++ {
			q.ents[i].keys0 -= int32(q.k0)
		}
		q.k0 = 0
	}
	var grow int64
	ka, kk := cap(q.arena), cap(q.keys)
	if len(q.arena)+len(k.Bytes) > ka {
		ka = newCap(ka, len(q.arena), len(k.Bytes))
		grow += int64(ka - cap(q.arena))
	}
	if len(q.keys) == kk {
		kk = newCap(kk, len(q.keys), 1)
		grow += int64(kk-cap(q.keys)) * pendKeySize
	}
	if grow > 0 {
		if !q.room(grow) {
			q.dropKey(e)
			return
		}
		if ka > cap(q.arena) {
			q.arena = append(make([]byte, 0, ka), q.arena...)
		}
		if kk > cap(q.keys) {
			q.keys = append(make([]pendKey, 0, kk), q.keys...)
		}
		q.account()
	}
	off := len(q.arena)
	q.arena = append(q.arena, k.Bytes...)
	q.keys = append(q.keys, pendKey{off: int32(off), n: int32(len(k.Bytes)), weight: k.Weight, prefix: k.Prefix})
	e.nkeys++
}

// dropKey counts a key not kept: it and the request's later keys keep
// their places (NumKeys) without bytes, so their share of the reply goes to
// no key while the keys before keep their elements.
func (q *Pending) dropKey(e *Entry) {
	q.st.KeysDropped++
	e.extra++
}

// Head returns the oldest request awaiting a reply, or nil when the queue
// is empty or the oldest is an unkept one (anon reports true). The pointer
// is valid until the next Push.
func (q *Pending) Head() (e *Entry, anon bool) {
	if q.anon > 0 {
		return nil, true
	}
	if q.e0 >= len(q.ents) {
		return nil, false
	}
	return &q.ents[q.e0], false
}

// Pop removes the oldest request (kept or not).
func (q *Pending) Pop() {
	if q.anon > 0 {
		q.anon--
		if q.anon == 0 && q.e0 < len(q.ents) && q.ents[q.e0].done {
			q.Pop()
		}
		return
	}
	if q.e0 >= len(q.ents) {
		return
	}
	e := &q.ents[q.e0]
	q.anon = e.anon
	q.k0 = int(e.keys0 + e.nkeys)
	q.e0++
	if q.anon == 0 && q.e0 < len(q.ents) && q.ents[q.e0].done {
		q.Pop() // answered already, out of order
		return
	}
	if q.e0 == len(q.ents) {
		q.open = false
		q.ents = q.ents[:0]
		q.keys = q.keys[:0]
		q.arena = q.arena[:0]
		q.e0, q.k0, q.a0 = 0, 0, 0
		return
	}
	if q.k0 < len(q.keys) {
		if k := q.keys[q.k0]; k.off >= 0 {
			q.a0 = int(k.off)
		}
	} else {
		q.a0 = len(q.arena)
	}
}

// Find returns the index of the first kept request with ID id, searching
// from the head, or -1. Protocols whose replies carry the request's ID
// (memcached binary opaque, Tair channel id) pair by it.
func (q *Pending) Find(id uint32) int {
	for i := q.e0; i < len(q.ents); i++ {
		if q.ents[i].ID == id && !q.ents[i].done {
			return i - q.e0
		}
	}
	return -1
}

// At returns the i-th request from the head (as Find counts).
func (q *Pending) At(i int) *Entry { return &q.ents[q.e0+i] }

// Take removes the i-th request from the head, answered out of order: the
// requests before it stay queued for their own replies.
func (q *Pending) Take(i int) {
	if i == 0 {
		q.Pop()
		return
	}
	q.ents[q.e0+i].done = true
}

// NumKeys is how many read keys e has, kept or not.
func (e *Entry) NumKeys() int { return int(e.nkeys + e.extra) }

// Key returns the i-th read key of e; ok is false for a key whose bytes
// were not kept.
func (q *Pending) Key(e *Entry, i int) (k Key, ok bool) {
	if i >= int(e.nkeys) {
		return Key{}, false
	}
	pk := q.keys[int(e.keys0)+i]
	return Key{Bytes: q.arena[pk.off : pk.off+pk.n : pk.off+pk.n], Weight: pk.weight, Prefix: pk.prefix}, true
}

// Attribute gives n reply bytes of e to its read keys, split evenly by key
// occurrence (the remainder, one byte each, to the first keys), so that the
// shares sum to n. It returns the bytes that went to no key (e is a write
// or keyless, or a key was not kept).
func (q *Pending) Attribute(f *Flow, rs Sink, e *Entry, n uint64) uint64 {
	nk := uint64(e.NumKeys())
	if nk == 0 || n == 0 {
		return n
	}
	var lost uint64
	for i := range int(nk) {
		b := Share(n, nk, i)
		if k, ok := q.Key(e, i); ok {
			rs.ReplyKey(f, e.NS, k, b)
		} else {
			lost += b
		}
	}
	return lost
}

// Share is key i's share of n bytes split evenly between nk keys: n/nk,
// plus one for the first n%nk keys, so the shares sum to n.
func Share(n, nk uint64, i int) uint64 {
	if nk == 0 {
		return 0
	}
	s := n / nk
	if uint64(i) < n%nk {
		s++
	}
	return s
}

// AttributeKey gives n reply bytes to the i-th read key of e (an element of
// a multi-key reply). It reports false when that key was not kept.
func (q *Pending) AttributeKey(f *Flow, rs Sink, e *Entry, i int, n uint64) bool {
	if i >= e.NumKeys() {
		return false
	}
	k, ok := q.Key(e, i)
	if ok && n > 0 {
		rs.ReplyKey(f, e.NS, k, n)
	}
	return ok
}
