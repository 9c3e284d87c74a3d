package detect

import (
	"net/netip"
	"strconv"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/event"
)

// Adoption. A restarted daemon starts with empty windows: measured on the
// wire alone, a key the client shims serve locally (a few refresh reads a
// second) is not hot, its absorbed reports are refused as not hot, and once
// the shims' hot entries lapse the key's whole demand goes back to its
// shard until it is detected again. So the new daemon adopts the hot set its
// predecessor published for the same node: each adopted key is hot at once
// (it takes absorbed reports, is refreshed and listed in HotSet) and cannot
// turn cold until it has been measured for a full window from the adoption;
// after that it stays hot or goes cold on that evidence alone, like any
// detected key.

// Adopt makes the given hot events hot in the detector with a fresh
// measurement starting at now (Unix ns), and emits a hot event for each so
// subscribers' entries are refreshed. Keys already hot, ignored by the
// rules, of an unknown protocol or malformed, or beyond MaxHot, are skipped;
// it returns how many were adopted. Like Key and Tick it runs on the
// observing goroutine.
func (d *Detector) Adopt(evs []*event.Event, now int64) int {
	d.clock(now)
	n := 0
	for _, ev := range evs {
		if ev == nil || ev.Type != event.TypeHot || d.hot.full() {
			continue
		}
		p, ok := decode.ParseProto(ev.Proto)
		if !ok {
			continue
		}
		srv, err := netip.ParseAddrPort(ev.Server)
		if err != nil {
			continue
		}
		ns, ok := parseNS(ev.NS)
		if !ok {
			continue
		}
		thr, bthr, ignored := d.rules.lookupBoth(p, ev.Key)
		if ignored || thr <= 0 {
			continue
		}
		f := decode.Flow{Server: srv, Proto: p}
		h := d.identity(&f, ns, ev.Key)
		if d.gate[h>>(64-gateBits)] != 0 && d.hot.find(h, &f, ns, ev.Key) != nil {
			continue
		}
		e := d.hot.insert(h, &f, ns, ev.Key)
		e.thr, e.prefix = thr, ev.Prefix
		e.qps, e.adoptQPS = ev.QPS, ev.QPS
		e.win = window{epoch: d.epoch}
		e.abs = window{epoch: d.epoch}
		e.since, e.lastSeen, e.lastEmit = d.now, d.now, d.now
		e.expires = d.now + d.lifetime
		e.adoptUntil = d.now + d.win
		e.resetWrites(d.now, d.epoch)
		if e.rthin = d.thinAt(thr, 1); e.rthin {
			e.rlsince = d.now
		}
		if d.bdet != nil && bthr > 0 {
			e.bthr, e.bsince, e.lsince = bthr, d.now, d.now
			e.bwin = window{epoch: d.epoch}
			e.bn = window{epoch: d.epoch}
		}
		e.gate = uint32(h >> (64 - gateBits))
		d.gate[e.gate]++
		d.st.Adopted++
		d.dirty = true
		d.emit(e, event.TypeHot, e.qps)
		n++
	}
	d.publish(true)
	return n
}

// parseNS is the inverse of decode.NSString: "" is no namespace.
func parseNS(s string) (int32, bool) {
	if s == "" {
		return decode.NoNS, true
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 {
		return 0, false
	}
	return int32(n), true
}
