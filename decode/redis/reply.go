package redis

import (
	"bytes"

	"github.com/hotsniff/hotsniff/decode"
)

// Reply error reasons (Sink.Error).
const (
	ReasonBadReply   = "bad_reply"   // a reply byte that starts no RESP2/RESP3 type, or a bad length
	ReasonReplyDepth = "reply_depth" // aggregates nested deeper than maxReplyDepth
	ReasonUnexpected = "unexpected_reply"
)

// maxReplyDepth bounds aggregate nesting in a reply. Replies of real
// commands nest a few levels (EXEC of XREAD replies, CLUSTER SHARDS); deeper
// is taken for garbage.
const maxReplyDepth = 32

// maxLenLine is the longest "<type><length>\r\n" header the reply parser
// waits for: 20 digits, a sign and the framing.
const maxLenLine = 24

// Reply kinds at the top level.
const (
	kindReply = iota
	kindPush  // RESP3 '>' out-of-band data: answers no request
)

// replyParser reads the server-to-client direction: it walks RESP2 and RESP3
// replies header by header, skipping every value's bytes (returning more
// than len(b)) so nothing but headers is ever buffered, and gives each
// reply's bytes to the keys of the request it answers (the head of the
// connection's Pending queue). An MGET reply of one element per key gives
// each element to its key and splits the array header evenly; any other
// reply is split evenly between the request's read keys.
type replyParser struct {
	s     decode.Sink // of the Parse call in progress
	epoch uint32
	dead  bool // pub/sub or MONITOR: replies no longer answer requests one to one

	skipLine bool // inside a simple line, up to its LF
	depth    int
	stack    [maxReplyDepth]int64

	inReply bool
	kind    uint8
	attr    bool   // a top-level RESP3 attribute preceded: it belongs to the next reply
	attrTop bool   // the top-level value being read is such an attribute
	bytes   uint64 // bytes of the reply so far
	perElem bool
	elem    int
	elemAt  uint64 // bytes when the current top-level element started
	given   uint64 // bytes given to elements (and counted)
	hdr     uint64 // framing bytes of an MGET reply, shared between its keys
}

func (p *replyParser) Gap() { p.reset() }

func (p *replyParser) reset() {
	p.skipLine, p.depth, p.inReply, p.attr, p.attrTop, p.perElem = false, 0, false, false, false, false
	p.bytes, p.given, p.elem = 0, 0, 0
}

// Parse implements decode.Parser for replies.
func (p *replyParser) Parse(b []byte, f *decode.Flow, s decode.Sink) int {
	p.s = s
	q, rs, fresh := decode.StartReplies(f, s, &p.epoch)
	if q == nil {
		return len(b)
	}
	if fresh {
		p.reset()
	}
	if !q.Synced() || p.dead {
		rs.Reply(f, uint64(len(b)), false)
		return len(b)
	}
	pos := 0
	for pos < len(b) {
		if p.dead {
			rs.Reply(f, uint64(len(b)-pos), false)
			return len(b)
		}
		if p.skipLine {
			i := bytes.IndexByte(b[pos:], '\n')
			if i < 0 {
				p.bytes += uint64(len(b) - pos)
				return len(b)
			}
			p.bytes += uint64(i + 1)
			pos += i + 1
			p.skipLine = false
			if !p.done(f, q, rs) {
				return p.lost(f, q, rs, b, pos)
			}
			continue
		}
		if !p.inReply {
			p.start(q, b[pos:])
		}
		if p.depth == 1 && p.perElem {
			p.elemAt = p.bytes
		}
		c := b[pos]
		switch c {
		case '+', '-', ':', '_', ',', '#', '(':
			p.skipLine = true
			p.bytes++
			pos++
		case '$', '!', '=':
			n, hl := replyLen(b[pos:])
			if hl < 0 {
				return p.bad(f, q, rs, b, pos, ReasonBadReply)
			}
			if hl == 0 {
				return pos
			}
			total := 1 + hl
			if n >= 0 {
				total += n + 2
			}
			p.bytes += uint64(total)
			if !p.done(f, q, rs) {
				return p.lost(f, q, rs, b, pos+total)
			}
			pos += total
			if pos > len(b) {
				// The value's bytes are skipped without being looked at.
				return pos
			}
		case '*', '~', '>', '%', '|':
			n, hl := replyLen(b[pos:])
			if hl < 0 {
				return p.bad(f, q, rs, b, pos, ReasonBadReply)
			}
			if hl == 0 {
				return pos
			}
			pos += 1 + hl
			p.bytes += uint64(1 + hl)
			if c == '%' || c == '|' {
				n *= 2
			}
			if n <= 0 {
				if !p.done(f, q, rs) {
					return p.lost(f, q, rs, b, pos)
				}
				continue
			}
			if p.depth == 0 {
				switch c {
				case '>':
					p.kind = kindPush
				case '|':
					p.attrTop = true
				}
				if c == '*' && p.perElem {
					e, _ := q.Head()
					p.perElem = e != nil && n == e.NumKeys()
					p.hdr = p.bytes // framing before the first element
				} else {
					p.perElem = false
				}
			}
			if p.depth >= maxReplyDepth {
				return p.bad(f, q, rs, b, pos, ReasonReplyDepth)
			}
			p.stack[p.depth] = int64(n)
			p.depth++
		default:
			return p.bad(f, q, rs, b, pos, ReasonBadReply)
		}
	}
	return pos
}

