package stream

import "github.com/hotsniff/hotsniff/decode"

// staleResync is how many segments of wholly old data in a row, each from
// beyond resyncDistance, make a direction give up its sequence state.
const staleResync = 1024

// resyncDistance is how far behind the stream old data must start to count
// towards staleResync: further than any congestion window, so retransmissions
// never re-deliver bytes, while a bogus sequence state is almost always
// further off than that.
const resyncDistance = 64 << 20

// seqDiff compares sequence numbers in serial-number arithmetic: negative when
// a is before b, positive when after, across the 2^32 wrap.
func seqDiff(a, b uint32) int32 { return int32(a - b) }

func (a *Assembler) openHalf(fl *flow, h *half, dir decode.Dir, next uint32, midStream bool) {
	h.state = halfOpen
	h.next = next
	h.progress = fl.lastTS
	h.skip = 0
	h.sawSYN = false
	h.parser = nil
	h.sink = a.sink
	if dir == decode.ToServer {
		h.sink = a.reqSink
	}
	if d := a.reg.Get(fl.f.Proto); d != nil {
		h.parser = d.NewParser(dir, midStream)
	}
	if q := fl.f.Pending; q != nil {
		switch {
		case dir == decode.ToServer && !midStream:
			q.Reset(true) // the connection's start: pairing begins at once
		case midStream:
			q.Desync()
		}
	}
}

// clearHalf readies a finished half for a new connection. It holds no buffers.
func (a *Assembler) clearHalf(h *half) {
	*h = half{ooo: h.ooo[:0], held: h.held[:0]}
}

// finishHalf delivers the out-of-order data of h, declaring its holes,
// discards the unparsed tail and closes the direction.
func (a *Assembler) finishHalf(fl *flow, h *half) {
	a.dropHeld(fl, h) // never confirmed
	if h.state == halfOpen && h.parser != nil {
		for len(h.ooo) > 0 {
			a.jump(fl, h)
		}
		a.dropTail(fl, h)
	}
	h.parser = nil
	h.skip = 0
	h.state = halfClosed
}

// discard frees what h buffers while keeping it open: out-of-order data is
// delivered across its holes and the tail is dropped as a gap.
func (a *Assembler) discard(fl *flow, h *half) {
	for len(h.ooo) > 0 {
		a.jump(fl, h)
	}
	if len(h.tail) > 0 {
		a.gap(fl, h)
	}
}

// segment handles payload d starting at seq, followed by missing uncaptured
// bytes, on an open direction with a parser.
func (a *Assembler) segment(fl *flow, h *half, seq uint32, d []byte, missing uint32, ts int64) {
	for {
		if len(d) == 0 && missing == 0 {
			return
		}
		if diff := seqDiff(seq, h.next); diff <= 0 {
			if diff < -resyncDistance && len(d) > 0 && uint64(-int64(diff)) >= uint64(len(d))+uint64(missing) {
				// Wholly old data from further back than any sender
				// retransmits. A long run of nothing else means the sequence
				// state is wrong (joined on a corrupt or stray segment):
				// believe the sender instead.
				if h.stale++; h.stale >= staleResync {
					a.resync(fl, h, seq)
					continue
				}
			}
			before := h.next
			a.inOrder(fl, h, seq, d, missing, ts)
			if h.next != before {
				h.progress = ts
			}
			if len(h.ooo) > 0 {
				a.drain(fl, h)
			}
			return
		}
		if h.skip >= uint64(seqDiff(seq, h.next)) && len(h.ooo) == 0 {
			// A hole inside a skip the parser asked for: the capture left
			// out bytes nobody needs (eBPF reply heads). Nothing to wait for.
			a.lose(fl, h, seq-h.next)
			continue
		}
		if len(d) == 0 {
			// Only uncaptured bytes ahead of a hole: nothing to keep. The
			// hole they leave is found like any other.
			return
		}
		if a.buffer(fl, h, seq, d, missing, ts) {
			return
		}
		// No room to wait for the hole: give it up, up to the lowest sequence
		// number known, and try again.
		a.st.BufferOverflows++
		if len(h.ooo) == 0 || seqDiff(seq, h.ooo[0].seq) < 0 {
			a.lose(fl, h, seq-h.next)
			continue
		}
		a.jump(fl, h)
	}
}

