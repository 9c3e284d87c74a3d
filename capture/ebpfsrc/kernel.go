package ebpfsrc

import (
	"fmt"
	"time"

	"github.com/hotsniff/hotsniff/bpf"
)

// Stage1 is the detector as the reader needs it: where the kernel's counts
// of an ended sub-window go (it answers with the located buckets), and the
// hashes of the hot keys. detect.Detector implements it; the capture layer
// stays below the detector.
type Stage1 interface {
	KernelCountsAt(start, end int64, counts []uint32, idx []uint32, complete bool) []uint64
	// KernelByteCountsAt takes a sub-window's reply-byte counts (units of
	// unit bytes), before KernelCountsAt takes its reads.
	KernelByteCountsAt(start, end int64, counts []uint32, idx []uint32, unit uint32, complete bool)
	HotHashes(dst []uint64) []uint64
}

// KernelReader moves the capture programs' bucket counts (in-kernel
// counting, bpf.Config.KernelCount) into the detector, one ended
// sub-window at a time, and writes back what the programs must copy: the
// located buckets and the hot keys. The pipeline calls Step from the
// detector's goroutine as each sub-window ends (at Due: pipeline
// LiveOptions.Wake), not only at its tick: the programs copy a rising
// key's reads only once its bucket is located, so every wait after the
// sub-window's end delays its detection by as much. The tick (100 ms) is
// longer than a sub-window at thresholds above 1000/s (50 ms at 2000/s):
// stepped by the tick alone, a key at 2× the threshold was reported up to
// a tick later, its onset p99 275 ms instead of 199 ms (cmd/accuracy
// -kernel -kernel-read 100ms against -kernel).
type KernelReader struct {
	c      *bpf.Capture
	d      Stage1
	next   int64    // the next kernel sub-window to read
	counts []uint32 // zero between sub-windows but for idx
	idx    []uint32 // the non-zero buckets of counts
	bytes  bool     // the programs count reply bytes: read them too
	bcount []uint32 // as counts, for reply bytes
	bidx   []uint32
	hot    map[uint64]bool // hashes in the programs' hot set
	seen   map[uint64]bool
	hh     []uint64
	st     KernelReaderStats
}

// KernelReaderStats counts what Step did.
type KernelReaderStats struct {
	SubWindows uint64 // sub-windows read whole
	Lost       uint64 // sub-windows not read whole (the reader was late): held as unknown, not cold
	ClockReads uint64 // Steps that read the coarse clock (a system call): the programs' own epoch lagged
}

// NewKernelReader starts reading c's counts from the current sub-window
// on. b is the detector's bucket count; the reader hands the detector the
// kernel's finer buckets (bpf.KernelBuckets), which it locates on.
func NewKernelReader(c *bpf.Capture, d Stage1, b int) *KernelReader {
	b = max(b, bpf.KernelBuckets)
	k := &KernelReader{c: c, d: d, next: c.KernelEpoch(), counts: make([]uint32, b),
		hot: make(map[uint64]bool), seen: make(map[uint64]bool), bytes: c.KernelReplyBytes()}
	if k.bytes {
		k.bcount = make([]uint32, b)
	}
	return k
}

// dueMargin is how long after a sub-window's end Due sets the next Step:
// a program that took its sub-window from the clock just before the end
// may still be adding to its counts (microseconds), and those must not be
// missed by the one read of the sub-window.
const dueMargin = time.Millisecond

// Due is the wall time at which Step has a sub-window to read next: just
// after the sub-window now being counted ends. Like Step, on the pipeline
// goroutine.
//
// The sub-window ends by the coarse clock the programs count by
// (bpf.KernelClockLag behind the fine one): waking at the fine clock's end
// found it not yet ended, and the reader woke again at once until the
// coarse clock ticked, a few milliseconds of spinning every sub-window.
func (k *KernelReader) Due() time.Time {
	lo, _ := k.c.KernelEpochBounds()
	ep := max(k.next, lo)
	return time.Unix(0, k.c.KernelEpochStart(ep+1)).Add(bpf.KernelClockLag + dueMargin)
}

