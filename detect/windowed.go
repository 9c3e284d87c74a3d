package detect

import (
	"math"

	"github.com/hotsniff/hotsniff/decode"
)

// The default detector keeps Tair's sample → locate → hot-list structure but
// replaces its tests, which are unsound:
//
//   - Tair locates a bucket when the σ of the 1024 bucket counts exceeds
//     0.8 × their mean after 50 000 samples. Pure noise already gives
//     σ/mean ≈ √(buckets/samples) ≈ 0.14, and a single key lifts σ/mean by
//     about share × √buckets, so the test fires only once one key holds
//     several percent of ALL traffic, whatever the threshold: keys above
//     the threshold but below that share are missed, and a skewed but
//     harmless mix (many warm keys) alerts. It also locates one bucket,
//     hence one key, per round.
//   - Here every bucket keeps its weighted count over a sliding window of
//     packet time (8 sub-windows). A key at rate R makes its bucket reach at
//     least R, so testing each bucket against the threshold misses no hot
//     key. The test is against a quarter of the lowest threshold
//     (locateRatio) so that a rising key is already counted when it crosses
//     the threshold (short onset latency). Uniform traffic passes it only
//     when a bucket's traffic (total / Buckets) reaches that quarter, and
//     even then nothing is emitted: see the confirmation below.
//   - A located bucket counts the keys that fall in it with a Space-Saving
//     table of slotsPerBucket counters, which holds every key carrying more
//     than 1/slotsPerBucket of the bucket's traffic: every key at the
//     threshold while the bucket runs below slotsPerBucket × threshold. All
//     located buckets count at once, so any number of hot keys is found in
//     the same window.
//   - A key is confirmed hot only on its own count since it entered its slot
//     (never the Space-Saving estimate, which inherits the evicted count, nor
//     the bucket count, which collisions inflate): its weighted count over a
//     span of at least W/2 must reach threshold × span. A count gathered over
//     less than the span is a lower bound of the rate over the span, so a
//     fast key is confirmed early (a key at 2× after W/4) and a phantom from
//     a bucket collision is never confirmed. W is chosen so that a key at
//     the threshold adds ~800 requests per window (Poisson σ 3.5 %): once a
//     key has been tracked for a window, a key at 0.8× the threshold is ~6 σ
//     short of it; the weaker tests over shorter spans (down to ~4.5 σ at
//     W/2) happen only in the first window of a key's tenure in its slot.
//
// Memory is fixed at New: per bucket 49 bytes (counts, history, state) + slotsPerBucket ×
// 100 bytes (hash, estimate, slot), ~850 bytes, and 768 more for the long
// views of a stage with thin keys (bytes.go: always the bytes stage); per
// hot entry 1424 bytes + the key. It does not depend on the number of distinct keys.

// slotsPerBucket is the size of a located bucket's Space-Saving table.
const slotsPerBucket = 8

// locateRatio: a bucket is located when its rate reaches this fraction of
// the lowest threshold, so a rising key is already being counted by the
// time it crosses the threshold (cost: more located buckets, never events).
const locateRatio = 0.25

// Bucket counts are split by how often they are touched. Every read adds
// to cur and compares prev+cur with the trigger: 8 bytes per bucket, 32 KiB
// for 4096 buckets, which stays in the L1/L2 cache even when the daemon
// shares its core with the cache server. The per-sub-window history (ring)
// is touched only when the epoch moves, for all buckets at once. With one
// 48-byte window per bucket (192 KiB, read at random), the live daemon
// spent half of its CPU waiting for those lines under redis-benchmark
// -r 10000 -P 16; the BenchmarkObserve* figures, with the caches to
// themselves, never showed it.

// slot is the detail of one located key; its identity hash and Space-Saving
// estimate live in windowed.sh and windowed.se, so a bucket's lookup reads
// one cache line of hashes and, on a miss, half a line of estimates.
type slot struct {
	flags uint8
	thr   float64 // threshold of this key once looked up
	need  uint64  // count below which the key cannot be confirmed (fast reject)
	since int64   // when the key entered the slot
	own   window  // exact count of this key since it entered
	reads uint32  // bytes stage: weighted reads answered since it entered
}

const (
	slotChecked uint8 = 1 << iota // rules looked up; thr is the key's own
	slotIgnored                   // key matches the ignore list
	slotPrefix                    // a Tair prefix read was seen
)

