package detect

import (
	"math"

	"github.com/hotsniff/hotsniff/decode"
)

// Absorbed demand. Once client shims serve a hot key from memory, the server
// (and so the capture) sees only their refresh reads, a few per second per
// process: measured on the wire alone, the key would turn cold, every shim
// would drop it, the full load would come back and the key would turn hot
// again, about once a second. So a key's rate is its demand: the reads that
// reach the server plus the reads shims served locally and reported. A shim
// reports in-band (decode.Absorbed): an ECHO pipelined right after its
// refresh read, so the report reaches exactly the daemon that watches that
// server, and the decoder vouches for it only when it follows a read of the
// same key on the same connection.
//
// What one report can add is bounded:
//
//   - Only a key that is hot now takes reports. Reports never make a key
//     hot: it must have reached its threshold on wire reads alone, and a
//     report for any other key is counted (Stats.AbsorbedNotHot) and dropped.
//   - Its window is taken as at most the detector's window W.
//   - The hits credited to one key are at most AbsorbedCap × its threshold
//     per second, enforced per sub-window, however many reports arrive: a
//     report beyond it is credited up to the cap (Stats.AbsorbedCapped).
//   - The refresh read the report rides on is counted as the wire read it
//     is; the report's hits are only reads the shim did not send. Nothing
//     is counted twice.
//
// The hits are spread evenly over the sub-windows the report's window
// covers (clipped to the window ring and to the entry's measurement), so the
// measured demand is as smooth as the reads were, not a step per report.

// Absorbed takes an absorbed-demand report (decode.Sink).
func (d *Detector) Absorbed(f *decode.Flow, a *decode.Absorbed) {
	switch a.Reject {
	case "":
	case decode.AbsorbedUnpaired:
		d.st.AbsorbedUnpaired++
		return
	default:
		d.st.AbsorbedMalformed++
		return
	}
	// A late report still counts: its hits are spread back from the clock.
	d.clock(f.TS)
	h := d.identity(f, a.NS, a.Key)
	var e *hotEntry
	if d.gate[h>>(64-gateBits)] != 0 {
		e = d.hot.find(h, f, a.NS, a.Key)
	}
	if e == nil {
		d.st.AbsorbedNotHot++
		return
	}
	// A report travels on its connection, so flow sampling saw it with
	// the same odds as the reads and is scaled alike.
	credited, capped := d.absorb(e, d.scaleHits(a.Hits), a.WindowMS)
	d.st.AbsorbedReports++
	d.st.AbsorbedHits += credited
	if capped {
		d.st.AbsorbedCapped++
	}
}

// absorb credits up to hits local reads, made over the last windowMS, to a
// hot entry's demand and returns how many it credited and whether the cap
// cut them.
func (d *Detector) absorb(e *hotEntry, hits, windowMS uint64) (uint64, bool) {
	span := int64(min(max(windowMS, 1), uint64(d.win/1e6))) * 1e6
	capped := false
	// The per-report bound: AbsorbedCap × threshold over the window.
	if lim := d.cfg.AbsorbedCap * e.thr * float64(span) / 1e9; float64(hits) > lim {
		hits, capped = uint64(lim), true
	}
	// The per-key bound, whatever the number of reports.
	perSub := uint64(max(math.Min(d.cfg.AbsorbedCap*e.thr*float64(d.sub)/1e9, math.MaxUint32), 1))
	e.win.advance(d.epoch)
	e.abs.advance(d.epoch)
	start := max(d.now-span, e.since, (d.epoch-numSub+1)*d.sub)
	total := d.now - start
	var credited, given uint64
	for ep := floorDiv(start, d.sub); ep <= d.epoch; ep++ {
		var n uint64
		if ep == d.epoch || total <= 0 {
			n = hits - given
		} else {
			lo, hi := max(start, ep*d.sub), min(d.now, (ep+1)*d.sub)
			n = uint64(float64(hits) * float64(hi-lo) / float64(total))
			n = min(n, hits-given)
		}
		given += n
		room := perSub - min(uint64(e.abs.ring[ep&(numSub-1)]), perSub)
		if n > room {
			n, capped = room, true
		}
		if n == 0 {
			continue
		}
		e.abs.add(ep, uint32(n))
		e.win.add(ep, uint32(n))
		credited += n
	}
	return credited, capped
}
