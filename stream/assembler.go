// Package stream reassembles TCP byte streams for a passive sniffer and feeds
// them to protocol parsers.
//
// It is built for joining busy connections mid-stream and keeping up with a
// saturated cache node on one core:
//
//   - Direction comes from the port map (Ports): a segment to a mapped port
//     goes client->server (decode.ToServer), one from a mapped port
//     server->client. Both directions share one flow entry keyed by the
//     (client, server) pair; each has its own sequence state and parser from
//     Registry.Get(proto).NewParser(dir, midStream).
//   - A direction first seen without SYN starts at that segment's sequence
//     number and decodes at once (midStream=true): nothing is held back. With
//     a SYN it starts at ISN+1 (midStream=false); a SYN with a new ISN on a
//     known flow starts a new connection (port reuse).
//   - In-order payload is parsed in place (zero copy). Only the unparsed tail
//     is copied, into a pooled per-direction buffer. A parser returning more
//     than len(b) has the excess skipped from later payload, unbuffered. The
//     b a parser gets aliases the captured packet or that tail buffer: it is
//     valid only during the Parse call.
//   - Retransmitted and overlapping bytes are trimmed and counted once.
//     Sequence numbers compare in serial-number arithmetic (RFC 1982), so
//     streams wrap at 2^32.
//   - Segments ahead of a hole are copied into a small ordered buffer and
//     delivered when the hole fills. A hole is given up (a gap: the tail is
//     discarded and Parser.Gap called) when that buffer overflows, when data
//     has waited GapTimeout of packet time with the stream stuck, on FIN,
//     RST, expiry, eviction and Flush.
//     Bytes the capture cut (Segment.Missing) are a gap too, unless they fall
//     inside a skip the parser asked for, where losing them is harmless.
//   - FIN closes a direction and RST the connection after delivering what is
//     pending; a closed marker then drops late retransmissions (counted) for
//     ClosedTimeout. Idle flows expire by packet time.
//   - Every buffer is bounded (Config): per direction, in total (buffer
//     capacity, checked after every Add), flows in the table. Evictions pick
//     the least recently active flow through O(1) intrusive lists.
//
// An Assembler is not safe for concurrent use: one goroutine drives it and
// the parsers and sink run synchronously inside Add, Tick and Flush (they
// must not call back into it). Time is
// packet time only (Segment.TS), so replaying a capture is deterministic; no
// map is ever iterated for the same reason. Add allocates nothing for
// segments of known flows once buffers have warmed up.
package stream

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/decode"
)

// maxFreeFlows bounds the recycled flow structs kept after a burst of
// connections, so the free list does not pin memory forever.
const maxFreeFlows = 4096

// flowKey is a compact, padding-free key: hashing 36 plain bytes is faster
// than hashing two netip.AddrPort values, and IPv4 maps into IPv6 space.
type flowKey struct {
	client, server [16]byte
	cport, sport   uint16
}

func makeKey(client, server netip.AddrPort) flowKey {
	return flowKey{
		client: client.Addr().As16(),
		server: server.Addr().As16(),
		cport:  client.Port(),
		sport:  server.Port(),
	}
}

// Half states.
const (
	halfNew    uint8 = iota // nothing seen yet in this direction
	halfOpen                // tracking sequence numbers
	halfClosed              // FIN seen (or flow closed): late payload is dropped
)

// oooSeg is a segment that arrived ahead of a hole. data is a pooled copy.
type oooSeg struct {
	seq     uint32
	missing uint32
	ts      int64
	data    []byte
}

// half is one direction of a connection.
type half struct {
	parser decode.Parser // nil: the direction is dropped without a look
	sink   decode.Sink   // where the parser reports (requests are recorded for pairing)
	state  uint8
	sawSYN bool
	isn    uint32
	next   uint32 // sequence number of the next byte to deliver
	skip   uint64 // bytes the parser asked to skip, still to come
	stale  int    // far-old segments since the stream last advanced (see staleResync)
	// tail holds bytes the parser left unconsumed; it is a pooled buffer,
	// nil when empty. skip > 0 implies tail is empty.
	tail     []byte
	ooo      []oooSeg // ordered by seq; at most MaxOutOfOrder
	oooBytes int
	oooSince int64 // arrival time of the oldest buffered segment
	progress int64 // packet time next last advanced through arriving data

	// Config.Verify (accept.go).
	confirmed  bool     // requests: the server accepted the connection (SYN-ACK, or its ACKs anchored next)
	positioned bool     // next is where the stream really is (a handshake, an anchor, or data accepted)
	acked      bool     // ack holds the last acknowledgment number of an accepted segment
	ack        uint32   // of this direction: where the other direction's stream is
	ackTS      int64    // packet time of the segment that carried ack
	rejects    int      // segments rejected as out of window in a row
	doubt      bool     // requests: rejectResync rejects in a row; the server's next ACK may re-anchor them
	held       []oooSeg // requests: data before the server confirmed the connection (pooled copies)
	heldBytes  int
}

