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
// sub-windows.
type kernelStage1 struct {
	ring [numSub][]uint32 // per kernel sub-window, per bucket
	next int              // ring slot the next sub-window goes to
	sum  []uint32         // per bucket: sum over the ring
	bits []uint64         // located buckets, for the programs
}

// KernelCounts takes the kernel's bucket counts of one sub-window
// [start, end) (Unix ns; len(counts) = Buckets) and returns the located
// buckets as a bitmap for the programs (bpf.Capture.SetLocated). complete
// false (the counts could not be read whole: the reader fell behind past
// what the kernel keeps) marks the span Incomplete: hot keys are not
// turned cold on it. Buckets of hot keys are always located, so their
// reads keep reaching the hot list. The returned slice is reused by the
// next call. Like Key, it runs on the observing goroutine.
func (d *Detector) KernelCounts(start, end int64, counts []uint32, complete bool) []uint64 {
	w := d.def
	if w == nil {
		return nil
	}
	if !complete {
		d.Incomplete(start, end)
	}
	k := w.kern
	if k == nil {
		k = &kernelStage1{sum: make([]uint32, len(w.cur)), bits: make([]uint64, (len(w.cur)+63)/64)}
		for i := range k.ring {
			k.ring[i] = make([]uint32, len(w.cur))
		}
		w.kern = k
	}
	old := k.ring[k.next]
	n := min(len(counts), len(old))
	for b := range old {
		var v uint32
		if b < n {
			v = counts[b]
		}
		if old[b] != 0 || v != 0 {
			s := uint64(k.sum[b]) - uint64(old[b]) + uint64(v)
			k.sum[b] = uint32(min(s, math.MaxUint32))
			old[b] = v
		}
	}
	k.next = (k.next + 1) % numSub
	d.st.KernelSubWindows++
	clear(k.bits)
	for b := range k.sum {
		total := uint64(k.sum[b]) + uint64(w.prev[b]) + uint64(w.cur[b])
		if !w.active[b] {
			if total >= w.trig {
				w.activate(uint64(b))
			}
		} else if total < w.trig/2 {
			w.active[b] = false
		}
		if w.active[b] {
			k.bits[b/64] |= 1 << (b % 64)
		}
	}
	for i := range d.hot.e {
		b := d.hot.e[i].h >> w.shift
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
