package detect

import (
	"math"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/event"
)

// Hot by bandwidth. With Config.HotBytes (or a rule's hot_bytes) set, the
// default detector runs a second bucket/locate/confirm stage beside the one
// on reads: the same windowed structure, counting the reply bytes attributed
// to each key (decode.Sink.ReplyKey) instead of its weighted reads. A key is
// promoted by whichever stage confirms it first; the other stage's count of
// the key, if it is being located, moves into the hot entry with it, so the
// first event already carries both rates. A hot entry measures both its reads
// and its reply bytes, and turns cold only when both fall below ColdRatio of
// their thresholds. Reason says which thresholds the key is at.

// bytesInit carries the reply-bytes state of a key being promoted.
type bytesInit struct {
	thr   float64
	win   *window
	reads uint32 // weighted reads answered with the bytes in win
	since int64
	bps   float64
}

// ReplyKey (decode.Sink): n reply bytes answering read key k.
func (d *Detector) ReplyKey(f *decode.Flow, ns int32, k decode.Key, n uint64) {
	if d.def == nil || n == 0 {
		return
	}
	if d.clock(f.TS) {
		d.st.Late++
		d.missed(f.TS)
		return
	}
	h := d.identity(f, ns, k.Bytes)
	c, w := uint32(min(n, math.MaxUint32)), k.Weight
	d.st.ReplyBytes += n
	if d.samp.guard != 0 {
		// Replies of sampled-out connections are skipped with them.
		c, w = d.scaleWeight(c), d.scaleWeight(w)
	}
	if d.gate[h>>(64-gateBits)] != 0 {
		if e := d.hot.find(h, f, ns, k.Bytes); e != nil {
			if e.bwin.sum == 0 && e.bthr == 0 && e.bsince == 0 {
				e.bsince = d.now
			}
			e.bwin.add(d.epoch, c)
			e.bn.add(d.epoch, w)
			if e.bthr > 0 { // only a bytes threshold's cold verdict reads it
				e.blong.b.add(d.epoch>>longShift, c)
				e.blong.r.add(d.epoch>>longShift, w)
			}
			return
		}
	}
	if d.bdet != nil {
		d.otherBytes(h, uint32(min(n, math.MaxUint32)))
		d.bdet.observe(h, f, ns, k, c)
	}
}

// Reply (decode.Sink): whole replies are counted elsewhere.
func (d *Detector) Reply(*decode.Flow, uint64, bool) {}

// take removes the slot of identity h from w, if it is being counted.
func (w *windowed) take(h uint64) (slot, bool) {
	if w == nil {
		return slot{}, false
	}
	bi := h >> w.shift
	if !w.active[bi] {
		return slot{}, false
	}
	lo := bi * slotsPerBucket
	for i := lo; i < lo+slotsPerBucket; i++ {
		if w.sh[i] == h {
			s := w.slots[i]
			if w.bytes {
				s.reads = w.long[i].ownReads(&s)
			}
			w.sh[i], w.se[i] = 0, 0
			return s, true
		}
	}
	return slot{}, false
}

// Thin keys: the stages weigh their evidence. The window is sized for
// --hot-qps: a key at it adds about countsAtHotRate reads a window, so the
// window's count is a solid estimate (W/2 holds evidenceReads of them). A
// key judged against a threshold it reaches on far fewer reads is thin: hot
// by its bytes with a large value (a 20 000-byte value at 4 MB/s: 200 reads
// a second, 80 a 400 ms window), or under a rule's reads threshold well
// below --hot-qps (200/s against a window sized for 2000/s: 80 a window).
// At a few dozen reads the window's count varies by one part in eight: a
// key at 0.8× of its threshold crosses it now and then, and a test on the
// window alone reports it (84 of 100 such keys in 5 s, 100 in 25 s, for a
// rule at a tenth of --hot-qps). So each slot of the bytes stage, and of the
// reads stage when some threshold is thin, also keeps a long view: its
// count (bytes, or reads scaled for sampling) and its reads seen over
// numSub coarse sub-windows of one window each (8 W). A key whose reads at
// the threshold's rate would not reach evidenceReads in W/2 (at its own
// mean size) is judged on the long view, over its span there (from when it
// entered its slot, at most 8 W, at least W/2): its count must reach the
// threshold over the span, as on the window, and its reads must be more
// than a key at quietRatio of the threshold would make over the same span
// by evidenceZ standard deviations (Poisson: the square root of that
// count). A key far above the threshold passes within a few dozen reads; a
// key just above waits for about a hundred reads at the threshold; once the
// span covers the whole view (7 W of it), the rate alone decides. Memory:
// 96 bytes a slot, 768 a bucket, for the bytes stage, and for the reads
// stage only when a threshold is thin. Hot entries keep the same long view
// for their cold verdict (coldOnEvidence).

// longShift: a coarse sub-window of the long view is 1<<longShift
// sub-windows (one window).
const longShift = 3