// Stats returns the counters; like Step, on the pipeline goroutine.
func (k *KernelReader) Stats() KernelReaderStats { return k.st }

// Step reads every sub-window that ended since the last call into the
// detector and updates the programs' located buckets and hot set.
func (k *KernelReader) Step() error {
	lo, hi := k.c.KernelEpochBounds()
	if k.next >= hi {
		return nil // nothing ended since the last read: no clock system call
	}
	// The programs' own latest sub-window is a lower bound of the coarse
	// clock's; under traffic it has moved on by the time Due wakes the
	// reader, and the system call is left for quiet times, or when it lags
	// what the fine clock says must have ended (a sub-window without
	// reads).
	now, err := k.c.KernelEpochSeen()
	if err != nil {
		return fmt.Errorf("read kernel epoch: %w", err)
	}
	if now <= k.next || now < lo {
		now = k.c.KernelEpoch()
		k.st.ClockReads++
	}
	if k.next >= now {
		return nil
	}
	var bits []uint64
	if lost := now - k.next - (bpf.KernelSlots - 2); lost > 0 {
		// Late past what the programs keep: those sub-windows are
		// unknown. Their counts leave the window empty, and the detector
		// holds its verdicts over them.
		start, end := k.c.KernelEpochStart(k.next), k.c.KernelEpochStart(k.next+lost)
		for range min(lost, 8) {
			if k.bytes {
				k.d.KernelByteCountsAt(start, end, k.bcount, nil, bpf.KernelByteUnit, false)
			}
			bits = k.d.KernelCountsAt(start, end, k.counts, nil, false)
		}
		k.st.Lost += uint64(lost)
		k.next += lost
	}
	for ; k.next < now; k.next++ {
		// Only the buckets with reads are read, handed on and cleared:
		// the work follows the traffic, not the bpf.KernelBuckets buckets.
		for _, b := range k.idx {
			k.counts[b] = 0
		}
		var complete bool
		var err error
		k.idx, complete, err = k.c.ReadEndedKernelCountsAt(k.next, now, k.counts, k.idx[:0])
		if err != nil {
			return fmt.Errorf("read kernel counts: %w", err)
		}
		start, end := k.c.KernelEpochStart(k.next), k.c.KernelEpochStart(k.next+1)
		if k.bytes {
			for _, b := range k.bidx {
				k.bcount[b] = 0
			}
			var bcomplete bool
			k.bidx, bcomplete, err = k.c.ReadKernelByteCountsAt(k.next, now, k.bcount, k.bidx[:0])
			if err != nil {
				return fmt.Errorf("read kernel reply bytes: %w", err)
			}
			complete = complete && bcomplete
			k.d.KernelByteCountsAt(start, end, k.bcount, k.bidx, bpf.KernelByteUnit, bcomplete)
		}
		if complete {
			k.st.SubWindows++
		} else {
			k.st.Lost++
		}
		bits = k.d.KernelCountsAt(start, end, k.counts, k.idx, complete)
	}
	if err := k.c.SetLocated(bits); err != nil {
		return err
	}
	return k.syncHot()
}

// syncHot makes the programs' hot set the detector's hot list.
func (k *KernelReader) syncHot() error {
	k.hh = k.d.HotHashes(k.hh[:0])
	clear(k.seen)
	for _, h := range k.hh {
		k.seen[h] = true
		if !k.hot[h] {
			if err := k.c.SetHot(h, true); err != nil {
				return err
			}
			k.hot[h] = true
		}
	}
	for h := range k.hot {
		if !k.seen[h] {
			if err := k.c.SetHot(h, false); err != nil {
				return err
			}
			delete(k.hot, h)
		}
	}
	return nil
}
