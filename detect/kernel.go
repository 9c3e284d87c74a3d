package detect

import "math"

// Stage 1 from the kernel. With in-kernel counting (bpf/kcount.h) the
// capture programs add every read they parse to per-CPU bucket counters,
// keyed by the same identity hash and bucket as here, and copy to user
// space only the requests of located buckets (plus writes to hot keys,
// session commands, absorbed-demand reports and what they could not
// parse). Reads of cold keys never reach the detector, so it cannot locate
// buckets on its own counts: the pipeline reads the kernel's counts of each
// ended sub-window and gives them to KernelCounts, which locates buckets on
// them (plus the reads user space counted itself: fallbacks) with the same
// trigger, and returns the located set for the programs.
// Stages 2 and 3 (Space-Saving in located buckets, confirmation on a key's
// own count) are unchanged: they see every read of a located bucket.
//
// The pipeline, each kernel sub-window:
//
//	idx, complete, _ := capture.ReadKernelCountsAt(ep, counts, idx[:0]) // counts zero but for idx
//	bits := det.KernelCountsAt(start, end, counts, idx, complete)
//	capture.SetLocated(bits)
//	for _, h := range det.HotHashes(nil) { capture.SetHot(h, true) } // and remove the others
//
// and the reads of records the programs flagged as counted reach Key with
// Flow.KernelCounted set (capture.Segment.KernelCounted, through the stream
// layer): they go to stages 2 and 3 and the hot list, not into the bucket
// counts again.

// kernelStage1 is the kernel's bucket counts over the last numSub kernel
// sub-windows. The programs count finer buckets than the detector's
// (bpf.KernelBuckets; a detector bucket is the prefix of its kernel
// buckets): buckets are located, for the programs, on the kernel's
// buckets, so random reads spread over many keys locate none while their
// total rate stays below about kernel buckets × trigger. The coarse sums
// are the detector's own buckets, which its stages 2 and 3 use as before.
// The work per sub-window follows the buckets that had reads, not the
// bucket count: each ring slot keeps only its non-zero counts.
type kernelStage1 struct {
	ring   [numSub][]kcount // per kernel sub-window, its non-zero counts
	next   int              // ring slot the next sub-window goes to
	sum    []uint32         // per detector bucket: sum over the ring
	fine   []uint32         // per kernel bucket: sum over the ring
	active []bool           // per kernel bucket: located
	on     []uint32         // the located kernel buckets
	shift  uint             // kernel bucket >> shift = detector bucket
	bits   []uint64         // located kernel buckets, for the programs
	idx    []uint32         // KernelCounts: the non-zero buckets of counts
	// hot marks the kernel buckets of the hot keys (as of the last
	// sub-window taken): reads of other keys there are counted on the hot
	// entries (hotEntry.other), see kernelDemand.
	hot    []uint64
	fshift uint     // identity hash >> fshift = kernel bucket
	seen   []uint64 // located: buckets already set in this pass
}

// kcount is one kernel bucket's count in one sub-window.
type kcount struct{ b, n uint32 }

// KernelCounts takes the kernel's bucket counts of one sub-window
// [start, end) (Unix ns; len(counts) = the kernel's buckets, a power of
// two at least Buckets) and returns the located kernel buckets as a bitmap
// for the programs (bpf.Capture.SetLocated); see KernelCountsAt.
func (d *Detector) KernelCounts(start, end int64, counts []uint32, complete bool) []uint64 {
	if d.def == nil {
		return nil
	}
	k := d.def.kernStage(len(counts))
	k.idx = k.idx[:0]
	for b, v := range counts {
		if v != 0 {
			k.idx = append(k.idx, uint32(b))
		}
	}
	return d.KernelCountsAt(start, end, counts, k.idx, complete)
}

// KernelCountsAt is KernelCounts for counts whose non-zero buckets are
// listed in idx (others may be zero or anything: only idx is read), which
// costs in proportion to len(idx). A kernel bucket is located when its
// count plus what user space counted itself in its detector bucket
// (fallbacks: an over-estimate, so never one located too late) reaches
// the trigger, and stays located while it is at least the trigger (no
// hysteresis: see take); it is looked at when its count changes. complete
// false (the counts could not be read whole: the reader fell behind past
// what the kernel keeps) marks the span Incomplete: hot keys are not
// turned cold on it. The bitmap holds the buckets located on reads, those
// located on reply bytes (KernelByteCountsAt, which the pipeline calls
// first for the same sub-window), and the buckets of the hot keys, so
// their reads keep reaching the hot list. The returned slice is reused by
// the next call. Like Key, it runs on the observing goroutine.
func (d *Detector) KernelCountsAt(start, end int64, counts []uint32, idx []uint32, complete bool) []uint64 {
	if d.def == nil {
		return nil
	}
	if !complete {
		d.Incomplete(start, end)
	}
	k := d.def.kernStage(len(counts))
	k.take(d.def, counts, idx, 1)
	d.st.KernelSubWindows++
	clear(k.bits)
	k.located(k.bits)
	if d.bdet != nil && d.bdet.kern != nil && len(d.bdet.kern.fine) == len(k.fine) {
		d.bdet.kern.located(k.bits)
	}
	clear(k.hot)
	for i := range d.hot.e {
		b := d.hot.e[i].h >> k.fshift
		k.bits[b/64] |= 1 << (b % 64)
		k.hot[b/64] |= 1 << (b % 64)
	}
	return k.bits
}

