package detect

import (
	"bytes"
	"net/netip"

	"github.com/hotsniff/hotsniff/decode"
)

// hotEntry is one hot key: 1424 bytes (amd64) plus the key.
type hotEntry struct {
	h      uint64
	key    []byte
	server netip.AddrPort
	ns     int32
	proto  decode.Proto
	prefix bool

	thr float64 // threshold of this key (rules applied), per second
	win window  // its own weighted count, continued from the located slot
	// other: with kernel counting, the reads of other keys in its kernel
	// bucket that user space counted (kernelDemand).
	other window
	// bother: the same for reply bytes (kernelByteDemand).
	bother window
	qps    float64 // last measured rate (demand: wire reads + absorbed), for HotSet
	// qpsLow: qps is a lower bound, counted over less time than the span
	// its rate is divided by (a young entry; see Event.QPSLowerBound).
	qpsLow bool
	// abs counts the local reads client shims reported (absorbed.go), also
	// counted in win; absQPS is its rate as of the last scan.
	abs    window
	absQPS float64
	// rep tracks the clients that report for this key (absorbed.go).
	rep absReporters
	// Reply bytes (detect/bytes.go): threshold (0: none), window since
	// bsince, and the last measured rate.
	bthr   float64
	bwin   window
	bn     window // weighted reads answered with the bytes in bwin: their mean size
	bsince int64
	bps    float64
	// blong: its bytes and reads over the long view since lsince (with a
	// bytes threshold), and bsize its last known mean reply size: with too
	// few reads for the window, the cold verdict on bytes weighs its
	// evidence (bytesCold).
	blong  longView
	lsince int64
	bsize  float64
	// rthin: its reads threshold is too low for the window (a rule's), so
	// the cold verdict on reads weighs rlong, its reads over the long view
	// since rlsince (count and reads seen alike).
	rthin   bool
	rlong   window
	rlsince int64
	gate    uint32 // index of the gate counter (bucket) it is registered in

	since     int64 // start of the measurement in win (ns)
	lastSeen  int64 // last read (ns): LRU order and lifetime
	lastEmit  int64 // last hot event (ns): refresh rate limit
	expires   int64 // tair: end of lifetime unless re-detected
	lastInval int64 // last invalidate sent (ns)
	// adoptUntil: an adopted key (adopt.go) cannot turn cold before it,
	// the end of its first full window of measurement; adoptQPS is the
	// rate its previous daemon published, shown until then.
	adoptUntil int64
	adoptQPS   float64
	invalSent  bool // an invalidate was sent since the key became hot
	pending    bool // a write was merged into the last invalidate: send one more
	wr         writes
}

// hotList is the bounded set of hot keys: a dense array (so the periodic scan
// is a linear walk) and an index by identity hash. Pointers into e are valid
// until the next insert or remove.
type hotList struct {
	idx index
	e   []hotEntry
	max int
}

func newHotList(max int) hotList {
	return hotList{idx: newIndex(max), e: make([]hotEntry, 0, max), max: max}
}

// find returns the entry for the identity, comparing the full identity so a
// 64-bit hash collision can never make another key look hot.
func (l *hotList) find(h uint64, f *decode.Flow, ns int32, key []byte) *hotEntry {
	i, ok := l.idx.get(h)
	if !ok {
		return nil
	}
	e := &l.e[i]
	if e.proto != f.Proto || e.ns != ns || e.server != f.Server || !bytes.Equal(e.key, key) {
		return nil
	}
	return e
}

func (l *hotList) full() bool { return len(l.e) >= l.max }

// lru returns the index of the least recently seen entry.
func (l *hotList) lru() int {
	v := 0
	for i := range l.e {
		if l.e[i].lastSeen < l.e[v].lastSeen {
			v = i
		}
	}
	return v
}

// insert adds an entry (the list must not be full) and returns it.
func (l *hotList) insert(h uint64, f *decode.Flow, ns int32, key []byte) *hotEntry {
	l.e = append(l.e, hotEntry{
		h: h, key: bytes.Clone(key), server: f.Server, ns: ns, proto: f.Proto,
	})
	l.idx.set(h, int32(len(l.e)-1))
	return &l.e[len(l.e)-1]
}

// remove deletes entry i, moving the last entry into its place.
func (l *hotList) remove(i int) {
	l.idx.del(l.e[i].h)
	last := len(l.e) - 1
	if i != last {
		l.e[i] = l.e[last]
		l.idx.set(l.e[i].h, int32(i))
	}
	l.e[last] = hotEntry{}
	l.e = l.e[:last]
}

// index maps identity hashes (never 0) to entry positions: open addressing
// with linear probing, at most half full, so a lookup is one or two cache
// lines and allocates nothing (a Go map costs twice as much here).
type index struct {
	h    []uint64 // 0: empty
	v    []int32
	mask uint64
}

func newIndex(max int) index {
	n := 16
	for n < 2*max {
		n <<= 1
	}
	return index{h: make([]uint64, n), v: make([]int32, n), mask: uint64(n - 1)}
}

func (x *index) get(h uint64) (int32, bool) {
	for i := h & x.mask; ; i = (i + 1) & x.mask {
		switch x.h[i] {
		case h:
			return x.v[i], true
		case 0:
			return 0, false
		}
	}
}

// set inserts or updates h (the table is never full: max entries <= size/2).
func (x *index) set(h uint64, v int32) {
	i := h & x.mask
	for x.h[i] != 0 && x.h[i] != h {
		i = (i + 1) & x.mask
	}
	x.h[i], x.v[i] = h, v
}

// del removes h, shifting later entries of its probe run back so lookups
// never stop early at the hole (no tombstones).
func (x *index) del(h uint64) {
	i := h & x.mask
	for x.h[i] != h {
		if x.h[i] == 0 {
			return
		}
		i = (i + 1) & x.mask
	}
	for {
		x.h[i] = 0
		j := i
		for {
			j = (j + 1) & x.mask
			if x.h[j] == 0 {
				return
			}
			home := x.h[j] & x.mask
			// Move j back to i unless its home lies cyclically in (i, j].
			if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
				x.h[i], x.v[i] = x.h[j], x.v[j]
				i = j
				break
			}
		}
	}
}
