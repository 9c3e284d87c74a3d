// Package detect finds hot keys in the stream of decoded reads and emits
// hot, cold and invalidate events (docs/events.md).
//
// Two detectors share the hot list and event logic:
//
//   - "default" (windowed.go): per-bucket weighted counts over a sliding
//     window of packet time; any bucket whose rate reaches a quarter of the
//     lowest threshold is located with a small per-bucket Space-Saving
//     table, and a key is confirmed hot only on its own measured rate. It misses no key at
//     or above the threshold, finds any number of hot keys at once, and never
//     alerts on uniform traffic. See docs/detection.md.
//   - "tair" (tair.go): Tair's server-side pipeline (1024 buckets, σ > N×mean
//     after sample_max requests, reap_max located requests, one key per
//     round, LRU hot list with a lifetime), kept for comparison.
//
// The packet time of each observation (Flow.TS) is the only clock, so a
// replay is deterministic. Key, Request, Error and Tick must be called from
// one goroutine; HotSet and Stats may be called from any.
package detect

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/event"
)

// Emitter receives events; the publisher implements it. Emit must not block:
// it is called from the capture loop. The event is the receiver's to keep.
type Emitter interface {
	Emit(e *event.Event)
}

// Stats are cumulative counters (and the current hot count) for metrics.
type Stats struct {
	Observations   uint64 // reads seen
	Writes         uint64 // writes seen
	Rounds         uint64 // default: sub-windows elapsed; tair: sampling rounds
	Located        uint64 // default: keys entered in a located slot; tair: rounds that located a bucket
	Hot            uint64 // keys that became hot
	Refreshes      uint64 // hot events for keys still hot
	Cold           uint64 // keys that turned cold (including evictions)
	Evictions      uint64 // hot keys evicted because the list was full (MaxHot)
	Invalidates    uint64 // invalidate events sent
	InvalMerged    uint64 // writes merged into an invalidate sent less than InvalidateGap before
	Verdicts       uint64 // cacheable verdict changes announced (writes.go)
	Ignored        uint64 // keys that reached a threshold but match the ignore list
	Late           uint64 // reads dropped: more than a sub-window older than the clock
	ClockResets    uint64 // clock restarted after a jump of more than 10s
	HotKeys        int    // current size of the hot list
	LatencyCount   uint64 // promotions measured for detection latency
	LatencySumNs   uint64 // sum of (promotion time - time the key was located), packet time
	LatencyMaxNs   uint64 // largest such latency
	LastPacketTime int64  // newest packet time seen (Unix ns)
	ReplyBytes     uint64 // reply bytes attributed to read keys

	// Absorbed-demand reports (absorbed.go): credited, the local reads they
	// added, and those not credited by reason. Capped reports are credited
	// in part and counted in both.
	AbsorbedReports   uint64
	AbsorbedHits      uint64
	AbsorbedMalformed uint64 // not a well-formed report
	AbsorbedUnpaired  uint64 // not right after a read of its key on its connection
	AbsorbedNotHot    uint64 // for a key that is not hot
	AbsorbedCapped    uint64 // cut to the per-key or per-client bound
	AbsorbedHeld      uint64 // from a client that alone held the key hot past AbsorbedHold
	// VerdictsHeld counts cacheable-verdict changes held back: the key's
	// verdict changed maxVerdictFlips times within the last window.
	VerdictsHeld uint64
	// AbsorbedHeldClients counts the clients held so (per key).
	AbsorbedHeldClients uint64

	// Incomplete evidence (incomplete.go): spans the capture reported as
	// missed, and cold verdicts held because the window held such a span.
	IncompleteSpans uint64
	ColdHeld        uint64
	// ColdHeldKernel counts, of ColdHeld, the verdicts held because the
	// kernel's count of the key's bucket says its demand may still be
	// above the cold line (kernel.go).
	ColdHeldKernel uint64
	// IncompleteNs is the packet time covered by those spans (overlaps
	// counted once), in ns: how long the counts were incomplete.
	IncompleteNs uint64
	// ColdAwaiting counts cold verdicts put off until the capture had
	// confirmed its evidence (Confirm): judged again at the next Confirm.
	ColdAwaiting uint64
	// KernelSubWindows counts the kernel sub-windows of bucket counts taken
	// (kernel.go).
	KernelSubWindows uint64

	// Adopted counts hot keys taken over from the previous daemon (adopt.go).
	Adopted uint64
}