// replyLen parses the length line of a bulk or aggregate whose type byte is
// h[0]: hl is the length line's size after the type byte, 0 when it is not
// all here yet, -1 when it is malformed (or too long to be one).
func replyLen(h []byte) (n, hl int) {
	n, hl = parseLen(h[1:])
	switch {
	case hl == 0 && len(h) > maxLenLine, hl < 0, hl > 0 && n < -1:
		return 0, -1
	}
	return n, hl
}

// start begins a reply whose first byte is h[0].
func (p *replyParser) start(q *decode.Pending, h []byte) {
	p.inReply = true
	p.kind = kindReply
	p.attrTop = false
	if !p.attr {
		p.bytes = 0
	}
	p.attr = false
	p.given, p.elem = 0, 0
	e, _ := q.Head()
	p.perElem = e != nil && h[0] == '*' && e.Op == "MGET"
}

// done records that a value completed at the current depth; when it
// completes the reply, the reply is attributed. It reports false when the
// reply answers no request the queue knows (the queue was then desynced).
func (p *replyParser) done(f *decode.Flow, q *decode.Pending, rs decode.Sink) bool {
	for p.depth > 0 {
		if p.depth == 1 && p.perElem {
			// Each key gets its element and its share of the framing in
			// one call: one call per key per reply.
			e, _ := q.Head()
			n := p.bytes - p.elemAt + decode.Share(p.hdr, uint64(e.NumKeys()), p.elem)
			// Counted as it is attributed, so the totals never lag the
			// keys (the element may be a value still being skipped).
			kept := q.AttributeKey(f, rs, e, p.elem, n)
			rs.Reply(f, n, kept)
			p.given += n
			p.elem++
		}
		if p.stack[p.depth-1]--; p.stack[p.depth-1] > 0 {
			return true
		}
		p.depth--
	}
	p.inReply = false
	switch {
	case p.attrTop:
		p.attrTop, p.attr = false, true
		return true
	case p.kind == kindPush:
		rs.Reply(f, p.bytes, false)
		return true
	}
	e, anon := q.Head()
	if e == nil {
		if !anon {
			// A reply nobody asked for: the queue is out of step.
			rs.Reply(f, p.bytes, false)
			return false
		}
		q.Pop()
		rs.Reply(f, p.bytes, false)
		return true
	}
	switch e.Op {
	case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "MONITOR":
		// From here on the server pushes messages nobody requested.
		p.dead = true
	}
	if p.perElem {
		if rest := p.bytes - p.given; rest > 0 {
			rs.Reply(f, rest, true)
		}
	} else {
		q.Attribute(f, rs, e, p.bytes)
		rs.Reply(f, p.bytes, true)
	}
	q.Pop()
	return true
}

// lost handles a reply the queue could not pair: pairing stops until the
// next quiet point, the rest of b is reported unpaired.
func (p *replyParser) lost(f *decode.Flow, q *decode.Pending, rs decode.Sink, b []byte, pos int) int {
	q.Desync()
	p.epoch = q.Epoch()
	p.reset()
	if pos < len(b) {
		rs.Reply(f, uint64(len(b)-pos), false)
		return len(b)
	}
	return pos
}

// bad counts a malformed reply and stops pairing until a quiet point.
func (p *replyParser) bad(f *decode.Flow, q *decode.Pending, rs decode.Sink, b []byte, pos int, reason string) int {
	p.s.Error(f, reason)
	return p.lost(f, q, rs, b, pos)
}
