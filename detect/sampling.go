package detect

import "math"

// Flow sampling. Under a CPU budget (--max-cpu) the capture copies one
// connection in 2^shift and skips the others whole. Every read it does see
// then stands for 2^shift reads, so counts are scaled here, where they are
// added, and thresholds, rates and events stay in true requests per second.
// Scaling by a power of two keeps counts integers.

// SetSampleShift tells the detector that from now on one connection in
// 2^shift is seen (0: all). Like Key, it runs on the observing goroutine;
// the pipeline calls it when the capture's records say the rate changed.
//
// Counts are scaled by 2^shift only while a key at the threshold still
// leaves scaleReads reads in a window (1/4 with the default window).
// Deeper sampling happens only when the capture sheds load to keep its
// rings from overflowing; scaled further, one read of a random key would
// stand for more than a hot key's window of reads and every key seen would
// look hot. Beyond it keys are under-counted instead: a key must be
// proportionally further over its threshold to be reported, but no key is
// reported that is not hot.
func (d *Detector) SetSampleShift(shift uint8) {
	d.shift = min(shift, 31)
	d.scaleShift = min(d.shift, d.maxShift)
}

// SampleShift is the sampling shift in effect.
func (d *Detector) SampleShift() uint8 { return d.shift }

// sampleRate is the fraction of connections seen, for events: 0 (absent on
// the wire) when all are.
func (d *Detector) sampleRate() float64 {
	if d.shift == 0 {
		return 0
	}
	return 1 / float64(uint64(1)<<d.shift)
}

// scaleWeight multiplies a read's weight by 2^shift, saturating.
func scaleWeight(w uint32, shift uint8) uint32 {
	if w > math.MaxUint32>>shift {
		return math.MaxUint32
	}
	return w << shift
}

// scaleHits multiplies a reported hit count by 2^shift, saturating.
func scaleHits(n uint64, shift uint8) uint64 {
	if n > math.MaxUint64>>shift {
		return math.MaxUint64
	}
	return n << shift
}

// The count of a key's reads in a window is Poisson: its relative spread
// is 1/√n. A key at its threshold leaves threshold × window reads in a
// window (800 with the default window), 1/2^shift of them when sampled.
// The accuracy table under sampling (docs/detection.md) shows where that
// stops telling keys apart:
//
//   - resolveReads: with 400 (1/2 of the default window's), keys at 1.2×
//     the threshold were all found and at most one key in 100 at exactly
//     0.8× was reported; with 200 (1/4), up to 19 in 100 were. Sampling
//     chosen for a CPU budget stops here.
//   - scaleReads: with 200 every key at 1.2× is still found. Counts are
//     scaled no further than this, whatever the capture sheds: scaled by
//     4096, one read of a random key would look like a hot key's window.
const (
	resolveReads = 400
	scaleReads   = 200
)

// shiftFor is the deepest sampling shift at which a key at the lowest
// threshold still leaves reads reads in a window.
func (d *Detector) shiftFor(reads float64) uint8 {
	n := d.rules.min() * float64(d.win) / 1e9
	var s uint8
	for s < 31 && n/float64(uint64(2)<<s) >= reads {
		s++
	}
	return s
}

// MaxSampleShift is the deepest flow sampling (one connection in 2^shift)
// a CPU budget should ask for: the detector still tells keys 20 % above the
// lowest threshold from keys 20 % below it. With the default window it is
// 1 (1/2); a longer --window allows deeper sampling, at the cost of slower
// detection.
func (d *Detector) MaxSampleShift() uint8 { return d.shiftFor(resolveReads) }