type windowed struct {
	d       *Detector
	shift   uint
	ep      int64    // epoch that cur counts
	cur     []uint32 // per bucket: weighted reads in epoch ep
	prev    []uint32 // per bucket: the other numSub-1 sub-windows, summed at the last roll
	ring    []uint32 // per bucket, numSub sub-windows (cold: written at rolls)
	active  []bool   // per bucket: located, its slots count keys
	decay   []int64  // per bucket: epoch up to which its slots' estimates have been decayed
	slots   []slot
	sh      []uint64 // identity hash per slot; 0 when empty
	se      []uint32 // Space-Saving estimate per slot (decayed): eviction order only
	trig    uint64   // bucket count that locates it (locateRatio × lowest threshold)
	minNeed uint64   // count a key at the lowest threshold reaches in W/2
	minThr  float64  // lowest threshold (per second)
	// bytes: this instance counts reply bytes (detect/bytes.go), not reads.
	bytes bool
	// long: per slot, the long view (bytes.go): always for the bytes
	// stage, for reads only when a threshold is too low for the window.
	long []longView
	// kern: the kernel's bucket counts (kernel.go), nil without kernel
	// counting; counted: the reads now observed are already in them.
	kern    *kernelStage1
	counted bool
}

func newWindowed(d *Detector, c Config) *windowed {
	return newWindowedFor(d, c, d.rules.min(), false)
}

func newWindowedFor(d *Detector, c Config, minThr float64, bytes bool) *windowed {
	w := &windowed{
		d:      d,
		shift:  uint(64 - bitsLen(c.Buckets)),
		cur:    make([]uint32, c.Buckets),
		prev:   make([]uint32, c.Buckets),
		ring:   make([]uint32, c.Buckets*numSub),
		active: make([]bool, c.Buckets),
		decay:  make([]int64, c.Buckets),
		slots:  make([]slot, c.Buckets*slotsPerBucket),
		sh:     make([]uint64, c.Buckets*slotsPerBucket),
		se:     make([]uint32, c.Buckets*slotsPerBucket),
		minThr: minThr,
		bytes:  bytes,
	}
	if bytes || d.thinAt(minThr, 1) {
		w.long = make([]longView, c.Buckets*slotsPerBucket)
	}
	full := float64(d.win-d.sub) / 1e9 // seconds a full ring surely covers
	w.trig = max(uint64(locateRatio*w.minThr*full), 1)
	w.minNeed = max(uint64(math.Floor(w.minThr*float64(d.win/2)/1e9)), 1)
	return w
}

// bitsLen returns log2 of a power of two.
func bitsLen(n int) int {
	b := 0
	for n > 1 {
		n >>= 1
		b++
	}
	return b
}

func (w *windowed) observe(h uint64, f *decode.Flow, ns int32, k decode.Key, n uint32) {
	d := w.d
	ep := d.epoch
	if ep != w.ep {
		w.roll(ep)
	}
	bi := h >> w.shift
	c := w.cur[bi]
	if !w.counted {
		c = satAdd(c, n)
		w.cur[bi] = c
	}
	sum := uint64(w.prev[bi]) + uint64(c)
	if w.kern != nil {
		sum += uint64(w.kern.sum[bi])
	}
	if !w.active[bi] {
		if sum < w.trig {
			return
		}
		w.activate(bi)
	} else if sum < w.trig/2 {
		// Hysteresis: stay located down to half the trigger, so a key near
		// the threshold does not lose its count to noise.
		w.active[bi] = false
		return
	}
	lo := bi * slotsPerBucket
	sh := w.sh[lo : lo+slotsPerBucket : lo+slotsPerBucket]
	se := w.se[lo : lo+slotsPerBucket : lo+slotsPerBucket]
	if w.decay[bi] != ep {
		// Age the estimates (×3/4 per sub-window) so the table follows a
		// changing mix instead of keeping yesterday's keys.
		steps := min(ep-w.decay[bi], 32)
		for i := range se {
			for range steps {
				se[i] -= se[i] >> 2
			}
		}
		w.decay[bi] = ep
	}
	i := 0
	for ; i < slotsPerBucket; i++ {
		if sh[i] == h {
			break
		}
	}
	if i == slotsPerBucket {
		// Space-Saving: replace the smallest estimate, inheriting it so a
		// newcomer is not evicted by the next newcomer.
		i = 0
		for j := 1; j < slotsPerBucket; j++ {
			if se[j] < se[i] {
				i = j
			}
		}
		sh[i] = h
		w.slots[lo+uint64(i)] = slot{since: d.now, need: w.minNeed, own: window{epoch: ep}}
		if w.long != nil {
			w.long[lo+uint64(i)] = longView{b: window{epoch: ep >> longShift}, r: window{epoch: ep >> longShift}}
		}
		d.st.Located++
	}
	se[i] = satAdd(se[i], n)
	s := &w.slots[lo+uint64(i)]
	s.own.add(ep, n)
	if w.bytes {
		s.reads = satAdd(s.reads, k.Weight)
	}
	var lv *longView
	if w.long != nil {
		// n: bytes, or reads scaled for sampling; k.Weight: the reads seen.
		lv = &w.long[lo+uint64(i)]
		lv.b.add(ep>>longShift, n)
		lv.r.add(ep>>longShift, k.Weight)
	}
	if k.Prefix {
		s.flags |= slotPrefix
	}
	if s.own.sum < s.need {
		return
	}
	if w.confirm(s, lv, h, f, ns, k) {
		// The entry measures it from now on: free the slot.
		sh[i], se[i] = 0, 0
	}
}

