package accuracy

import (
	"fmt"
	"time"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/detect"
)

// DetectorKernel names the kernel path in results: the default detector
// fed as under --kernel-count.
const DetectorKernel = "default, kernel"

// kernelFeed simulates what the detector receives under --kernel-count:
// the programs add every read to its kernel bucket (bpf.KernelBuckets of
// them, by the top bits of the key's identity hash) in the current kernel
// sub-window; the reader hands each ended sub-window's counts to
// KernelCountsAt (as ebpfsrc.KernelReader.Step does) and the programs copy
// from then on only the reads whose bucket is in the located set it
// returned; those reach Key flagged as already counted.
//
// Kernel sub-windows are the detector's length (the daemon configures the
// programs with Detector.SubWindow) but run on CLOCK_MONOTONIC, so their
// boundaries are out of phase with the detector's packet-time sub-windows:
// phase is that offset. every is how often the reader runs; 0 reads each
// sub-window as it ends, as the daemon does (it wakes for each
// sub-window's end, a millisecond after it); 100 ms was the daemon's way
// before that, at its tick.
type kernelFeed struct {
	d      *detect.Detector
	sub    int64
	phase  int64
	every  int64
	start  int64    // start of the sub-window being counted (ns since t0)
	read   int64    // when the reader runs next (ns since t0)
	cur    []uint32 // the counting sub-window's counts
	curIdx []uint32 // its non-zero buckets
	// The same for reply bytes, in units of detect.KernelByteUnit
	// rounded up (as the reply programs count them).
	curB    []uint32
	curBIdx []uint32
	ended   []kernelSub
	counts  []uint32 // handed to KernelCountsAt; zero but for idx between calls
	bits    []uint64 // the located set the programs hold (nil: none yet)
	// stepFn, when set, replaces the detector for tests: it gets each
	// sub-window read and the time it was read at.
	stepFn func(s kernelSub, at int64)
}

// kernelSub is an ended sub-window's counts, not read yet.
type kernelSub struct {
	start, end int64
	idx, n     []uint32
	bidx, bn   []uint32 // reply-byte units
}

func newKernelFeed(d *detect.Detector, every int64) *kernelFeed {
	sub := d.SubWindow()
	// Any phase would do; 3/8 of a sub-window keeps the two clocks' edges
	// apart.
	phase := sub * 3 / 8
	k := &kernelFeed{d: d, sub: sub, phase: phase, every: every, start: phase - sub,
		cur: make([]uint32, bpf.KernelBuckets), counts: make([]uint32, bpf.KernelBuckets),
		curB: make([]uint32, bpf.KernelBuckets)}
	k.read = k.start + sub
	if every > 0 {
		k.read = every
	}
	return k
}

// advance runs the clock to ts (ns since t0): sub-windows that ended are
// closed, and the reader runs where it is due.
func (k *kernelFeed) advance(ts int64) {
	for {
		end := k.start + k.sub
		if end > ts && k.read > ts {
			return
		}
		if end <= k.read {
			k.close(end)
			continue
		}
		k.step(k.read)
	}
}

// close ends the counting sub-window at end.
func (k *kernelFeed) close(end int64) {
	s := kernelSub{start: k.start, end: end, idx: k.curIdx, n: make([]uint32, len(k.curIdx)),
		bidx: k.curBIdx, bn: make([]uint32, len(k.curBIdx))}
	for i, b := range k.curIdx {
		s.n[i] = k.cur[b]
		k.cur[b] = 0
	}
	for i, b := range k.curBIdx {
		s.bn[i] = k.curB[b]
		k.curB[b] = 0
	}
	k.ended = append(k.ended, s)
	k.curIdx, k.curBIdx = nil, nil
	k.start = end
	if k.every == 0 {
		k.read = end
	}
}

// fill sets k.counts at buckets idx to n (nil: back to zero).
func (k *kernelFeed) fill(idx, n []uint32) {
	for i, b := range idx {
		var c uint32
		if n != nil {
			c = n[i]
		}
		k.counts[b] = c
	}
}

// step is the reader: every ended sub-window into the detector, in order,
// and the located set of the last one to the programs.
func (k *kernelFeed) step(at int64) {
	for _, s := range k.ended {
		if k.stepFn != nil {
			k.stepFn(s, at)
			continue
		}
		// The reply bytes first, as the daemon's reader hands them.
		k.fill(s.bidx, s.bn)
		k.d.KernelByteCountsAt(t0+s.start, t0+s.end, k.counts, s.bidx, detect.KernelByteUnit, true)
		k.fill(s.bidx, nil)
		k.fill(s.idx, s.n)
		k.bits = k.d.KernelCountsAt(t0+s.start, t0+s.end, k.counts, s.idx, true)
		k.fill(s.idx, nil)
	}
	k.ended = k.ended[:0]
	if k.every == 0 {
		k.read = k.start + k.sub
	} else {
		k.read += k.every
	}
}

// count counts one read at ts (ns since t0), and its reply of size bytes,
// as the programs do and says whether they copy it (and so its reply).
func (k *kernelFeed) count(ts int64, f *decode.Flow, ns int32, key []byte, weight, size uint32) bool {
	k.advance(ts)
	b := uint32(detect.Bucket(detect.Identity(f.Server, f.Proto, ns, key), bpf.KernelBuckets))
	if k.cur[b] == 0 {
		k.curIdx = append(k.curIdx, b)
	}
	k.cur[b] += weight
	if size > 0 {
		if k.curB[b] == 0 {
			k.curBIdx = append(k.curBIdx, b)
		}
		k.curB[b] += (size + detect.KernelByteUnit - 1) / detect.KernelByteUnit
	}
	return k.bits != nil && k.bits[b/64]&(1<<(b%64)) != 0
}

// kernelNote describes the kernel path's feed for the table.
func kernelNote(p Params) string {
	read := "at each sub-window's end"
	if p.KernelRead > 0 {
		read = "every " + p.KernelRead.String()
	}
	sub := "?"
	if d, err := detect.New(detect.Config{HotQPS: p.HotQPS, Window: p.Window}, nil); err == nil {
		sub = time.Duration(d.SubWindow()).String()
	}
	return fmt.Sprintf("\"%s\": every read counted into %d kernel buckets per %s sub-window, the counts read %s, only reads of located buckets passed on.",
		DetectorKernel, bpf.KernelBuckets, sub, read)
}
