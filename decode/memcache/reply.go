package memcache

import (
	"bytes"
	"encoding/binary"

	"github.com/hotsniff/hotsniff/decode"
)

// Reply error reasons (Sink.Error).
const (
	ReasonBadReply = "bad_reply" // a reply line or header memcached does not send
)

// binMagicRes is the first byte of every binary response.
const binMagicRes = 0x81

// replyParser reads the server-to-client direction and gives each reply's
// bytes to the keys of the request it answers:
//   - text: each "VALUE key flags bytes [cas]" block (line, data and CRLF)
//     goes to the key it names; the closing "END\r\n" is split evenly among
//     the keys of the get (a miss gets only its share of END).
//   - meta: a VA/EN/HD reply of mg goes to the mg's key; MN closes the
//     quiet (q) requests before it, which were misses.
//   - binary: a response pairs with the request of the same opaque; quiet
//     requests before it got no response (misses). The whole response
//     (24-byte header, extras, key, value) goes to the request's key.
//
// Values are skipped without being looked at (returning past len(b)).
type replyParser struct {
	s     decode.Sink
	epoch uint32
	mode  mode
	inGet bool   // inside VALUE blocks, before END
	bytes uint64 // bytes of the reply in progress (text gets: the blocks)
	cur   int    // next key of the get that a VALUE block may answer
	early uint64 // shares of END given out with VALUE blocks
}

// endLen is the size of the "END\r\n" that closes a get: each key of the
// get gets an even share of it, with its VALUE block if it was a hit.
const endLen = 5

// value gives a VALUE block of n bytes to the key it names, the next key of
// the get at the head of the queue with those bytes: memcached answers the
// hits of a multi-get in request order. Keys passed over were misses; they
// get their share of END now. It reports false when the get has no such
// key: replies and requests are out of step.
func (p *replyParser) value(f *decode.Flow, q *decode.Pending, rs decode.Sink, key []byte, n uint64) (shares uint64, ok bool) {
	e, anon := q.Head()
	if e == nil {
		return 0, anon // a get that was not kept: its blocks go to no key
	}
	nk := e.NumKeys()
	for i := p.cur; i < nk; i++ {
		k, ok := q.Key(e, i)
		if ok && string(k.Bytes) != string(key) {
			continue
		}
		for j := p.cur; j <= i; j++ {
			sh := decode.Share(endLen, uint64(nk), j)
			if j == i {
				q.AttributeKey(f, rs, e, j, n+sh)
			} else {
				q.AttributeKey(f, rs, e, j, sh)
			}
			shares += sh
		}
		p.cur = i + 1
		return shares, true
	}
	return 0, false
}

func (p *replyParser) Gap() { p.inGet, p.bytes, p.cur, p.early = false, 0, 0, 0 }

// Parse implements decode.Parser for replies.
func (p *replyParser) Parse(b []byte, f *decode.Flow, s decode.Sink) int {
	p.s = s
	q, rs, fresh := decode.StartReplies(f, s, &p.epoch)
	if q == nil {
		return len(b)
	}
	if fresh {
		p.Gap()
	}
	if !q.Synced() {
		rs.Reply(f, uint64(len(b)), false)
		return len(b)
	}
	pos := 0
	for pos < len(b) {
		if p.mode == modeUnknown {
			p.mode = modeText
			if b[pos] == binMagicRes {
				p.mode = modeBinary
			}
		}
		var n int
		if p.mode == modeBinary {
			n = p.binary(b[pos:], f, q, rs)
		} else {
			n = p.text(b[pos:], f, q, rs)
		}
		switch {
		case n == needMore:
			return pos
		case n < 0:
			p.s.Error(f, ReasonBadReply)
			q.Desync()
			p.epoch = q.Epoch()
			p.Gap()
			rs.Reply(f, uint64(len(b)-pos), false)
			return len(b)
		}
		pos += n
	}
	return pos
}

const badReply = -2

// binary reads one binary response.
func (p *replyParser) binary(b []byte, f *decode.Flow, q *decode.Pending, rs decode.Sink) int {
	if len(b) < binHeaderLen {
		return needMore
	}
	if b[0] != binMagicRes {
		return badReply
	}
	bodyLen := int(binary.BigEndian.Uint32(b[8:12]))
	if bodyLen > maxValueLen+binHeaderLen+maxKeyLen {
		return badReply
	}
	total := binHeaderLen + bodyLen
	opaque := binary.BigEndian.Uint32(b[12:16])
	i := q.Find(opaque)
	if i < 0 {
		rs.Reply(f, uint64(total), false)
		return total
	}
	for range i {
		q.Pop() // quiet requests the server did not answer
	}
	e, _ := q.Head()
	q.Attribute(f, rs, e, uint64(total))
	rs.Reply(f, uint64(total), true)
	q.Pop()
	return total
}