// inOrder delivers a segment that starts at or before h.next, trimming what
// was delivered already.
func (a *Assembler) inOrder(fl *flow, h *half, seq uint32, d []byte, missing uint32, ts int64) {
	if diff := seqDiff(seq, h.next); diff < 0 {
		old := uint64(-int64(diff))
		switch {
		case old >= uint64(len(d))+uint64(missing):
			a.st.BytesRetransmitted += uint64(len(d))
			return
		case old >= uint64(len(d)):
			a.st.BytesRetransmitted += uint64(len(d))
			missing -= uint32(old - uint64(len(d)))
			d = nil
		default:
			a.st.BytesRetransmitted += old
			d = d[old:]
		}
	}
	if len(d) > 0 {
		h.stale = 0
		h.next += uint32(len(d))
		a.st.Bytes += uint64(len(d))
		a.feed(fl, h, d, ts)
	}
	if missing > 0 {
		a.lose(fl, h, missing)
	}
}

// feed hands in-order bytes to the parser: in place when nothing is
// buffered, else appended to the tail.
func (a *Assembler) feed(fl *flow, h *half, d []byte, ts int64) {
	fl.f.TS = ts
	for len(d) > 0 {
		if h.skip > 0 {
			n := min(h.skip, uint64(len(d)))
			h.skip -= n
			a.st.BytesSkipped += n
			d = d[n:]
			continue
		}
		if len(h.tail) == 0 {
			c := h.parser.Parse(d, &fl.f, h.sink)
			if c >= len(d) {
				h.skip = uint64(c - len(d))
				a.skipping(fl, h, 0)
				return
			}
			d = d[max(c, 0):]
			if len(d) > a.room(h) {
				a.st.BufferOverflows++
				a.st.BytesDiscarded += uint64(len(d))
				a.gap(fl, h)
				return
			}
			a.appendTail(fl, h, d)
			return
		}
		room := a.room(h)
		if room <= 0 {
			// The parser sits on a full tail: it will never complete.
			a.st.BufferOverflows++
			a.gap(fl, h)
			continue
		}
		n := min(room, len(d))
		a.appendTail(fl, h, d[:n])
		d = d[n:]
		c := h.parser.Parse(h.tail, &fl.f, h.sink)
		if c >= len(h.tail) {
			h.skip = uint64(c - len(h.tail))
			a.skipping(fl, h, len(d))
			a.release(fl, h.tail)
			h.tail = nil
			continue
		}
		if c > 0 {
			h.tail = h.tail[:copy(h.tail, h.tail[c:])]
		}
	}
}

// skipping reports a reply skip to Config.OnSkip; unfed bytes after the
// data just parsed are still to come in this call.
func (a *Assembler) skipping(fl *flow, h *half, unfed int) {
	if a.cfg.OnSkip == nil || h.skip < uint64(a.cfg.SkipNotify) || h != &fl.h[decode.ToClient] || h.skip >= 1<<31 {
		return
	}
	start := h.next - uint32(unfed)
	a.cfg.OnSkip(&fl.f, start, start+uint32(h.skip))
}

// resync restarts h at seq, throwing away what it buffers.
func (a *Assembler) resync(fl *flow, h *half, seq uint32) {
	a.st.Resyncs++
	a.restart(fl, h, seq)
	a.gap(fl, h)
}

// resume restarts h at seq after the capture skipped the connection on
// purpose (flow sampling): the bytes before seq were not lost, so no gap is
// counted, but the parser still resynchronises, as on a connection joined
// mid-stream.
func (a *Assembler) resume(fl *flow, h *half, seq uint32) {
	a.st.SampleResumes++
	a.restart(fl, h, seq)
	a.dropTail(fl, h)
	h.skip = 0
	h.parser.Gap()
}

// restart moves h to seq, discarding the segments it buffered ahead of a
// hole; the caller says whether that counts as a gap.
func (a *Assembler) restart(fl *flow, h *half, seq uint32) {
	h.stale = 0
	for _, s := range h.ooo {
		a.st.BytesDiscarded += uint64(len(s.data))
		a.release(fl, s.data)
	}
	clear(h.ooo)
	h.ooo = h.ooo[:0]
	h.oooBytes = 0
	h.next = seq
}

// room is how many more bytes h may buffer under MaxFlowBuffer.
func (a *Assembler) room(h *half) int {
	return a.cfg.MaxFlowBuffer - len(h.tail) - h.oooBytes
}

func (a *Assembler) appendTail(fl *flow, h *half, d []byte) {
	if need := len(h.tail) + len(d); need > cap(h.tail) {
		nb := append(a.take(fl, need), h.tail...)
		if h.tail != nil {
			a.release(fl, h.tail)
		}
		h.tail = nb
	}
	h.tail = append(h.tail, d...)
}

func (a *Assembler) dropTail(fl *flow, h *half) {
	if h.tail == nil {
		return
	}
	a.st.BytesDiscarded += uint64(len(h.tail))
	a.release(fl, h.tail)
	h.tail = nil
}

