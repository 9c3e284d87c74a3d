package stream

import (
	"slices"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/decode"
)

// Why a segment was rejected by Config.Verify (Stats.Rejected).
const (
	// RejectUnconfirmed: request data on a connection the server was not
	// seen to accept: no SYN-ACK answering the client's SYN, and (joined
	// mid-stream) no segment from the server yet acknowledging where the
	// client's stream is.
	RejectUnconfirmed = iota
	// RejectWindow: a sequence number (or acknowledgment number) outside
	// the window of what the connection has sent and acknowledged.
	RejectWindow
	// RejectSYN: a SYN or SYN-ACK on a connection the server already
	// accepted, which would otherwise restart its tracking at a sequence
	// number the sender chose. (A real new connection on the same ports
	// after one that vanished without FIN or RST is picked up again from
	// the server's acknowledgments once rejectResync of its segments were
	// out of window.)
	RejectSYN
	numRejects
)

// RejectReasons names the reasons, as metrics label them.
var RejectReasons = [numRejects]string{"unconfirmed", "out_of_window", "unexpected_syn"}

// DefaultWindow is Config.Window's default: 2 MiB either side of where a
// direction's stream is. A real segment is never further off (a receive
// window ahead, a retransmission behind) unless the capture lost more than
// that, which the other direction's acknowledgments then re-anchor; a
// forged segment with a random sequence number lands inside it once in
// 1,024 tries, and with a random acknowledgment number too, once in about
// a million.
const DefaultWindow = 2 << 20

// rejectResync is how many segments of a direction in a row may be
// rejected as out of window before its position is given up and taken
// again (from the server's acknowledgments for requests): a stream whose
// position came from a stray segment recovers, while a forger has to get
// that many in with no real segment between.
const rejectResync = 64

// within reports whether a is at most w away from b (serial arithmetic).
func within(a, b, w uint32) bool {
	d := seqDiff(a, b)
	return d >= -int32(w) && d <= int32(w)
}

// admit decides, under Config.Verify, whether a segment can belong to the
// connection as the server accepted it, and learns from the server's
// segments where the client's stream is. Rejected segments are counted and
// go no further: they reach no parser and count no lost bytes.
func (a *Assembler) admit(fl *flow, dir decode.Dir, seg *capture.Segment) bool {
	h, peer := &fl.h[dir], &fl.h[1-dir]
	w := a.cfg.Window
	hasAck := seg.Flags&capture.FlagACK != 0
	if seg.Flags&capture.FlagSYN != 0 {
		if dir == decode.ToServer {
			if h.state == halfOpen && h.confirmed && !(h.sawSYN && h.isn == seg.Seq) && h.next != seg.Seq+1 {
				a.reject(RejectSYN, seg)
				return false
			}
			return true
		}
		if !hasAck {
			return true
		}
		// The server's SYN-ACK: it accepted the connection whose client
		// ISN it acknowledges.
		switch c := peer; {
		case c.sawSYN && seg.Ack == c.isn+1:
			c.confirmed, c.positioned = true, true
			a.deliverHeld(fl, c)
		case c.confirmed:
			a.reject(RejectSYN, seg)
			return false
		default:
			a.anchor(fl, seg.Ack)
		}
		return true
	}
	if h.state == halfOpen && !h.positioned && dir == decode.ToClient {
		// Replies lost their position: the client's acknowledgments give
		// it back (below); until then nothing from "the server" counts.
		a.reject(RejectUnconfirmed, seg)
		return false
	}
	if h.state == halfOpen && h.positioned && !seg.Resumed {
		near := within(seg.Seq, h.next, w)
		in := near || (peer.acked && within(seg.Seq, peer.ack, w))
		if in && dir == decode.ToServer && hasAck && peer.state == halfOpen && peer.positioned {
			// A request also acknowledges the replies: a blind forger
			// must guess both numbers.
			in = within(seg.Ack, peer.next, w) || (h.acked && within(seg.Ack, h.ack, w))
		}
		if !in {
			a.reject(RejectWindow, seg)
			if h.rejects++; h.rejects >= rejectResync {
				a.doubt(fl, h, dir)
			}
			return false
		}
		if !near && seqDiff(seg.Seq, h.next) > 0 {
			// The other direction acknowledges this far: the capture
			// missed more than a window. Go on from here; the bytes in
			// between are a gap, of a size nobody knows. (Far behind:
			// old data, trimmed as a retransmission.)
			a.jumpTo(fl, h, seg.Seq)
		}
		h.rejects, h.doubt = 0, false
		if dir == decode.ToServer && hasAck && peer.state == halfOpen && !peer.positioned {
			// An accepted request says where the replies are.
			if within(seg.Ack, peer.next, w) {
				peer.positioned, peer.rejects = true, 0
			} else {
				a.jumpTo(fl, peer, seg.Ack)
			}
		}
	}
	if hasAck && h.state == halfOpen {
		h.ack, h.acked, h.ackTS = seg.Ack, true, seg.TS
	}
	if dir == decode.ToClient {
		if hasAck && seg.Flags&capture.FlagRST == 0 && (!peer.confirmed || peer.doubt && !within(seg.Ack, peer.next, w)) {
			// The server acknowledges the client's stream up to here:
			// the connection exists, and requests go on there.
			a.anchor(fl, seg.Ack)
		}
		return true
	}
	if !h.confirmed && (len(seg.Payload) > 0 || seg.Missing > 0) {
		if h.sawSYN {
			// Data before the server's SYN-ACK: a server without a Fast
			// Open cookie does not take it.
			a.reject(RejectUnconfirmed, seg)
		} else {
			a.hold(fl, h, seg)
		}
		return false
	}
	return true
}