// evidenceReads is how many reads at the threshold's rate make a count the
// window can be trusted with: the reads stage's W/2 at countsAtHotRate.
const evidenceReads = countsAtHotRate / 2

// quietRatio and evidenceZ: a key judged on the long view must be
// evidenceZ standard deviations above what a key at quietRatio × its
// threshold would read (the edge below which no key may be reported).
const quietRatio, evidenceZ = 0.8, 5.0

// longView is a thin key's count (bytes, or reads) and reads seen over the
// long view: a slot's, or a hot entry's for its cold verdict.
type longView struct{ b, r window }

// thin reports whether a key of threshold thr is read too seldom for the
// window: its reads at the threshold's rate reach evidenceReads only after
// more than W/2. lv nil (no long view kept): never.
func (w *windowed) thin(lv *longView, thr float64) bool {
	if lv == nil {
		return false
	}
	if lv.r.sum == 0 {
		return true
	}
	return w.d.thinAt(thr, float64(lv.b.sum)/float64(lv.r.sum))
}

// thinAt is thin for a key of threshold thr whose replies are size bytes.
func (d *Detector) thinAt(thr, size float64) bool {
	return !(thr > 0) || evidenceReads*size/thr*1e9 > float64(d.win/2)
}

// bytesCold reports whether hot entry e's reply bytes show it below the
// cold line: its window's rate, and, when it is read too seldom for the
// window (thin), the evidence of its long view (coldOnEvidence). Without
// it, a key at 1.2× of its bytes threshold read 96 times a window was
// published cold once in 25 s when its window's count dipped
// (bytes-band-0.8x-1.2x), and went hot again 0.7 s later.
func (d *Detector) bytesCold(e *hotEntry) bool {
	line := d.cfg.ColdRatio * e.bthr
	if d.rate(&e.bwin, e.bsince, d.win/2) >= line {
		return false
	}
	if e.bsize <= 0 || !d.thinAt(e.bthr, e.bsize) {
		return true // the window holds the evidence, or nothing to weigh
	}
	return d.coldOnEvidence(&e.blong.b, &e.blong.r, e.lsince, e.bthr, e.bsize, line)
}

// readsCold is bytesCold for reads: a key whose threshold is too low for
// the window (a rule's, below --hot-qps) turns cold on its reads only on
// the evidence of its long view.
func (d *Detector) readsCold(e *hotEntry) bool {
	line := d.cfg.ColdRatio * e.thr
	if d.rate(&e.win, e.since, d.win/2) >= line {
		return false
	}
	if !e.rthin {
		return true
	}
	return d.coldOnEvidence(&e.rlong, &e.rlong, e.rlsince, e.thr, 1, line)
}

// coldOnEvidence reports whether a long view, its count cnt (bytes, or
// reads) and its reads seen rd since since, shows a key of threshold thr
// (per second, of units of size per read) below line: some recent span of it (the last k coarse sub-windows, k =
// 1..numSub) holds so few reads that a key at its threshold would read as
// few with a probability below coldEvidence (Poisson), at a rate below the
// line; or the whole view, once it spans 4 W, a rate below the line (a cold
// verdict is the cautious side: it only stops serving a key locally). A key
// that stops is cold once the silence since the start of a coarse
// sub-window is worth 15 reads at its threshold (75 ms at 200 reads a
// second; 1.5 s at 10).
func (d *Detector) coldOnEvidence(cnt, rd *window, since int64, thr, size, line float64) bool {
	if since == 0 {
		return false
	}
	coarse := d.sub << longShift
	var r, b float64
	span := int64(0)
	for k := range int64(numSub) {
		ep := rd.epoch - k
		j := ep & (numSub - 1)
		r += float64(rd.ring[j])
		b += float64(cnt.ring[j])
		span = d.now - max(ep*coarse, since)
		if span <= 0 {
			return false
		}
		at := thr * float64(span) / 1e9 / size // reads at the threshold
		if b*1e9/float64(span) < line && poissonAtMost(r, at) < coldEvidence {
			return true
		}
		if ep*coarse <= since {
			break
		}
	}
	return span >= d.win<<longShift/2 && b*1e9/float64(span) < line
}

// coldEvidence: how unlikely a hot key's reads must be at its threshold for
// a thin key to be cold on them (5 standard deviations, as evidenceZ).
const coldEvidence = 3e-7

// poissonAtMost is P(X ≤ n) for X Poisson with mean mu (n rounded down):
// summed term by term up to a mean of 100 (at most 100 terms), a normal
// approximation above, whose lower tail is heavier than the Poisson's (it
// can only make a cold verdict wait).
func poissonAtMost(n, mu float64) float64 {
	n = math.Floor(n)
	switch {
	case n >= mu:
		return 1
	case mu > 100:
		return 0.5 * math.Erfc((mu-n-0.5)/math.Sqrt(2*mu))
	}
	term := math.Exp(-mu)
	p := term
	for i := 1.0; i <= n; i++ {
		term *= mu / i
		p += term
	}
	return p
}