// lose advances h past n bytes that will never be seen. Bytes inside a skip
// the parser asked for are harmless; otherwise the parser must resync.
func (a *Assembler) lose(fl *flow, h *half, n uint32) {
	h.next += n
	if h.skip >= uint64(n) {
		// Nobody needed them: skipped, not lost (the eBPF capture leaves
		// out reply values this way on purpose).
		h.skip -= uint64(n)
		a.st.BytesSkipped += uint64(n)
		return
	}
	a.st.BytesLost += uint64(n)
	a.gap(fl, h)
}

// gap discards the tail and tells the parser to resynchronise.
func (a *Assembler) gap(fl *flow, h *half) {
	a.dropTail(fl, h)
	h.skip = 0
	h.parser.Gap()
	if fl.f.Pending != nil {
		// Requests or replies were lost: pairing is off until a quiet point.
		fl.f.Pending.Desync()
	}
	a.st.Gaps[fl.f.Proto]++
}

// buffer copies a segment that arrived ahead of a hole, or reports false when
// the per-direction bounds leave no room for it.
func (a *Assembler) buffer(fl *flow, h *half, seq uint32, d []byte, missing uint32, ts int64) bool {
	i := len(h.ooo)
	for i > 0 && seqDiff(h.ooo[i-1].seq, seq) > 0 {
		i--
	}
	if i > 0 {
		if p := &h.ooo[i-1]; p.seq == seq && len(p.data) >= len(d) && p.missing >= missing {
			a.st.BytesRetransmitted += uint64(len(d)) // a duplicate of what waits already
			return true
		}
	}
	if len(h.ooo) >= a.cfg.MaxOutOfOrder || len(d) > a.room(h) {
		return false
	}
	if h.ooo == nil {
		h.ooo = make([]oooSeg, 0, a.cfg.MaxOutOfOrder)
	}
	b := append(a.take(fl, len(d)), d...)
	h.ooo = append(h.ooo, oooSeg{})
	copy(h.ooo[i+1:], h.ooo[i:])
	h.ooo[i] = oooSeg{seq: seq, missing: missing, ts: ts, data: b}
	if len(h.ooo) == 1 {
		h.oooSince = ts
	}
	h.oooBytes += len(d)
	a.st.OutOfOrder++
	return true
}

// drain delivers buffered segments that the stream has reached.
func (a *Assembler) drain(fl *flow, h *half) {
	for len(h.ooo) > 0 && seqDiff(h.ooo[0].seq, h.next) <= 0 {
		s := h.ooo[0]
		n := copy(h.ooo, h.ooo[1:])
		h.ooo[n] = oooSeg{}
		h.ooo = h.ooo[:n]
		h.oooBytes -= len(s.data)
		a.inOrder(fl, h, s.seq, s.data, s.missing, s.ts)
		a.release(fl, s.data)
	}
	if len(h.ooo) > 0 {
		since := h.ooo[0].ts
		for _, s := range h.ooo[1:] {
			since = min(since, s.ts)
		}
		h.oooSince = since
	}
}

// jump gives up the hole before the lowest buffered segment and delivers
// from there.
func (a *Assembler) jump(fl *flow, h *half) {
	if a.unconfirmedHole(fl, h) {
		a.rejectHeld(fl, h)
		return
	}
	if first := h.ooo[0].seq; seqDiff(first, h.next) > 0 {
		a.lose(fl, h, first-h.next)
	}
	a.drain(fl, h)
}

// expireHoles gives up holes whose data has waited longer than GapTimeout
// while the stream made no progress. A stream that moves on has no hole where
// it is: what waits is far ahead (a stray segment) and jumping to it would
// throw the good stream away.
func (a *Assembler) expireHoles(fl *flow, h *half, now int64) {
	gt := int64(a.cfg.GapTimeout)
	for len(h.ooo) > 0 && now-h.oooSince > gt && now-h.progress > gt {
		a.jump(fl, h)
	}
}

// take gets a pooled buffer for fl and accounts for its capacity.
func (a *Assembler) take(fl *flow, n int) []byte {
	b := a.pool.get(n)
	fl.held += cap(b)
	a.held += cap(b)
	if !a.holders.contains(fl) {
		a.holders.pushFront(fl)
	}
	return b
}

// release returns a buffer of fl to the pool.
func (a *Assembler) release(fl *flow, b []byte) {
	fl.held -= cap(b)
	a.held -= cap(b)
	a.pool.put(b)
	if fl.held == 0 {
		a.holders.remove(fl)
	}
}