// KernelByteUnit is the unit of the kernel's reply-byte counts: a reply's
// bytes are counted in units of 64, rounded up (bpf.KernelByteUnit).
const KernelByteUnit = 64

// KernelByteCountsAt takes the kernel's reply-byte counts of one
// sub-window (units of unit bytes, an upper bound of each key's bytes:
// rounded up, and a multi-key reply counted whole to each of its keys),
// like KernelCountsAt takes its reads: the hot-by-bandwidth stage locates
// buckets on them, and KernelCountsAt, called next for the same
// sub-window, adds them to the bitmap for the programs. The reads of those
// buckets are then copied, and their replies with them, so user space
// measures each key's own bytes exactly. Without a reply-bytes threshold
// it does nothing.
func (d *Detector) KernelByteCountsAt(start, end int64, counts []uint32, idx []uint32, unit uint32, complete bool) {
	w := d.bdet
	if w == nil {
		return
	}
	if !complete {
		d.Incomplete(start, end)
	}
	w.kernStage(len(counts)).take(w, counts, idx, max(unit, 1))
	// Every reply user space is given from now on was counted in these
	// counts first (the programs copy replies only of what they framed).
	w.counted = true
}

// take adds one kernel sub-window (counts × unit) to the ring of w's
// kernel stage and locates or releases the buckets whose sums changed.
func (k *kernelStage1) take(w *windowed, counts []uint32, idx []uint32, unit uint32) {
	// The sub-window leaving the ring, then the one entering it: both
	// change the sums of their buckets, which are looked at below.
	old := k.ring[k.next]
	for _, e := range old {
		k.fine[e.b] -= e.n
		k.sum[e.b>>k.shift] -= e.n
	}
	cur := old[:0]
	for _, b := range idx {
		if int(b) >= len(k.fine) || counts[b] == 0 {
			continue
		}
		v := satMul(counts[b], unit)
		k.fine[b] = satAdd(k.fine[b], v)
		k.sum[b>>k.shift] = satAdd(k.sum[b>>k.shift], v)
		cur = append(cur, kcount{b, v})
	}
	k.ring[k.next] = cur
	k.next = (k.next + 1) % numSub
	locate := func(b uint32) {
		c := b >> k.shift
		total := uint64(k.fine[b]) + uint64(w.prev[c]) + uint64(w.cur[c])
		if !k.active[b] {
			if total < w.trig {
				return
			}
			k.active[b] = true
			k.on = append(k.on, b)
			if !w.active[c] {
				// Its detector bucket counts keys from now on (observe
				// would locate it at the next read anyway: its sum is at
				// least this one's).
				w.activate(uint64(c))
			}
		} else if total < w.trig {
			// No hysteresis here, unlike a detector bucket's: the
			// kernel bucket only decides which reads are copied, and a
			// key whose bucket holds less than the trigger is below a
			// quarter of its threshold. With the detector's half-trigger
			// hysteresis every bucket where three or four random keys
			// meet near the trigger stayed located for good once noise
			// took it over: with 10 000 keys at 66/s each
			// (redis-benchmark -r 10000 -P 16, threshold 1000/s) a
			// tenth of the request segments were copied for nothing.
			// The detector bucket keeps its own hysteresis (observe).
			k.active[b] = false
		}
	}
	for _, e := range old {
		locate(e.b)
	}
	for _, e := range cur {
		locate(e.b)
	}
}

// located sets the bits of k's located buckets in bits, and drops the
// released ones (and repeats) from k.on.
func (k *kernelStage1) located(bits []uint64) {
	on := k.on[:0]
	for _, b := range k.on {
		if k.active[b] && k.seen[b/64]&(1<<(b%64)) == 0 {
			k.seen[b/64] |= 1 << (b % 64)
			bits[b/64] |= 1 << (b % 64)
			on = append(on, b)
		}
	}
	k.on = on
	for _, b := range on {
		k.seen[b/64] = 0
	}
}