// Detector is a decode.Sink that detects hot keys.
type Detector struct {
	cfg   Config
	out   Emitter
	rules ruleSet

	now      int64 // newest packet time (ns); older packets are counted now
	epoch    int64 // now / sub
	epochEnd int64 // start of the next sub-window (ns)

	// The identity seed of the last (server, proto, ns): consecutive reads
	// nearly always share it, so the hot path hashes only the key.
	seedServer netip.AddrPort
	seedProto  decode.Proto
	seedNS     int32
	seed       uint64

	sub int64 // sub-window length (ns)
	win int64 // window length = numSub × sub (ns)

	hot  hotList
	gate []uint32 // hot entries per gate index: most reads skip the hot lookup

	// samp is the capture's flow sampling: each read seen stands for
	// samp.scale reads (sampling.go).
	samp sampling

	def  *windowed // default detector, or nil
	tair *tairDet  // tair detector, or nil
	bdet *windowed // reply-bytes detector (HotBytes set, default detector), or nil

	st Stats

	pubMu    sync.Mutex
	pubStats Stats
	// latencies holds detection latencies since the last DrainLatencies,
	// for the metrics histogram; bounded, promotions are rare.
	latencies []time.Duration
	pubHot    []event.Event
	lastPub   int64
	dirty     bool // hot set changed since the last publication
	ttlMs     int64
	refresh   int64
	invGap    int64
	lifetime  int64
	// holdUntil: until this packet time the window holds a span of missed
	// requests, and hot keys are not turned cold on their rate.
	holdUntil int64
	incEnd    int64 // end of the latest span reported, for IncompleteNs
	// confirmed: the capture has checked its loss counters for packet
	// time up to here (Confirm); confirming once it has done so once.
	confirmed  int64
	confirming bool
}

const (
	gateBits = 12
	// clockReset: a packet this much older than the clock means the clock
	// jumped (a bogus future timestamp, or files replayed out of order):
	// start over from it rather than drop everything that follows.
	clockReset = int64(10 * time.Second)
	// publishEvery bounds how stale the qps values of HotSet may get.
	publishEvery = int64(250 * time.Millisecond)
)

// New returns a detector emitting to out (nil: events are dropped).
func New(cfg Config, out Emitter) (*Detector, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("configure detector: %w", err)
	}
	if out == nil {
		out = discard{}
	}
	d := &Detector{
		cfg:      c,
		out:      out,
		rules:    newRuleSet(c),
		sub:      int64(c.Window) / numSub,
		hot:      newHotList(c.MaxHot),
		gate:     make([]uint32, 1<<gateBits),
		ttlMs:    c.TTL.Milliseconds(),
		refresh:  int64(c.RefreshEvery),
		invGap:   int64(c.InvalidateGap),
		lifetime: int64(c.TTL),
	}
	d.win = d.sub * numSub
	d.samp.init()
	d.seed = identitySeed(d.seedServer, d.seedProto, d.seedNS)
	if c.Detector == DetectorTair {
		d.tair = newTair(d, c.Tair)
	} else {
		d.def = newWindowed(d, c)
		if m := d.rules.minBytes(); m > 0 {
			d.bdet = newWindowedFor(d, c, m, true)
		}
	}
	return d, nil
}

type discard struct{}

func (discard) Emit(*event.Event) {}

// Config returns the configuration in effect, defaults filled in.
func (d *Detector) Config() Config { return d.cfg }

// Request implements decode.Sink; detection works on keys only.
func (d *Detector) Request(*decode.Flow, *decode.Request) {}

// Error implements decode.Sink; decode errors are counted elsewhere.
func (d *Detector) Error(*decode.Flow, string) {}

