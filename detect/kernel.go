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
// trigger and hysteresis, and returns the located set for the programs.
// Stages 2 and 3 (Space-Saving in located buckets, confirmation on a key's
// own count) are unchanged: they see every read of a located bucket.
//
// The pipeline, each kernel sub-window:
//
//	complete, _ := capture.ReadKernelCounts(ep, counts)
//	bits := det.KernelCounts(start, end, counts, complete)
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
type kernelStage1 struct {
	ring   [numSub][]uint32 // per kernel sub-window, per kernel bucket
	next   int              // ring slot the next sub-window goes to
	sum    []uint32         // per detector bucket: sum over the ring
	fine   []uint32         // per kernel bucket: sum over the ring
	active []bool           // per kernel bucket: located
	shift  uint             // kernel bucket >> shift = detector bucket
	bits   []uint64         // located kernel buckets, for the programs
}

// KernelCounts takes the kernel's bucket counts of one sub-window
// [start, end) (Unix ns; len(counts) = the kernel's buckets, a power of
// two at least Buckets) and returns the located kernel buckets as a bitmap
// for the programs (bpf.Capture.SetLocated). A kernel bucket is located
// when its count plus what user space counted itself in its detector
// bucket (fallbacks: an over-estimate, so never one located too late)
// reaches the trigger, with the same hysteresis as a detector bucket.
// complete false (the counts could not be read whole: the reader fell
// behind past what the kernel keeps) marks the span Incomplete: hot keys
// are not turned cold on it. Buckets of hot keys are always located, so
// their reads keep reaching the hot list. The returned slice is reused by
// the next call. Like Key, it runs on the observing goroutine.
func (d *Detector) KernelCounts(start, end int64, counts []uint32, complete bool) []uint64 {
	w := d.def
	if w == nil {
		return nil
	}
	if !complete {
		d.Incomplete(start, end)
	}
	k := w.kern
	if k == nil || len(k.fine) != max(len(counts), len(w.cur)) {
		n := max(len(counts), len(w.cur))
		k = &kernelStage1{sum: make([]uint32, len(w.cur)), fine: make([]uint32, n), active: make([]bool, n),
			shift: uint(bitsLen(n) - bitsLen(len(w.cur))), bits: make([]uint64, (n+63)/64)}
		for i := range k.ring {
			k.ring[i] = make([]uint32, n)
		}
		w.kern = k
	}
	old := k.ring[k.next]
	for b := range old {
		var v uint32
		if b < len(counts) {
			v = counts[b]
		}
		if o := old[b]; o != 0 || v != 0 {
			f := uint64(k.fine[b]) - uint64(o) + uint64(v)
			k.fine[b] = uint32(min(f, math.MaxUint32))
			c := b >> k.shift
			s := uint64(k.sum[c]) - uint64(o) + uint64(v)
			k.sum[c] = uint32(min(s, math.MaxUint32))
			old[b] = v
		}
	}
	k.next = (k.next + 1) % numSub
	d.st.KernelSubWindows++
	clear(k.bits)
	for b := range k.fine {
		c := b >> k.shift
		if k.fine[b] == 0 && !k.active[b] {
			continue
		}
		total := uint64(k.fine[b]) + uint64(w.prev[c]) + uint64(w.cur[c])
		if !k.active[b] {
			if total < w.trig {
				continue
			}
			k.active[b] = true
		} else if total < w.trig/2 {
			k.active[b] = false
			continue
		}
		k.bits[b/64] |= 1 << (b % 64)
		if !w.active[c] {
			// Its detector bucket counts keys from now on (observe
			// would locate it at the next read anyway: its sum is at
			// least this one's).
			w.activate(uint64(c))
		}
	}
	fs := w.shift - k.shift
	for i := range d.hot.e {
		b := d.hot.e[i].h >> fs
		k.bits[b/64] |= 1 << (b % 64)
	}
	return k.bits
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
