package detect

import (
	"time"

	"github.com/hotsniff/hotsniff/event"
)

// writes is a hot key's write side: its write rate, measured from when it
// became hot, and the cacheable verdict judged from it.
//
// The rule (docs/detection.md): a shim's local copy lives at most LocalTTL.
// With writes arriving at rate w, the copy is dropped by a write before it
// expires with probability 1-exp(-w·LocalTTL), and each such write costs
// one invalidate delivered to every subscriber. At UncacheableWrites
// (default 1) writes per LocalTTL, most copies (63 %) die by invalidation,
// each serving a fraction of what it would, so the key is published
// "cacheable":false: shims stop caching it and its writes stop producing
// invalidates. Below half the rate it becomes cacheable again (hysteresis
// keeps a key near the line from flapping).
type writes struct {
	win         window
	since       int64   // start of the write measurement (ns): when the key became hot
	qps         float64 // last measured write rate, for events
	uncacheable bool
	// flips holds the times of the last maxVerdictFlips verdict changes,
	// oldest first (0: none).
	flips [maxVerdictFlips]int64
}

// maxVerdictFlips bounds the changes of a key's cacheable verdict within
// verdictFlipWindow. Every change is a hot event to every subscriber, and
// every turn to cacheable:false makes the shims drop the key: a writer
// timing its bursts against the verdict must not make it flap. Past the
// bound the verdict in force stays until the oldest change is
// verdictFlipWindow old (Stats.VerdictsHeld); either verdict is safe
// meanwhile (cacheable: each write still sends an invalidate; uncacheable:
// reads go to the server). Subscribers hold a key cacheable once its
// verdict changed 4 times in 10 s (a forged publisher's flapping): 3 per
// 10 s keeps the daemon's own changes below that, so they always apply.
const (
	maxVerdictFlips   = 3
	verdictFlipWindow = int64(10 * time.Second)
)

// mayFlip reports whether the verdict may change now, and counts a change
// held back.
func (d *Detector) mayFlip(e *hotEntry) bool {
	if old := e.wr.flips[0]; old != 0 && d.now-old < verdictFlipWindow {
		d.st.VerdictsHeld++
		return false
	}
	return true
}

// flipped notes a verdict change at now.
func (d *Detector) flipped(e *hotEntry) {
	copy(e.wr.flips[:], e.wr.flips[1:])
	e.wr.flips[len(e.wr.flips)-1] = d.now
}

// uncacheableAt is the write rate (per second) at which a key is judged
// uncacheable, or 0 when the verdict is off.
func (d *Detector) uncacheableAt() float64 {
	if d.cfg.UncacheableWrites <= 0 {
		return 0
	}
	return d.cfg.UncacheableWrites / d.cfg.LocalTTL.Seconds()
}

// countWrite counts a write to hot key e and reports whether it needs no
// invalidate: the key is (or has just been made) uncacheable, so no shim
// holds a copy of it (the hot event carrying the verdict drops them).
func (d *Detector) countWrite(e *hotEntry) bool {
	e.wr.win.add(d.epoch, 1)
	if e.wr.uncacheable {
		return true
	}
	at := d.uncacheableAt()
	// The conservative rate (span at least W/2) only under-reads a young
	// measurement: a short burst on a quiet key does not flip it.
	if at == 0 || d.rate(&e.wr.win, e.wr.since, d.win/2) < at || !d.mayFlip(e) {
		return false
	}
	d.flipped(e)
	e.wr.uncacheable = true
	e.pending = false // the verdict's hot event drops the copies instead
	d.st.Verdicts++
	e.wr.qps = d.rate(&e.wr.win, e.wr.since, 2*d.sub)
	d.verdict(e)
	return true
}

// judgeWrites runs from scan, once per sub-window: it updates the write
// rate and turns an uncacheable key cacheable again when writes dropped
// below half the line.
func (d *Detector) judgeWrites(e *hotEntry) {
	e.wr.win.advance(d.epoch)
	e.wr.qps = d.rate(&e.wr.win, e.wr.since, 2*d.sub)
	if !e.wr.uncacheable {
		return
	}
	at := d.uncacheableAt()
	if at > 0 && d.rate(&e.wr.win, e.wr.since, d.win/2) >= at/2 || !d.mayFlip(e) {
		return
	}
	d.flipped(e)
	e.wr.uncacheable = false
	d.st.Verdicts++
	d.verdict(e)
}

// verdict announces a changed cacheable verdict at once, as a hot event
// (a refresh carrying the new verdict), rather than at the next refresh.
func (d *Detector) verdict(e *hotEntry) {
	e.lastEmit = d.now
	d.dirty = true
	d.emit(e, event.TypeHot, e.qps)
}

// resetWrites restarts e's write measurement at ts (epoch ep), keeping the
// verdict: it is re-judged from the new measurement.
func (e *hotEntry) resetWrites(ts, ep int64) {
	e.wr = writes{since: ts, uncacheable: e.wr.uncacheable, flips: e.wr.flips, win: window{epoch: ep}}
}

// flushPending sends the merged invalidates still waiting for their gap:
// the end of a replay must not leave a last write uninvalidated.
func (d *Detector) flushPending() {
	for i := range d.hot.e {
		if e := &d.hot.e[i]; e.pending {
			d.emitInvalidate(e)
		}
	}
}