// activate locates bucket bi: its slots start counting keys.
func (w *windowed) activate(bi uint64) {
	w.active[bi] = true
	w.decay[bi] = w.d.epoch
	lo := bi * slotsPerBucket
	clear(w.sh[lo : lo+slotsPerBucket])
	clear(w.se[lo : lo+slotsPerBucket])
}

// confirm promotes the slot's key if its own rate reaches its threshold
// (lv: its long view, nil when the stage keeps none).
func (w *windowed) confirm(s *slot, lv *longView, h uint64, f *decode.Flow, ns int32, k decode.Key) bool {
	d := w.d
	if s.flags&slotChecked == 0 {
		// Rules are looked up once per slot tenancy, only for keys that got
		// this far, so patterns cost nothing per read.
		s.flags |= slotChecked
		thr, bthr, ignored := d.rules.lookupBoth(f.Proto, k.Bytes)
		if w.bytes {
			thr = bthr
		}
		if ignored || !(thr > 0) {
			s.flags |= slotIgnored
			s.need = math.MaxUint64
			d.st.Ignored++
			return false
		}
		s.thr = thr
		s.need = max(uint64(math.Floor(thr*float64(d.win/2)/1e9)), 1)
		if s.own.sum < s.need {
			return false
		}
	}
	if w.thin(lv, s.thr) {
		// Too few reads behind the window's bytes: judge on the long view.
		if !lv.confirms(d, s.since, s.thr) {
			return false
		}
	} else if d.rate(&s.own, s.since, d.win/2) < s.thr {
		return false
	}
	// Under sampling, not on too few seen reads (sampling.go): the bytes
	// stage counts its seen reads apart, unscaled.
	if g := d.samp.guard; g != 0 && (w.bytes && uint64(s.reads) < guardReads || !w.bytes && s.own.sum < g) {
		return false
	}
	if w.bytes {
		s.reads = lv.ownReads(s) // the reads behind the window promoted
	}
	// The count already holds at least threshold × W/2 reads, so it is a
	// solid estimate over its real span: flooring the span at two
	// sub-windows (as the check above floors it at W/2) would report a key
	// at 20× the threshold as 2× when it is caught within milliseconds.
	d.promoteFrom(w, h, f, ns, k, s)
	return true
}

func satAdd(a, b uint32) uint32 {
	if c := a + b; c >= a {
		return c
	}
	return math.MaxUint32
}

// roll moves every bucket's count to epoch ep: the current sub-window goes
// into the history, sub-windows older than numSub epochs are dropped, and
// prev becomes the sum of what remains. A few microseconds per sub-window
// (W/8) for 4096 buckets; empty buckets are skipped.
func (w *windowed) roll(ep int64) {
	d := ep - w.ep
	if d <= 0 || d >= numSub {
		clear(w.cur)
		clear(w.prev)
		clear(w.ring)
		w.ep = ep
		return
	}
	cj := w.ep & (numSub - 1)
	for b := range w.cur {
		if w.cur[b] == 0 && w.prev[b] == 0 {
			continue // its whole history is zero
		}
		r := w.ring[b*numSub : b*numSub+numSub : b*numSub+numSub]
		r[cj] = w.cur[b]
		w.cur[b] = 0
		for i := int64(1); i <= d; i++ {
			r[(w.ep+i)&(numSub-1)] = 0
		}
		var sum uint64
		for _, v := range r {
			sum += uint64(v)
		}
		w.prev[b] = uint32(min(sum, math.MaxUint32))
	}
	w.ep = ep
}

// reset forgets every count (after a clock jump).
func (w *windowed) reset() {
	clear(w.cur)
	clear(w.prev)
	clear(w.ring)
	clear(w.active)
	clear(w.sh)
	clear(w.se)
	w.ep = w.d.epoch
}