// Key implements decode.Sink: one key occurrence. It allocates nothing
// unless an event is emitted.
func (d *Detector) Key(f *decode.Flow, r *decode.Request, k decode.Key) {
	late := d.clock(f.TS)
	h := d.identity(f, r.NS, k.Bytes)
	if r.Write {
		d.st.Writes++
		if d.gate[h>>(64-gateBits)] != 0 {
			d.write(h, f, r.NS, k.Bytes)
		}
		return
	}
	if late {
		// A read more than a sub-window late cannot be placed in the
		// windows; counting it now would inflate the current rate. Its
		// sub-window's counts are then short of it: unknown, not cold
		// (a daemon starved of CPU delivered thousands while catching
		// up).
		d.st.Late++
		d.missed(f.TS)
		return
	}
	d.st.Observations++
	w := k.Weight
	if w == 0 {
		w = 1
	}
	raw := w
	if d.samp.guard != 0 {
		w = d.scaleWeight(w)
	}
	if d.gate[h>>(64-gateBits)] != 0 {
		if e := d.hot.find(h, f, r.NS, k.Bytes); e != nil {
			e.win.add(d.epoch, w)
			if e.rthin {
				e.rlong.add(d.epoch>>longShift, w)
			}
			e.lastSeen = d.now
			e.prefix = e.prefix || k.Prefix
			if e.pending && d.now-e.lastInval >= d.invGap {
				d.emitInvalidate(e)
			}
			if d.tair == nil {
				// Its rate is measured by the entry now; keeping it out of
				// the bucket lets the bucket's other keys be judged alone.
				return
			}
		}
	}
	if d.def != nil {
		if f.KernelCounted && d.def.kern != nil {
			d.otherRead(h, raw)
		}
		d.def.counted = f.KernelCounted
		d.def.observe(h, f, r.NS, k, w)
	} else {
		d.tair.observe(h, f, r.NS, k, w)
	}
}

// clock moves the clock to ts and reports whether ts is too late to count.
func (d *Detector) clock(ts int64) (late bool) {
	if ts > d.now {
		if ts < d.epochEnd {
			d.now = ts // common case: same sub-window, no division
		} else {
			d.setClock(ts)
		}
	} else if ts < d.now-d.sub {
		if ts < d.now-clockReset {
			d.resetClock(ts)
		} else {
			return true
		}
	}
	return false
}

// identity is the identity hash of a key at f's server in namespace ns.
func (d *Detector) identity(f *decode.Flow, ns int32, key []byte) uint64 {
	if f.Server != d.seedServer || f.Proto != d.seedProto || ns != d.seedNS {
		d.seedServer, d.seedProto, d.seedNS = f.Server, f.Proto, ns
		d.seed = identitySeed(f.Server, f.Proto, ns)
	}
	h := xxhash.Sum64(key) ^ d.seed
	if h == 0 {
		h = 1 // 0 marks an empty slot
	}
	return h
}

// Tick tells the detector that time has passed without traffic (the live
// daemon calls it with wall time): hot keys expire, turn cold or refresh,
// and HotSet and Stats are brought up to date.
func (d *Detector) Tick(now int64) {
	if now <= d.now || !d.setClock(now) {
		d.scan() // at least once per Tick: merged invalidates must not wait
	}
	d.publish(true)
}

// setClock moves the clock forward; at every sub-window boundary it scans
// the hot list. Packets older than the clock are counted at the clock: a
// few reordered packets must not rewind windows.
func (d *Detector) setClock(ts int64) (scanned bool) {
	d.now = ts
	ep := floorDiv(ts, d.sub)
	d.epochEnd = (ep + 1) * d.sub
	if ep == d.epoch {
		return false
	}
	d.epoch = ep
	d.st.LastPacketTime = ts
	if d.def != nil {
		d.st.Rounds++
	}
	d.scan()
	d.publish(false)
	return true
}