// flow is one connection: the table entry both directions share.
type flow struct {
	key      flowKey
	f        decode.Flow
	h        [2]half
	lastTS   int64
	closedAt int64
	closed   bool
	held     int // buffer capacity held by both directions
	links    [2]link
	pend     *decode.Pending // kept across the connections the slot serves
}

// Assembler reassembles TCP segments into per-direction byte streams and
// drives the protocol parsers. Create it with NewAssembler.
type Assembler struct {
	cfg   Config
	ports *Ports
	reg   *decode.Registry
	sink  decode.Sink
	// reqSink is what request parsers report to: sink, or a recorder that
	// also queues requests for reply pairing (Config.Replies).
	reqSink decode.Sink
	pendCfg decode.PendingConfig
	pendSt  decode.PendingStats

	flows   map[flowKey]*flow
	lru     flowList // open flows, most recently active first
	closed  flowList // closed markers, most recently closed first
	holders flowList // flows holding buffers, most recently active first
	free    []*flow
	pool    bufPool
	held    int   // buffer capacity held by all flows
	last    *flow // flow of the previous segment, nil once dropped

	ticked    bool
	lastTick  int64
	tickEvery int64

	st Stats
}

// NewAssembler returns an assembler that maps ports to protocols with ports,
// makes parsers from reg and reports decoded requests to sink. cfg must pass
// Validate: an invalid Config is a programming error and panics.
func NewAssembler(cfg Config, ports *Ports, reg *decode.Registry, sink decode.Sink) *Assembler {
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("stream: invalid config: %v", err))
	}
	if ports == nil {
		ports = new(Ports)
	}
	if reg == nil {
		reg = new(decode.Registry)
	}
	tick := min(time.Second, cfg.GapTimeout)
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	a := &Assembler{
		cfg:       cfg,
		ports:     ports,
		reg:       reg,
		sink:      sink,
		flows:     make(map[flowKey]*flow),
		lru:       flowList{slot: slotAge},
		closed:    flowList{slot: slotAge},
		holders:   flowList{slot: slotHeld},
		pool:      bufPool{max: max(cfg.MaxBufferBytes/8, 1<<20)},
		tickEvery: int64(tick),
	}
	a.reqSink = sink
	if cfg.Replies {
		a.reqSink = &recorder{decode.Forward{Next: sink}}
		a.pendCfg = cfg.Pending
	}
	return a
}

// Stats returns the counters so far.
func (a *Assembler) Stats() Stats {
	s := a.st
	s.FlowsActive = a.lru.len
	s.ClosedMarkers = a.closed.len
	s.BufferedBytes = a.held
	s.Pending = a.pendSt
	return s
}