// confirms reports whether the long view shows a key of threshold thr,
// counted since since, hot (see above).
func (lv *longView) confirms(d *Detector, since int64, thr float64) bool {
	start := max(since, (lv.b.epoch-numSub+1)<<longShift*d.sub)
	span := max(d.now-start, d.win/2)
	b, r := float64(lv.b.sum), float64(lv.r.sum)
	if b*1e9 < thr*float64(span) || r == 0 {
		return false
	}
	if span >= d.win<<longShift-d.win {
		return true // the whole view: its rate alone decides
	}
	quiet := quietRatio * thr * float64(span) / 1e9 * r / b // reads, at its mean size
	return r >= quiet+evidenceZ*math.Sqrt(quiet)
}

// ownReads is the weighted reads behind slot s's window of bytes, at the
// long view's mean value size (s.reads counts them since the key entered
// its slot, which may be longer ago than the window reaches).
func (lv *longView) ownReads(s *slot) uint32 {
	if lv.b.sum == 0 {
		return s.reads
	}
	n := float64(s.own.sum) * float64(lv.r.sum) / float64(lv.b.sum)
	return min(s.reads, uint32(min(math.Ceil(n), math.MaxUint32)))
}

// promoteFrom promotes the key of slot s, confirmed by stage w, taking the
// other stage's count of it along.
func (d *Detector) promoteFrom(w *windowed, h uint64, f *decode.Flow, ns int32, k decode.Key, s *slot) {
	thr, bthr, _ := d.rules.lookupBoth(f.Proto, k.Bytes)
	if d.bdet == nil {
		bthr = 0
	}
	reads, bytes := s, (*slot)(nil)
	other := d.bdet
	if w.bytes {
		reads, bytes, other = nil, s, d.def
	}
	o, ok := other.take(h)
	if ok {
		if w.bytes {
			reads = &o
		} else {
			bytes = &o
		}
	}
	b := &bytesInit{thr: bthr, since: d.now}
	if bytes != nil {
		b.win, b.since, b.reads = &bytes.own, bytes.since, bytes.reads
		b.bps = d.rate(&bytes.own, bytes.since, d.sub/8)
	}
	var rw *window
	since, located, qps := d.now, s.since, 0.0
	// The rate's span is floored at sub/8 (a burst in one segment has no
	// span at all): a key that got here faster is reported at a lower
	// bound, and marked so.
	low := false
	if reads != nil {
		rw, since = &reads.own, reads.since
		qps = d.rate(&reads.own, reads.since, d.sub/8)
		low = d.span(reads.since) < d.sub/8
	} else if bytes != nil {
		// The reads stage was not counting this key (too few reads to
		// locate its bucket): its answered reads, counted with its bytes,
		// give the rate and seed the entry's read window.
		rw = &window{epoch: d.epoch}
		rw.add(d.epoch, bytes.reads)
		since = bytes.since
		qps = d.rate(rw, since, d.sub/8)
		low = d.span(since) < d.sub/8
	}
	prefix := s.flags&slotPrefix != 0 || (reads != nil && reads.flags&slotPrefix != 0)
	d.promote(h, f, ns, k, thr, qps, low && qps > 0, prefix, located, rw, since, b)
}

func (e *hotEntry) bytesPS(typ string) float64 {
	if typ == event.TypeInvalidate || (e.bthr == 0 && e.bps == 0) {
		return 0
	}
	return math.Round(e.bps)
}

// valueBytes is the mean reply size: reply bytes per weighted read answered.
// Both counts come from the same replies, so a reply still in flight when a
// window closes (its read counted, its bytes not yet) does not skew it; the
// two rates are only a fallback when no answered read was counted.
func (e *hotEntry) valueBytes(typ string, qps float64) float64 {
	if typ == event.TypeInvalidate || e.bps == 0 {
		return 0
	}
	if e.bn.sum > 0 {
		return math.Round(float64(e.bwin.sum) / float64(e.bn.sum))
	}
	if qps <= 0 {
		return 0
	}
	return math.Round(e.bps / qps)
}

// reason names the thresholds the key is at; absent when bytes are not
// being detected (events stay as they were).
func (e *hotEntry) reason(typ string, qps float64) string {
	if typ != event.TypeHot || e.bthr == 0 {
		return ""
	}
	q, b := qps >= e.thr, e.bps >= e.bthr
	switch {
	case q && b:
		return event.ReasonQPSBytes
	case b:
		return event.ReasonBytes
	case q:
		return event.ReasonQPS
	}
	// Still hot by hysteresis: name the threshold it is closer to.
	if e.bps/e.bthr > qps/e.thr {
		return event.ReasonBytes
	}
	return event.ReasonQPS
}