// resetClock restarts the clock at ts after a jump: every window is
// cleared; hot keys stay hot and are measured afresh (they cool within a
// window if they are not read).
func (d *Detector) resetClock(ts int64) {
	d.st.ClockResets++
	d.now = ts
	d.epoch = floorDiv(ts, d.sub)
	d.epochEnd = (d.epoch + 1) * d.sub
	for i := range d.hot.e {
		e := &d.hot.e[i]
		e.win = window{epoch: d.epoch}
		e.abs = window{epoch: d.epoch}
		e.other = window{epoch: d.epoch}
		e.rep = absReporters{}
		e.since, e.lastSeen, e.lastEmit, e.lastInval = ts, ts, ts, ts
		e.expires = ts + d.lifetime
		e.resetWrites(ts, d.epoch)
		// The measurement restarts: give it a window before judging it.
		e.win.ring[d.epoch&(numSub-1)] = uint32(min(e.thr*float64(d.win)/1e9, math.MaxUint32))
		e.win.sum = uint64(e.win.ring[d.epoch&(numSub-1)])
	}
	if d.def != nil {
		d.def.reset()
	} else {
		d.tair.reset(ts)
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// scan expires, cools and refreshes hot entries, and sends merged invalidates.
func (d *Detector) scan() {
	for i := 0; i < len(d.hot.e); {
		e := &d.hot.e[i]
		e.win.advance(d.epoch)
		if e.pending && d.now-e.lastInval >= d.invGap {
			d.emitInvalidate(e)
		}
		var cold bool
		e.qps = d.rate(&e.win, e.since, 2*d.sub)
		e.qpsLow = d.span(e.since) < 2*d.sub
		if e.rthin {
			e.rlong.advance(d.epoch >> longShift)
		}
		if e.bthr > 0 || e.bwin.sum > 0 {
			e.bwin.advance(d.epoch)
			e.bn.advance(d.epoch)
			if e.bthr > 0 {
				e.blong.b.advance(d.epoch >> longShift)
				e.blong.r.advance(d.epoch >> longShift)
			}
			e.bps = d.rate(&e.bwin, e.bsince, 2*d.sub)
			if e.bn.sum > 0 {
				e.bsize = float64(e.bwin.sum) / float64(e.bn.sum)
			}
		}
		e.abs.advance(d.epoch)
		e.absQPS = min(d.rate(&e.abs, e.since, 2*d.sub), e.qps)
		d.judgeReporters(e)
		if d.def != nil {
			// The conservative rate (span at least W/2) only under-reads
			// a young entry, which was just measured above its threshold.
			cold = d.now-e.lastSeen >= d.lifetime || d.readsCold(e)
			if cold && e.bthr > 0 && d.now-e.lastSeen < d.lifetime {
				cold = d.bytesCold(e)
			}
			if cold && d.now-e.lastSeen < d.lifetime && d.kernelDemand(e) >= d.cfg.ColdRatio*e.thr {
				// The kernel counted reads user space did not see
				// (kernel.go): no evidence of low demand.
				d.st.ColdHeld++
				d.st.ColdHeldKernel++
				cold = false
			}
			if cold && e.bthr > 0 && d.now-e.lastSeen < d.lifetime && d.kernelByteDemand(e) >= d.cfg.ColdRatio*e.bthr {
				// The same for its reply bytes.
				d.st.ColdHeld++
				d.st.ColdHeldKernel++
				cold = false
			}
			if cold && d.holdCold(e) {
				cold = false
			}
		} else {
			cold = d.now >= e.expires
		}
		if e.adoptUntil != 0 {
			if d.now < e.adoptUntil {
				// Adopted and not yet measured for a full window: no
				// evidence of low demand yet.
				cold = false
				e.qps = max(e.qps, e.adoptQPS)
			} else {
				e.adoptUntil = 0
			}
		}
		if cold {
			d.st.Cold++
			d.emit(e, event.TypeCold, e.qps)
			d.removeHot(i)
			continue
		}
		d.judgeWrites(e)
		if d.def != nil && d.now-e.lastEmit >= d.refresh {
			d.st.Refreshes++
			e.lastEmit = d.now
			d.emit(e, event.TypeHot, e.qps)
		}
		i++
	}
}

// span is how long a window started at since has been measuring, in ns:
// from the later of since and the oldest sub-window still in the ring.
func (d *Detector) span(since int64) int64 {
	start := max(since, (d.epoch-numSub+1)*d.sub)
	return d.now - start
}

// rate is w's weighted rate per second over its span, the span taken as at
// least floor (a short span would overstate the rate of a young count).
func (d *Detector) rate(w *window, since, floor int64) float64 {
	s := max(d.span(since), floor, 1)
	return float64(w.sum) * 1e9 / float64(s)
}

// promote makes a key hot and emits its first hot event.
//
// low says qps is a lower bound: the count was divided by a floor longer
// than the time it was counted in (the key crossed within milliseconds).
func (d *Detector) promote(h uint64, f *decode.Flow, ns int32, k decode.Key, thr, qps float64, low bool, prefix bool, located int64, w *window, since int64, b *bytesInit) *hotEntry {
	if d.hot.full() {
		v := d.hot.lru()
		d.st.Evictions++
		d.st.Cold++
		d.emit(&d.hot.e[v], event.TypeCold, d.hot.e[v].qps)
		d.removeHot(v)
	}
	e := d.hot.insert(h, f, ns, k.Bytes)
	e.thr, e.qps, e.qpsLow, e.prefix = thr, qps, low, prefix
	if w != nil {
		e.win = *w
	}
	e.since = since
	e.lastSeen, e.lastEmit = d.now, d.now
	e.expires = d.now + d.lifetime
	e.resetWrites(d.now, d.epoch)
	if e.rthin = d.thinAt(thr, 1); e.rthin {
		e.rlsince = d.now // the long view counts from here
	}
	if b != nil {
		e.bthr, e.bsince, e.bps = b.thr, b.since, b.bps
		if b.win != nil {
			e.bwin = *b.win
			e.bn = b.win.scaled(b.reads)
		}
		e.lsince = d.now // the long view counts from here
	}
	e.gate = uint32(h >> (64 - gateBits))
	d.gate[e.gate]++
	d.st.Hot++
	lat := uint64(max(d.now-located, 0))
	d.st.LatencyCount++
	d.st.LatencySumNs += lat
	d.st.LatencyMaxNs = max(d.st.LatencyMaxNs, lat)
	if len(d.latencies) < maxLatencies {
		d.latencies = append(d.latencies, time.Duration(lat))
	}
	d.dirty = true
	d.emit(e, event.TypeHot, qps)
	return e
}

func (d *Detector) removeHot(i int) {
	d.gate[d.hot.e[i].gate]--
	d.hot.remove(i)
	d.dirty = true
}

// write handles a write to a key that may be hot: invalidate the clients'
// copies. Identical invalidates closer than InvalidateGap are merged, but the
// first is always sent and a merged one is sent once the gap has passed, so
// the last write is never left uninvalidated.
func (d *Detector) write(h uint64, f *decode.Flow, ns int32, key []byte) {
	e := d.hot.find(h, f, ns, key)
	if e == nil || d.countWrite(e) {
		return
	}
	if e.invalSent && d.now-e.lastInval < d.invGap {
		d.st.InvalMerged++
		e.pending = true
		return
	}
	d.emitInvalidate(e)
}

func (d *Detector) emitInvalidate(e *hotEntry) {
	e.invalSent, e.pending, e.lastInval = true, false, d.now
	d.st.Invalidates++
	d.emit(e, event.TypeInvalidate, 0)
}

func (d *Detector) emit(e *hotEntry, typ string, qps float64) {
	ev := d.toEvent(e, typ, qps)
	d.out.Emit(&ev)
}

func (d *Detector) toEvent(e *hotEntry, typ string, qps float64) event.Event {
	absorbed := e.absQPS
	if typ == event.TypeInvalidate {
		qps, absorbed = 0, 0
	}
	return event.Event{
		V:      event.Version,
		Type:   typ,
		Proto:  e.proto.String(),
		Server: e.server.String(),
		NS:     decode.NSString(e.ns),
		Key:    append([]byte(nil), e.key...),
		Prefix: e.prefix,
		QPS:    math.Round(qps*10) / 10,
		TTLms:  d.ttlMs,
		TS:     time.Unix(0, d.now).UTC(),
		Source: event.SourceDetected,
		// The shims' part of qps (total demand); absent until they report.
		AbsorbedQPS: math.Round(absorbed*10) / 10,
		// Only where the rate shown is the entry's own (not an
		// invalidate's, which carries none).
		QPSLowerBound: e.qpsLow && qps == e.qps && typ != event.TypeInvalidate,
		Sample:        d.sampleRate(),
		WriteQPS:      math.Round(e.wr.qps*10) / 10,
		Uncacheable:   e.wr.uncacheable,
		BytesPS:       e.bytesPS(typ),
		ValueBytes:    e.valueBytes(typ, qps),
		Reason:        e.reason(typ, qps),
		Capped:        typ != event.TypeInvalidate && e.rep.cappedAt != 0 && d.now-e.rep.cappedAt < d.win,
	}
}

// publish copies the hot set and the counters for HotSet and Stats, which
// other goroutines read. It runs once per sub-window (not per read), and
// rebuilds the hot set only when it changed or its rates are stale.
func (d *Detector) publish(force bool) {
	st := d.st
	st.HotKeys = len(d.hot.e)
	st.LastPacketTime = d.now
	var hs []event.Event
	rebuild := force || d.dirty || (len(d.hot.e) > 0 && d.now-d.lastPub >= publishEvery)
	if rebuild {
		hs = make([]event.Event, len(d.hot.e))
		for i := range d.hot.e {
			hs[i] = d.toEvent(&d.hot.e[i], event.TypeHot, d.hot.e[i].qps)
		}
		d.dirty = false
		d.lastPub = d.now
	}
	d.pubMu.Lock()
	d.pubStats = st
	if rebuild {
		d.pubHot = hs
	}
	d.pubMu.Unlock()
}

// maxLatencies bounds the latencies kept between two DrainLatencies calls.
const maxLatencies = 4096

// DrainLatencies appends the detection latencies (packet time from a key
// being located to its hot event) measured since the last call to dst and
// forgets them. Like Key and Tick, it runs on the observing goroutine.
func (d *Detector) DrainLatencies(dst []time.Duration) []time.Duration {
	dst = append(dst, d.latencies...)
	d.latencies = d.latencies[:0]
	return dst
}

// Flush brings HotSet and Stats up to date with everything observed so far
// without moving the clock: the end of a replay, where no later packet or
// Tick will. Merged invalidates still waiting for their gap are sent. Like Key and Tick, it runs on the observing goroutine.
func (d *Detector) Flush() {
	d.flushPending()
	d.publish(true)
}

// HotSet returns a copy of the current hot set as hot events (current qps),
// as of the last sub-window boundary or Tick.
func (d *Detector) HotSet() []event.Event {
	d.pubMu.Lock()
	defer d.pubMu.Unlock()
	out := make([]event.Event, len(d.pubHot))
	for i, e := range d.pubHot {
		e.Key = append([]byte(nil), e.Key...)
		out[i] = e
	}
	return out
}

// Stats returns the counters as of the last sub-window boundary or Tick.
func (d *Detector) Stats() Stats {
	d.pubMu.Lock()
	defer d.pubMu.Unlock()
	return d.pubStats
}

// identitySeed hashes the non-key part of a key identity (proto, server
// ip:port, ns). The identity hash is xxhash(key) XOR seed: xxhash is already
// uniform, so the XOR keeps bucket indexes uniform, and two identities
// collide with probability 2^-64 (the hot list compares full identities
// anyway).
func identitySeed(srv netip.AddrPort, p decode.Proto, ns int32) uint64 {
	a := srv.Addr().As16()
	s := binary.LittleEndian.Uint64(a[:8])*0x9E3779B97F4A7C15 ^
		binary.LittleEndian.Uint64(a[8:])*0xC2B2AE3D27D4EB4F ^
		uint64(srv.Port())<<40 ^ uint64(uint32(ns))<<8 ^ uint64(p)
	return mix64(mix64(s) + 1)
}

// mix64 is the splitmix64 finaliser: every input bit affects every output
// bit, so bucket indexes taken from the top bits are uniform.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return x
}