// Add processes one segment. Payload is not retained: what must outlive the
// call is copied. Packet time advancing by min(1s, GapTimeout) since the last
// Tick runs Tick first.
func (a *Assembler) Add(seg *capture.Segment) {
	if !a.ticked {
		a.ticked, a.lastTick = true, seg.TS
	} else if seg.TS-a.lastTick >= a.tickEvery {
		a.Tick(seg.TS)
	}

	var dir decode.Dir
	var client, server netip.AddrPort
	proto := a.ports.Lookup(seg.Dst.Port())
	if proto != decode.ProtoUnknown {
		dir, client, server = decode.ToServer, seg.Src, seg.Dst
	} else if proto = a.ports.Lookup(seg.Src.Port()); proto != decode.ProtoUnknown {
		dir, client, server = decode.ToClient, seg.Dst, seg.Src
	} else {
		a.st.SegmentsIgnored++
		return
	}
	a.st.Segments++

	syn := seg.Flags&capture.FlagSYN != 0
	rst := seg.Flags&capture.FlagRST != 0
	key := makeKey(client, server)
	fl := a.last
	if fl == nil || fl.key != key {
		// A request and its response, or a burst of one connection, often
		// come back to back: the cache skips hashing the key for them.
		fl = a.flows[key]
	}
	switch {
	case fl == nil:
		if rst {
			return // nothing to reset, and no reason to track it
		}
		fl = a.newFlow(key, client, server, proto)
	case fl.closed:
		if !syn {
			if len(seg.Payload) > 0 {
				a.st.SegmentsAfterClose++
			}
			return
		}
		if h := &fl.h[dir]; h.sawSYN && h.isn == seg.Seq {
			// The SYN of the connection that just closed, again: a
			// retransmission, or the same packet from a second hook that
			// lags the first (a pod's veth and the uplink). A new
			// connection on the same ports starts from another ISN.
			a.st.BytesRetransmitted += uint64(len(seg.Payload))
			return
		}
		a.reopen(fl)
	}
	a.last = fl
	fl.lastTS = seg.TS
	a.lru.moveToFront(fl)
	if fl.held > 0 {
		a.holders.moveToFront(fl)
	}

	if a.cfg.Verify && !a.admit(fl, dir, seg) {
		return
	}
	h := &fl.h[dir]
	seq := seg.Seq
	if syn {
		if h.state != halfNew {
			if h.sawSYN && h.isn == seg.Seq {
				// A retransmitted SYN carries nothing new.
				a.st.BytesRetransmitted += uint64(len(seg.Payload))
				return
			}
			a.st.FlowsReset++
			if dir == decode.ToServer {
				a.resetFlow(fl)
			} else {
				a.finishHalf(fl, h)
				a.clearHalf(h)
			}
		}
		a.openHalf(fl, h, dir, seg.Seq+1, false)
		h.sawSYN, h.isn = true, seg.Seq
		h.positioned = dir == decode.ToClient // a client's SYN counts once the server answers it
		seq++                                 // the SYN occupies one sequence number
	} else if h.state == halfNew {
		if a.cfg.Verify && dir == decode.ToServer {
			return // no data (admit let none through) on a half not anchored yet
		}
		a.openHalf(fl, h, dir, seq, true)
		h.positioned = true
	}

	if h.state == halfOpen {
		if h.parser == nil {
			a.st.BytesDropped += uint64(len(seg.Payload))
		} else {
			if seg.Resumed && seqDiff(seq, h.next) > 0 {
				a.resume(fl, h, seq)
			}
			fl.f.KernelCounted = seg.KernelCounted
			if q := fl.f.Pending; q != nil {
				// What the capture says of the connection's replies (in-kernel
				// counting with reply bytes): pairing starts on a request,
				// and stops on a request or a reply.
				switch {
				case seg.Replies == capture.RepliesFramedFrom && dir == decode.ToServer:
					q.Align()
				case seg.Replies == capture.RepliesUnframed:
					q.Unframed()
				}
			}
			a.segment(fl, h, seq, seg.Payload, seg.Missing, seg.TS)
		}
		if seg.Flags&capture.FlagFIN != 0 {
			a.finishHalf(fl, h)
		}
	} else if len(seg.Payload) > 0 {
		a.st.SegmentsAfterClose++
	}

	switch {
	case rst || closedBoth(fl):
		a.st.FlowsClosed++
		a.closeFlow(fl, true)
	case len(h.ooo) > 0:
		a.expireHoles(fl, h, seg.TS)
	}
	if a.held > a.cfg.MaxBufferBytes {
		a.reclaim(fl)
	}
}

// closedBoth reports whether the connection is over: both directions sent
// FIN, or one did and the other was never seen (a capture of one direction
// only, such as XDP on ingress), so nothing more is coming from it.
func closedBoth(fl *flow) bool {
	s0, s1 := fl.h[0].state, fl.h[1].state
	return (s0 == halfClosed || s1 == halfClosed) && s0 != halfOpen && s1 != halfOpen
}

// Tick expires, by packet time now, idle flows, old closed markers and holes
// waited on longer than GapTimeout.
func (a *Assembler) Tick(now int64) {
	a.ticked, a.lastTick = true, now
	for fl := a.lru.tail; fl != nil && now-fl.lastTS >= int64(a.cfg.IdleTimeout); fl = a.lru.tail {
		a.st.FlowsExpired++
		a.closeFlow(fl, false)
	}
	for fl := a.closed.tail; fl != nil && now-fl.closedAt >= int64(a.cfg.ClosedTimeout); fl = a.closed.tail {
		a.forget(fl)
	}
	for fl := a.holders.tail; fl != nil; {
		prev := a.holders.prev(fl) // fl may leave the list below
		for d := range fl.h {
			if h := &fl.h[d]; len(h.ooo) > 0 {
				a.expireHoles(fl, h, now)
			}
			// Requests held for a server that never confirmed the
			// connection (a forged segment is answered by a RST, if at
			// all): a real reply comes long before GapTimeout.
			if h := &fl.h[d]; len(h.held) > 0 && now-h.held[0].ts > int64(a.cfg.GapTimeout) {
				a.dropHeld(fl, h)
			}
		}
		fl = prev
	}
	if a.held > a.cfg.MaxBufferBytes {
		a.reclaim(nil) // delivering held data can round tails up to larger buffers
	}
}

