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
// Counts are scaled by 2^shift only up to MaxSampleShift. Deeper sampling
// happens only when the capture sheds load to keep its rings from
// overflowing; scaled further, one read of a random key would stand for
// more than a hot key's window of reads and every key seen would look hot.
// Beyond it keys are under-counted instead: a key must then be 2^(shift -
// MaxSampleShift) times over its threshold to be reported, but no key is
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

// minReadsPerWindow is how many reads of a key at its threshold the
// detector must see in one window to tell 1.2× the threshold from 0.8×:
// the count is Poisson, so its relative spread is 1/√n; at 200 it is 7 %,
// and a key 20 % off the threshold stays on its side of it in the windows
// of a run (the accuracy table under sampling shows the edge: at 1/16 of
// the default window's 800 reads, keys at 0.8× are reported).
const minReadsPerWindow = 200

// MaxSampleShift is the deepest flow sampling (one connection in
// 2^shift) at which the detector still tells keys 20 % above the lowest
// threshold from keys 20 % below it, given its window: a key at the
// threshold must still leave minReadsPerWindow reads in a window. A longer
// --window allows deeper sampling, at the cost of slower detection.
func (d *Detector) MaxSampleShift() uint8 {
	n := d.rules.min() * float64(d.win) / 1e9
	var s uint8
	for s < 31 && n/float64(uint64(2)<<s) >= minReadsPerWindow {
		s++
	}
	return s
}
