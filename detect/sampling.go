package detect

import "math"

// Flow sampling. Under a CPU budget (--max-cpu) the capture copies a
// fraction of the connections, each whole, and skips the others. Every
// read it does see then stands for 1/fraction reads, so counts are scaled
// here, where they are added, and thresholds, rates and events stay in true
// requests per second.
//
// The fraction is what the capture really saw when it measured it (the
// request bytes of kept connections over all request bytes: with few
// connections the kept share differs from the nominal rate by chance),
// carried over small changes of rate, else the nominal rate of its sampling
// level. Scaled weights are rounded
// stochastically (floor, plus one with the probability of the fraction
// left), so counts stay integers and unbiased at any rate.
//
// Scaled counts carry the sampling noise of the reads really seen: a key is
// confirmed hot under sampling only on at least guardReads seen reads (see
// below). At the rates where a key at its threshold leaves that many in
// half a window, the guard changes nothing; deeper, a key has to be further
// over its threshold to be reported, but one seen read of a random key,
// scaled up, never makes it hot.

// scaleBits is the fixed-point precision of the scale (scale < 4096).
const scaleBits = 20

// maxScale bounds the scale: a measured fraction is trusted within a factor
// of 4 of the nominal rate, whose deepest level is about 1/244.
const maxScale = 1 << (32 - scaleBits)

// The count of a key's reads in a window is Poisson: its relative spread
// is 1/√n. Unsampled, a key is judged first on half a window, where a key
// at the threshold leaves 400 reads with the default window: a key at 0.8×
// the threshold is then 4.5 σ short of it. Sampled, it leaves fewer reads
// in the same span, and the same test on fewer reads reports keys at 0.8×
// (3 in 100 at 1/2 in the accuracy table, docs/detection.md). So under
// sampling a key is not confirmed on fewer than guardReads seen reads, the
// evidence the unsampled test has: at the resolvable rate (1/2 with the
// default window) a key at the threshold gathers them over a whole window,
// and below it the lowest rate a key is reported at rises in proportion.
const guardReads = 400

// sampling is the detector's view of the capture's flow sampling.
type sampling struct {
	rate  float64 // nominal fraction of connections seen; 1 when all are
	luck  float64 // measured fraction ÷ nominal rate; 0 until measured
	scale float64 // what one seen read stands for: 1/seen or 1/rate
	fp    uint64  // scale in fixed point (scaleBits)
	guard uint64  // least scaled count a key is confirmed on (0: no sampling)
	rng   uint64  // xorshift state for stochastic rounding
}

func (s *sampling) init() {
	s.rate, s.scale, s.fp, s.rng = 1, 1, 1<<scaleBits, 0x9E3779B97F4A7C15
}

func (s *sampling) update() {
	f := s.rate
	if s.luck > 0 {
		f = min(s.rate*s.luck, 1)
	}
	s.scale = min(1/f, maxScale-1)
	if s.rate >= 1 {
		s.scale = 1
	}
	s.fp = uint64(math.Round(s.scale * (1 << scaleBits)))
	s.guard = 0
	if s.scale > 1 {
		s.guard = uint64(guardReads * s.scale)
	}
}

// SetSampleRate tells the detector that from now on the given fraction of
// connections is seen (1, or 0, when all are). Like Key, it runs on the
// observing goroutine; the pipeline calls it when the capture's records say
// the rate changed.
//
// A measured fraction (SetSeenFraction) is kept as its ratio to the
// nominal rate: the connections kept at a nearby rate are nearly the same
// ones (the sets are nested), so they carry about the same extra or missing
// share. A change of more than half an octave forgets it.
func (d *Detector) SetSampleRate(rate float64) {
	if !(rate > 0 && rate < 1) {
		rate = 1
	}
	if rate == d.samp.rate {
		return
	}
	if r := rate / d.samp.rate; r < math.Sqrt2/2 || r > math.Sqrt2 {
		d.samp.luck = 0
	}
	d.samp.rate = rate
	d.samp.update()
}

// SetSeenFraction gives the fraction of requests the capture really saw
// while the sampling rate was rate, measured by the capture. It is used for
// scaling from then on, trusted within a factor of 4 of the nominal rate; a
// measurement of another rate (the rate changed meanwhile) is ignored.
func (d *Detector) SetSeenFraction(rate, seen float64) {
	if rate != d.samp.rate || d.samp.rate >= 1 || !(seen > 0) {
		return
	}
	d.samp.luck = min(max(seen/rate, 0.25), 4)
	d.samp.update()
}

// SampleRate is the fraction of requests counts are scaled from: 1 when
// everything is seen.
func (d *Detector) SampleRate() float64 { return 1 / d.samp.scale }

// sampleRate is the fraction of requests seen, for events: 0 (absent on
// the wire) when all are, else rounded to 4 significant digits.
func (d *Detector) sampleRate() float64 {
	if d.samp.scale == 1 {
		return 0
	}
	r := 1 / d.samp.scale
	p := math.Pow(10, 3-math.Floor(math.Log10(r)))
	return math.Round(r*p) / p
}

// scaleWeight multiplies a read's weight by the scale, rounding
// stochastically and saturating.
func (d *Detector) scaleWeight(w uint32) uint32 {
	p := uint64(w) * d.samp.fp
	r := p >> scaleBits
	x := d.samp.rng
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	d.samp.rng = x
	if x&(1<<scaleBits-1) < p&(1<<scaleBits-1) {
		r++
	}
	return uint32(min(r, math.MaxUint32))
}

// scaleHits multiplies a reported hit count by the scale, saturating.
func (d *Detector) scaleHits(n uint64) uint64 {
	if d.samp.scale == 1 {
		return n
	}
	v := float64(n) * d.samp.scale
	if v >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(math.Round(v))
}

// ResolvableRate is the lowest sampling rate at which the detector still
// tells keys 20 % above the lowest threshold from keys 20 % below it: a key
// at the threshold leaves guardReads seen reads in a window. With the
// default window it is 1/2; a longer --window lowers it, at the cost of
// slower detection. Below it the guard raises the rate a key must reach to
// be reported (EffectiveThreshold).
func (d *Detector) ResolvableRate() float64 {
	n := d.rules.min() * float64(d.win) / 1e9
	return min(guardReads/n, 1)
}

// EffectiveThreshold is the lowest rate (per second) at which a key is
// reported at the sampling in effect: the lowest threshold, or higher when
// sampling is deeper than ResolvableRate.
func (d *Detector) EffectiveThreshold() float64 {
	t := d.rules.min()
	if d.samp.guard == 0 {
		return t
	}
	return max(t, float64(d.samp.guard)*1e9/float64(d.win))
}