// hold keeps request data that arrived before the server was seen to
// accept the connection (joined mid-stream: the request comes before its
// reply), until a segment of the server says where the client's stream is
// (anchor). Bounded like out-of-order data; beyond that, or if the server
// never confirms it, it is rejected.
func (a *Assembler) hold(fl *flow, h *half, seg *capture.Segment) {
	if len(seg.Payload) == 0 || len(h.held) >= max(a.cfg.MaxOutOfOrder, 1) ||
		h.heldBytes+len(seg.Payload) > a.cfg.MaxFlowBuffer-len(h.tail)-h.oooBytes {
		a.reject(RejectUnconfirmed, seg)
		return
	}
	b := append(a.take(fl, len(seg.Payload)), seg.Payload...)
	h.held = append(h.held, oooSeg{seq: seg.Seq, missing: seg.Missing, ts: seg.TS, data: b})
	h.heldBytes += len(b)
	if a.held > a.cfg.MaxBufferBytes {
		a.reclaim(fl)
	}
}

// dropHeld rejects what h holds.
func (a *Assembler) dropHeld(fl *flow, h *half) {
	for i, s := range h.held {
		a.st.Rejected[RejectUnconfirmed]++
		a.st.RejectedBytes += uint64(len(s.data)) + uint64(s.missing)
		a.release(fl, s.data)
		h.held[i] = oooSeg{}
	}
	h.held, h.heldBytes = h.held[:0], 0
}

// deliverHeld feeds what h held, now that the connection is confirmed:
// the segments within the window of where the stream is, in sequence
// order; the others are rejected.
func (a *Assembler) deliverHeld(fl *flow, h *half) {
	if len(h.held) == 0 {
		return
	}
	held := h.held
	slices.SortStableFunc(held, func(x, y oooSeg) int { return int(seqDiff(x.seq, y.seq)) })
	for i, s := range held {
		held[i] = oooSeg{}
		h.heldBytes -= len(s.data)
		switch {
		case h.state != halfOpen || h.parser == nil || !within(s.seq, h.next, a.cfg.Window):
			a.st.Rejected[RejectUnconfirmed]++
			a.st.RejectedBytes += uint64(len(s.data)) + uint64(s.missing)
		default:
			a.segment(fl, h, s.seq, s.data, s.missing, s.ts)
		}
		a.release(fl, s.data)
	}
	h.held = held[:0]
}