func satMul(a, b uint32) uint32 {
	if v := uint64(a) * uint64(b); v <= math.MaxUint32 {
		return uint32(v)
	}
	return math.MaxUint32
}

// Unknown is not cold, with the kernel's counts. The programs count every
// read they parse before anything decides whether it is copied: a read
// whose copy user space never counted (the connection shed while a ring
// filled, a record dropped, a connection whose handshake was shed and
// which the stream layer therefore cannot confirm, a read that came too
// late to place) is still in its kernel bucket's count. A hot key's bucket
// is always located, so user space is sent every read of that bucket, and
// counts those of the other keys there (otherRead). The bucket's kernel
// count over the window less the other keys' reads user space saw is then
// an upper bound of the key's own demand, whatever user space missed: the
// key's reads, seen or not, plus the other keys' reads it did not see.
// A hot key whose own measured rate fell below the cold line is turned
// cold only when that bound is below the line too: with nothing missed,
// the bound is the key's own count (to within the sub-window the kernel's
// counts lag by), and the verdict is the same.

// otherRead counts a read of a key that is not hot (raw weight n, before
// sampling's scaling: the kernel counts reads unscaled), copied after the
// programs counted it, on the hot entries whose kernel bucket it fell in.
func (d *Detector) otherRead(h uint64, n uint32) {
	d.other(h, n, func(e *hotEntry) *window { return &e.other })
}

// otherBytes is otherRead for reply bytes: n bytes (unscaled) of a key
// that is not hot.
func (d *Detector) otherBytes(h uint64, n uint32) {
	if d.bdet != nil && d.bdet.kern != nil {
		d.other(h, n, func(e *hotEntry) *window { return &e.bother })
	}
}

// other adds n to the window which picks of every hot entry other than h's
// in h's kernel bucket.
func (d *Detector) other(h uint64, n uint32, which func(*hotEntry) *window) {
	k := d.def.kern
	if k == nil {
		return
	}
	b := h >> k.fshift
	if k.hot[b/64]&(1<<(b%64)) == 0 {
		return
	}
	for i := range d.hot.e {
		if e := &d.hot.e[i]; e.h>>k.fshift == b && e.h != h {
			which(e).add(d.epoch, n)
		}
	}
}

// kernelDemand is the upper bound of hot entry e's demand the kernel's
// counts give (reads per second over the window), or -1 without kernel
// counting.
func (d *Detector) kernelDemand(e *hotEntry) float64 {
	if d.def == nil {
		return -1
	}
	return demandBound(d, d.def.kern, e, &e.other)
}

// kernelByteDemand is kernelDemand for reply bytes: an upper bound of hot
// entry e's reply bytes per second over the window (the kernel's counts
// are one already), or -1 without them.
func (d *Detector) kernelByteDemand(e *hotEntry) float64 {
	if d.bdet == nil {
		return -1
	}
	return demandBound(d, d.bdet.kern, e, &e.bother)
}

// demandBound is k's count of e's kernel bucket over the window less what
// user space counted of the bucket's other keys (other), per second; -1
// without k.
func demandBound(d *Detector, k *kernelStage1, e *hotEntry, other *window) float64 {
	if k == nil {
		return -1
	}
	other.advance(d.epoch)
	n := int64(k.fine[e.h>>k.fshift]) - int64(other.sum)
	return float64(max(n, 0)) * 1e9 / float64(d.win)
}

// kernStage returns w's kernel stage-1 state for n kernel buckets, made
// at the first call.
func (w *windowed) kernStage(n int) *kernelStage1 {
	n = max(n, len(w.cur))
	if k := w.kern; k != nil && len(k.fine) == n {
		return k
	}
	k := &kernelStage1{sum: make([]uint32, len(w.cur)), fine: make([]uint32, n), active: make([]bool, n),
		shift: uint(bitsLen(n) - bitsLen(len(w.cur))), bits: make([]uint64, (n+63)/64),
		hot: make([]uint64, (n+63)/64), seen: make([]uint64, (n+63)/64), fshift: uint(64 - bitsLen(n))}
	w.kern = k
	return k
}

// HotHashes appends the identity hashes of the hot keys to dst, for the
// programs' hot set (writes to them are copied).
func (d *Detector) HotHashes(dst []uint64) []uint64 {
	for i := range d.hot.e {
		dst = append(dst, d.hot.e[i].h)
	}
	return dst
}

// SubWindow is the length of the detector's sub-windows (window / 8): the
// sub-window the capture programs count in (bpf.KernelCountConfig).
func (d *Detector) SubWindow() int64 { return d.sub }