// text reads one text or meta reply line, with its data block.
func (p *replyParser) text(b []byte, f *decode.Flow, q *decode.Pending, rs decode.Sink) int {
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		if len(b) >= maxLine {
			return badReply
		}
		return needMore
	}
	if nl >= maxLine {
		return badReply
	}
	line := trimCR(b[:nl])
	n := nl + 1
	word, rest := cut(line)
	switch string(word) {
	case "VALUE":
		// VALUE <key> <flags> <bytes> [<cas>]
		key, r := cut(rest)
		_, r = cut(r)
		sz, _ := cut(r)
		size, ok := parseLen(sz)
		if !ok || len(key) == 0 {
			return badReply
		}
		total := uint64(n) + uint64(size) + 2
		if !p.inGet {
			skipQuiet(q, false)
			p.inGet, p.cur = true, 0
		}
		shares, ok := p.value(f, q, rs, key, total)
		if !ok {
			return badReply
		}
		// END's shares given with the block are counted with it.
		e, _ := q.Head()
		rs.Reply(f, total+shares, e != nil)
		p.early += shares
		return n + size + 2
	case "END":
		// Ends a get (its misses get their share of the line) or a stats
		// listing.
		if !p.inGet {
			skipQuiet(q, false)
		}
		e, anon := q.Head()
		paired := e != nil
		if paired {
			for i := p.cur; i < e.NumKeys(); i++ {
				q.AttributeKey(f, rs, e, i, decode.Share(uint64(n), uint64(e.NumKeys()), i))
			}
		}
		if paired || anon {
			q.Pop()
		}
		rs.Reply(f, p.bytes+uint64(n)-min(p.early, uint64(n)), paired)
		p.inGet, p.bytes, p.cur, p.early = false, 0, 0, 0 // bytes: STAT lines
		return n
	case "STAT", "ITEM":
		p.bytes += uint64(n) // stats and cachedump lines until END
		return n
	case "VA":
		sz, flags := cut(rest)
		size, ok := parseLen(sz)
		if !ok {
			return badReply
		}
		if k := metaKeyFlag(flags); k != nil {
			// The reply names its key: quiet gets before the one it
			// answers were misses.
			skipQuietUntil(q, k)
		}
		p.pair(f, q, rs, uint64(n)+uint64(size)+2, true)
		return n + size + 2
	case "MN":
		// Quiet requests before the mn got no reply: misses.
		for {
			e, anon := q.Head()
			if e == nil && !anon {
				break
			}
			mn := e != nil && e.Op == "mn"
			q.Pop()
			if mn {
				break
			}
		}
		rs.Reply(f, uint64(n), false)
		return n
	}
	if len(word) == 0 {
		return badReply
	}
	p.pair(f, q, rs, uint64(n), false)
	return n
}

// pair gives a one-message reply of n bytes to the request it answers.
func (p *replyParser) pair(f *decode.Flow, q *decode.Pending, rs decode.Sink, n uint64, hit bool) {
	skipQuiet(q, hit)
	e, anon := q.Head()
	if e != nil {
		q.Attribute(f, rs, e, n)
	}
	if e != nil || anon {
		q.Pop()
	}
	rs.Reply(f, n, e != nil)
}

// skipQuiet pops quiet requests that cannot be what a reply answers: quiet
// writes are answered only on failure, quiet mg only on a hit.
func skipQuiet(q *decode.Pending, hit bool) {
	for {
		e, _ := q.Head()
		if e == nil || !e.Quiet || (hit && e.Op == "mg") {
			return
		}
		q.Pop()
	}
}

// cut splits off the first space-separated token of b.
func cut(b []byte) (tok, rest []byte) {
	if i := bytes.IndexByte(b, ' '); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// metaKeyFlag returns the key a meta reply echoes (its k flag), or nil. A
// base64 key (b flag) is compared as sent, so it is left alone: nil.
func metaKeyFlag(flags []byte) []byte {
	var key []byte
	for len(flags) > 0 {
		var t []byte
		t, flags = cut(flags)
		if len(t) == 0 {
			continue
		}
		switch t[0] {
		case 'k':
			key = t[1:]
		case 'b':
			return nil
		}
	}
	return key
}

// skipQuietUntil pops quiet requests whose first key is not key: a reply
// naming key answers the first queued request for it.
func skipQuietUntil(q *decode.Pending, key []byte) {
	for {
		e, _ := q.Head()
		if e == nil || !e.Quiet {
			return
		}
		if e.NumKeys() == 0 {
			return
		}
		if k, ok := q.Key(e, 0); !ok || string(k.Bytes) == string(key) {
			return
		}
		q.Pop()
	}
}