// doubt handles rejectResync segments of a direction in a row out of
// window: its position may be wrong (it came from a stray segment). Replies
// lose it and take it again from the client's acknowledgments; requests
// only from the server's (a request could be forged too). When both
// directions are in doubt, the connection is tracked again from scratch,
// as if joined mid-stream.
func (a *Assembler) doubt(fl *flow, h *half, dir decode.Dir) {
	h.rejects = 0
	if dir == decode.ToClient {
		h.positioned, h.acked = false, false
	} else {
		h.doubt = true
	}
	if c, s := &fl.h[decode.ToServer], &fl.h[decode.ToClient]; c.doubt && s.state == halfOpen && !s.positioned {
		a.st.FlowsReset++
		a.resetFlow(fl)
		for d := range fl.h {
			fl.h[d].state = halfNew
		}
	}
}

// jumpTo moves h, open, to seq: a resynchronisation, counted as a gap.
func (a *Assembler) jumpTo(fl *flow, h *half, seq uint32) {
	a.st.Resyncs++
	a.restart(fl, h, seq)
	if h.parser != nil {
		a.gap(fl, h)
	}
	h.positioned, h.rejects = true, 0
}

// anchor places the client's direction at seq, where the server says its
// stream is, and marks it accepted.
func (a *Assembler) anchor(fl *flow, seq uint32) {
	c := &fl.h[decode.ToServer]
	if len(c.held) > 0 {
		// Requests held since the join: if the server acknowledges near
		// them, they are the client's stream, which starts at the first.
		start := c.held[0].seq
		for _, s := range c.held[1:] {
			if seqDiff(s.seq, start) < 0 {
				start = s.seq
			}
		}
		if within(seq, start, a.cfg.Window) {
			seq = start
		} else {
			a.dropHeld(fl, c)
		}
	}
	switch c.state {
	case halfNew:
		a.openHalf(fl, c, decode.ToServer, seq, true)
	case halfOpen:
		if c.next != seq || !c.positioned {
			a.restart(fl, c, seq)
			a.dropTail(fl, c)
			c.skip = 0
			if c.parser != nil {
				c.parser.Gap() // it starts mid-stream: resynchronise
			}
		}
	default:
		a.dropHeld(fl, c)
		return
	}
	c.confirmed, c.positioned, c.rejects, c.doubt = true, true, 0, false
	a.deliverHeld(fl, c)
}

func (a *Assembler) reject(reason int, seg *capture.Segment) {
	a.st.Rejected[reason]++
	a.st.RejectedBytes += uint64(len(seg.Payload)) + uint64(seg.Missing)
}

// unconfirmedHole reports whether the hole before h's buffered data is one
// the receiver never filled either: it acknowledged, after that data
// arrived, no further than where h's stream is. Bytes the capture lost were
// received, and the receiver's acknowledgments pass them; a segment that
// waits beyond a hole the receiver itself still has is not (yet) part of its
// stream (a forged segment inside the window, most likely) and is never
// parsed. Without a later acknowledgment there is no evidence either way,
// and the hole is given up as a loss, as without Verify.
func (a *Assembler) unconfirmedHole(fl *flow, h *half) bool {
	if !a.cfg.Verify || len(h.ooo) == 0 || seqDiff(h.ooo[0].seq, h.next) <= 0 {
		return false
	}
	r := &fl.h[0]
	if h == r {
		r = &fl.h[1]
	}
	return r.acked && r.ackTS > h.oooSince && seqDiff(r.ack, h.next) <= 0
}

// rejectHeld drops h's buffered out-of-order data as unconfirmed.
func (a *Assembler) rejectHeld(fl *flow, h *half) {
	for i := range h.ooo {
		s := &h.ooo[i]
		a.st.Rejected[RejectUnconfirmed]++
		a.st.RejectedBytes += uint64(len(s.data)) + uint64(s.missing)
		a.release(fl, s.data)
		*s = oooSeg{}
	}
	h.ooo = h.ooo[:0]
	h.oooBytes = 0
}