// Flush ends the input: every flow delivers its buffered data, declaring the
// holes as gaps, and is closed. The Assembler is empty afterwards and may be
// used again.
func (a *Assembler) Flush() {
	for fl := a.lru.tail; fl != nil; fl = a.lru.tail {
		a.st.FlowsClosed++
		a.closeFlow(fl, false)
	}
	for fl := a.closed.tail; fl != nil; fl = a.closed.tail {
		a.forget(fl)
	}
}

func (a *Assembler) newFlow(key flowKey, client, server netip.AddrPort, proto decode.Proto) *flow {
	if len(a.flows) >= a.cfg.MaxFlows {
		if old := a.closed.tail; old != nil {
			a.forget(old)
		} else if old := a.lru.tail; old != nil {
			a.st.FlowsEvicted++
			a.closeFlow(old, false)
		}
	}
	var fl *flow
	if n := len(a.free); n > 0 {
		fl = a.free[n-1]
		a.free[n-1] = nil
		a.free = a.free[:n-1]
	} else {
		fl = new(flow)
	}
	fl.key = key
	fl.f = decode.Flow{Client: client, Server: server, Proto: proto}
	if a.cfg.Replies {
		if fl.pend == nil {
			fl.pend = decode.NewPending(&a.pendCfg, &a.pendSt)
		}
		fl.pend.Reset(false)
		fl.f.Pending = fl.pend
	}
	a.flows[key] = fl
	a.lru.pushFront(fl)
	a.st.FlowsCreated++
	return fl
}

// reopen turns a closed marker back into an open flow for a new connection.
func (a *Assembler) reopen(fl *flow) {
	a.closed.remove(fl)
	fl.closed = false
	a.clearHalf(&fl.h[0])
	a.clearHalf(&fl.h[1])
	if fl.f.Pending != nil {
		fl.f.Pending.Reset(false)
	}
	a.lru.pushFront(fl)
	a.st.FlowsCreated++
}

// resetFlow ends the connection in fl and readies it for a new one.
func (a *Assembler) resetFlow(fl *flow) {
	for d := range fl.h {
		a.finishHalf(fl, &fl.h[d])
		a.clearHalf(&fl.h[d])
	}
}

// closeFlow delivers what fl holds and closes it, leaving a closed marker or
// removing it from the table.
func (a *Assembler) closeFlow(fl *flow, marker bool) {
	a.finishHalf(fl, &fl.h[0])
	a.finishHalf(fl, &fl.h[1])
	a.lru.remove(fl)
	if marker {
		fl.closed = true
		fl.closedAt = fl.lastTS
		a.closed.pushFront(fl)
		return
	}
	a.drop(fl)
}

// forget removes a closed marker.
func (a *Assembler) forget(fl *flow) {
	a.closed.remove(fl)
	a.drop(fl)
}

// drop removes fl from the table and recycles it. It holds no buffers.
func (a *Assembler) drop(fl *flow) {
	if a.last == fl {
		a.last = nil
	}
	delete(a.flows, fl.key)
	a.clearHalf(&fl.h[0])
	a.clearHalf(&fl.h[1])
	*fl = flow{h: [2]half{{ooo: fl.h[0].ooo, held: fl.h[0].held}, {ooo: fl.h[1].ooo, held: fl.h[1].held}}, pend: fl.pend}
	if len(a.free) < maxFreeFlows {
		a.free = append(a.free, fl)
	} else if fl.pend != nil {
		fl.pend.Release() // its memory no longer counts toward the bound
	}
}

// reclaim evicts the least recently active flows holding buffers until the
// total is within MaxBufferBytes. cur, the flow of the segment being added
// (or nil), goes last: if it alone is over, it loses its buffers instead.
func (a *Assembler) reclaim(cur *flow) {
	for a.held > a.cfg.MaxBufferBytes {
		v := a.holders.tail
		if v == cur {
			v = a.holders.prev(cur)
		}
		if v == nil {
			if cur == nil {
				return
			}
			a.st.BufferOverflows++
			for d := range cur.h {
				a.dropHeld(cur, &cur.h[d])
				if h := &cur.h[d]; h.state == halfOpen && h.parser != nil {
					a.discard(cur, h)
				}
			}
			return
		}
		a.st.MemEvictions++
		a.closeFlow(v, false)
	}
}

// recorder queues each request, and the keys of reads, on the connection's
// Pending queue before passing everything on.
type recorder struct{ decode.Forward }

func (r *recorder) Request(f *decode.Flow, req *decode.Request) {
	if f.Pending != nil {
		f.Pending.Push(f.TS, req)
	}
	r.Next.Request(f, req)
}

func (r *recorder) Key(f *decode.Flow, req *decode.Request, k decode.Key) {
	if f.Pending != nil && !req.Write {
		f.Pending.AddKey(k)
	}
	r.Next.Key(f, req, k)
}
