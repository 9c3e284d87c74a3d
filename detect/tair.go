package detect

import (
	"math"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/event"
)

// tairDet is Tair's server-side hot-key pipeline, kept for comparison:
//
//  1. sampling: every read is hashed into one of 1024 buckets; after
//     sample_max reads, if the standard deviation of the bucket counts
//     exceeds N × their mean and the hottest bucket's rate reaches the
//     threshold, that bucket is located;
//  2. reaping: the next reap_max reads that fall in the located bucket are
//     counted per key, and the top key, if its estimated rate (its share of
//     the reaped reads × the bucket rate) reaches its threshold, becomes hot;
//  3. the hot list is a bounded LRU; an entry lives TTL after its last
//     detection and is checked against every later read.
//
// One key per round, and the σ test only fires once one key holds several
// percent of all traffic (see windowed.go). Memory: 4 bytes per bucket,
// 24 bytes per reap slot.
type tairDet struct {
	d      *Detector
	c      TairConfig
	minThr float64

	counts  []uint64
	samples int
	start   int64

	locating bool
	loc      uint64  // located bucket
	locRate  float64 // its weighted rate in the sampling round (per second)
	locAt    int64
	reaped   int
	reapW    uint64
	reap     []reapEntry

	// The reap table keeps hashes only; the winner is promoted when it is
	// next read, which is when its bytes are at hand.
	pendH      uint64
	pendQPS    float64
	pendPrefix bool
	pendAt     int64
}

type reapEntry struct {
	h      uint64
	n      uint64
	prefix bool
}

func newTair(d *Detector, c TairConfig) *tairDet {
	return &tairDet{
		d: d, c: c, minThr: d.rules.min(),
		counts: make([]uint64, c.Buckets),
		reap:   make([]reapEntry, 0, c.ReapMax),
		start:  math.MinInt64,
	}
}

func (t *tairDet) observe(h uint64, f *decode.Flow, ns int32, k decode.Key, n uint32) {
	d := t.d
	if t.start == math.MinInt64 {
		t.start = d.now
	}
	if h == t.pendH {
		t.promotePending(h, f, ns, k)
	}
	b := h % uint64(len(t.counts))
	if t.locating {
		if b != t.loc {
			return
		}
		t.reapAdd(h, n, k.Prefix)
		if t.reaped >= t.c.ReapMax {
			t.endReap()
		}
		return
	}
	t.counts[b] += uint64(n)
	t.samples++
	if t.samples >= t.c.SampleMax {
		t.endRound()
	}
}

func (t *tairDet) reapAdd(h uint64, n uint32, prefix bool) {
	t.reaped++
	t.reapW += uint64(n)
	for i := range t.reap {
		if t.reap[i].h == h {
			t.reap[i].n += uint64(n)
			t.reap[i].prefix = t.reap[i].prefix || prefix
			return
		}
	}
	t.reap = append(t.reap, reapEntry{h: h, n: uint64(n), prefix: prefix})
}

// endRound applies Tair's spread test to the sampled buckets.
func (t *tairDet) endRound() {
	d := t.d
	d.st.Rounds++
	var sum float64
	top := 0
	for i, c := range t.counts {
		sum += float64(c)
		if c > t.counts[top] {
			top = i
		}
	}
	mean := sum / float64(len(t.counts))
	var v float64
	for _, c := range t.counts {
		x := float64(c) - mean
		v += x * x
	}
	sigma := math.Sqrt(v / float64(len(t.counts)))
	elapsed := max(d.now-t.start, 1)
	rate := float64(t.counts[top]) * 1e9 / float64(elapsed)
	if sigma > t.c.SigmaN*mean && rate >= t.minThr {
		t.locating = true
		t.loc = uint64(top)
		t.locRate = rate
		t.locAt = d.now
		t.reaped, t.reapW = 0, 0
		t.reap = t.reap[:0]
		d.st.Located++
	}
	clear(t.counts)
	t.samples = 0
	t.start = d.now
}

// endReap picks the round's one key.
func (t *tairDet) endReap() {
	t.locating = false
	t.start = t.d.now
	var best *reapEntry
	for i := range t.reap {
		if best == nil || t.reap[i].n > best.n {
			best = &t.reap[i]
		}
	}
	if best == nil || t.reapW == 0 {
		return
	}
	qps := float64(best.n) / float64(t.reapW) * t.locRate
	if qps < t.minThr {
		return
	}
	t.pendH, t.pendQPS, t.pendPrefix, t.pendAt = best.h, qps, best.prefix, t.locAt
}

func (t *tairDet) promotePending(h uint64, f *decode.Flow, ns int32, k decode.Key) {
	d := t.d
	t.pendH = 0
	thr, ignored := d.rules.lookup(f.Proto, k.Bytes)
	if ignored {
		d.st.Ignored++
		return
	}
	if t.pendQPS < thr {
		return
	}
	if e := d.hot.find(h, f, ns, k.Bytes); e != nil {
		// Re-detected: extend its lifetime, refresh at most every RefreshEvery.
		e.expires = d.now + d.lifetime
		e.qps = t.pendQPS
		if d.now-e.lastEmit >= d.refresh {
			d.st.Refreshes++
			e.lastEmit = d.now
			d.emit(e, event.TypeHot, e.qps)
		}
		return
	}
	d.promote(h, f, ns, k, thr, t.pendQPS, false, t.pendPrefix || k.Prefix, t.pendAt, nil, d.now, nil)
}

// reset starts a new sampling round (after a clock jump).
func (t *tairDet) reset(ts int64) {
	clear(t.counts)
	t.samples, t.start, t.locating, t.pendH = 0, ts, false, 0
}
