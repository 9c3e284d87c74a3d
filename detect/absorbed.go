package detect

import (
	"encoding/binary"
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
// Pairing ties a report to a client that really reads the key, but not to
// the number it claims: 20 GET+ECHO pairs a second from one plain client
// kept a key hot at the cap with no demand at all. So what one client (one
// address, all its connections) may claim is bounded by what the daemon
// sees of it:
//
//   - Its window is at most the time since its previous report for the key
//     (the first: one sub-window), so it cannot claim a long window on
//     every report.
//   - Its credit is at most AbsorbedClientCap × the threshold per second,
//     up to one window's worth at once (Stats.AbsorbedCapped beyond it).
//   - It cannot hold the key hot alone: when the key would be cold without
//     the client's reports (wire reads and every other client's reports
//     below the cold threshold) for longer than AbsorbedHold, that client's
//     reports for the key stop counting (Stats.AbsorbedHeld) and the key
//     cools within a window. If the demand is real, the client's reads come
//     back to the server once its shims stop caching, and the key is
//     detected hot again on the wire: one cold/hot cycle per AbsorbedHold.
//
// An event says when a bound cut the reports in the last window
// ("capped":true): its qps is then a lower bound.
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
	r := e.rep.get(clientID(f), d.now)
	if r.held {
		d.st.AbsorbedHeld++
		return
	}
	// The window the daemon saw: since this client's previous report.
	seen := d.sub
	if r.last != 0 {
		seen = max(d.now-r.last, 1e6)
	}
	windowMS := min(a.WindowMS, uint64(seen/1e6))
	// A report travels on its connection, so flow sampling saw it with
	// the same odds as the reads and is scaled alike.
	hits := d.scaleHits(a.Hits)
	// The client's credit is a token bucket: AbsorbedClientCap × the
	// threshold per second, up to one window's worth at once (several
	// processes of one host report out of step).
	rate := d.cfg.AbsorbedClientCap * e.thr
	burst := rate * float64(d.win) / 1e9
	if r.last == 0 {
		// A new client starts with a sub-window's worth, not a window's:
		// a full bucket at once would double its rate for a window.
		r.tokens = rate * float64(d.sub) / 1e9
	} else {
		r.tokens = min(burst, r.tokens+rate*float64(d.now-r.last)/1e9)
	}
	r.last = d.now
	clientCapped := false
	if float64(hits) > r.tokens {
		hits, clientCapped = uint64(r.tokens), true
	}
	credited, capped := d.absorb(e, hits, windowMS)
	r.tokens -= float64(credited)
	r.win.advance(d.epoch)
	r.win.add(d.epoch, uint32(min(credited, math.MaxUint32)))
	capped = capped || clientCapped
	d.st.AbsorbedReports++
	d.st.AbsorbedHits += credited
	if capped {
		d.st.AbsorbedCapped++
		e.rep.cappedAt = d.now
	}
}

// maxReporters bounds the clients tracked per hot key. With more, the one
// that reported least recently makes room (and loses its history).
const maxReporters = 8

// absReporters tracks the clients reporting for one hot key.
type absReporters struct {
	r        [maxReporters]reporter
	cappedAt int64  // last time a report was cut to a bound (ns)
	soloID   uint64 // the client holding the key hot alone, since soloAt
	soloAt   int64
}

// reporter is one client's reports for a key.
type reporter struct {
	id     uint64
	last   int64   // time of its last report (ns)
	tokens float64 // hits it may still be credited (bucket)
	win    window  // hits credited to it
	held   bool    // it held the key hot alone too long: its reports are refused
}

// clientID identifies a client by address: every connection of one host
// (or pod) is one client, so opening more connections buys no more credit.
func clientID(f *decode.Flow) uint64 {
	a := f.Client.Addr().As16()
	return (binary.LittleEndian.Uint64(a[:8]) ^ binary.LittleEndian.Uint64(a[8:])*0x9e3779b97f4a7c15) | 1
}

// get returns the client's record, making room for a new one.
func (rs *absReporters) get(id uint64, now int64) *reporter {
	v := 0
	for i := range rs.r {
		if rs.r[i].id == id {
			return &rs.r[i]
		}
		if rs.r[i].id == 0 || rs.r[v].id != 0 && rs.r[i].last < rs.r[v].last {
			v = i
		}
	}
	rs.r[v] = reporter{id: id}
	return &rs.r[v]
}

// judgeReporters runs at each scan: when one client's reports alone keep
// the key over its cold threshold for longer than AbsorbedHold, that
// client is held (its reports for the key refused from then on).
func (d *Detector) judgeReporters(e *hotEntry) {
	var top *reporter
	var topRate float64
	for i := range e.rep.r {
		r := &e.rep.r[i]
		if r.id == 0 || r.held {
			continue
		}
		r.win.advance(d.epoch)
		if rate := d.rate(&r.win, e.since, d.win/2); rate > topRate {
			top, topRate = r, rate
		}
	}
	if top == nil || e.qps-topRate >= d.cfg.ColdRatio*e.thr {
		e.rep.soloID, e.rep.soloAt = 0, 0
		return
	}
	if e.rep.soloID != top.id {
		e.rep.soloID, e.rep.soloAt = top.id, d.now
		return
	}
	if d.now-e.rep.soloAt >= int64(d.cfg.AbsorbedHold) {
		top.held = true
		d.st.AbsorbedHeldClients++
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
		if e.rthin {
			e.rlong.add(ep>>longShift, uint32(n))
		}
		credited += n
	}
	return credited, capped
}
