// Package tair decodes the classic Tair binary protocol (the C++
// Taobao/Alibaba data server, default port 5191; not the Redis-compatible
// cloud "Tair", which is RESP). It follows the project's byte-level notes on
// the protocol, restated from the open-source server alibaba/tair 3.2.4 and
// the Taobao Java client 2.3.4.71; "spec §N" in comments refers to their
// sections (header §1, entries §3, requests §4-§6, responses §7, hot-key
// feedback §8).
// No Tair server or client could be run while writing it: it is tested
// against the spec's worked examples and against packets made by the
// independent encoder in tairwire, which was written from the same spec.
//
// Pick-key rules: a key with prefix size P > 0 is a mixed key and is reported
// as its pkey K[0:P] with Prefix set, once per run of consecutive entries
// sharing that pkey, weighted by the number of entries (a prefix_gets of 5
// skeys is one Key of weight 5). Plain keys are reported once each with
// weight 1, duplicates included. The packet-level area is Request.NS; a
// merged entry's 2-byte area is stripped. Java type headers stay in the key
// (the server hashes them); Display gives a readable form.
//
// Client-to-server parsers emit every request, reads and writes.
// Server-to-client parsers frame and validate responses, counting garbage through
// Sink.Error, but emit no requests and no keys: responses and hot-key
// feedback pushes name keys the client already asked for, and counting them
// would double the reads.
//
// Framing and bad input: frames are the 16-byte header (magic 0x6D426454,
// chid, pcode, body_len) plus body_len bytes. A key-bearing body must decode
// to exactly body_len bytes or it reports nothing; the parser then counts
// one error and scans for the next magic. After a gap, a mid-stream join or
// garbage, a candidate frame is accepted only if its pcode is known, its
// body decodes exactly and it is followed by another magic or by the end of
// the data so far; a frame-shaped byte run inside a key or value therefore
// passes only if it ends exactly where its carrier frame ends (no local
// check can tell that case apart) or where a segment happens to end. Frames larger than MaxFrame are never
// buffered: writes are decoded from their front and the rest skipped through
// the Parse skip return; reads that large cannot be legitimate and are
// treated as garbage.
package tair

import (
	"bytes"
	"encoding/binary"

	"github.com/hotsniff/hotsniff/decode"
)

// Default limits.
const (
	// DefaultMaxBody is the server's own limit (spec §1.3): a larger body_len
	// marks garbage.
	DefaultMaxBody = 1 << 26
	// DefaultMaxFrame bounds what a parser asks the stream layer to buffer
	// before decoding. The largest read the server accepts is 1024 keys of
	// 1025 bytes, about 1.09 MB; larger frames are skipped without buffering
	// (writes still yield their key, which sits at the front).
	DefaultMaxFrame = 1 << 21
)

// Decode error reasons reported through Sink.Error (fixed strings, usable as
// metric labels).
const (
	ReasonBadMagic  = "bad_magic"  // header without the magic where one was due
	ReasonBadLength = "bad_length" // body_len negative or above MaxBody
	ReasonBadPcode  = "bad_pcode"  // pcode outside 0..65535
	ReasonBadBody   = "bad_body"   // body did not decode to exactly body_len bytes
	ReasonTooLarge  = "too_large"  // read frame above MaxFrame, skipped unread
	// ReasonResync: bytes were dropped while looking for a frame boundary
	// (after a gap, on a mid-stream join, after garbage); once per episode,
	// as the Redis and memcached decoders count it.
	ReasonResync = "resync"
)

// Reasons lists every reason this package reports, so the metrics can
// export each one at zero from the first scrape.
func Reasons() []string {
	return []string{ReasonBadMagic, ReasonBadLength, ReasonBadPcode, ReasonBadBody, ReasonTooLarge, ReasonResync}
}

// Config holds the framing limits. Zero values take the defaults.
type Config struct {
	// MaxBody is the largest plausible body_len; above it the header is
	// garbage and the parser resynchronises.
	MaxBody int
	// MaxFrame is the largest body buffered for decoding; larger frames are
	// skipped through the Parse skip return.
	MaxFrame int
}

// Decoder makes Tair parsers. It is safe for concurrent use.
type Decoder struct {
	maxBody, maxFrame int
}

// New returns a Decoder with cfg's limits.
func New(cfg Config) *Decoder {
	d := &Decoder{maxBody: cfg.MaxBody, maxFrame: cfg.MaxFrame}
	if d.maxBody <= 0 || d.maxBody > DefaultMaxBody {
		d.maxBody = DefaultMaxBody
	}
	if d.maxFrame <= 0 {
		d.maxFrame = DefaultMaxFrame
	}
	d.maxFrame = min(d.maxFrame, d.maxBody)
	return d
}

// Proto returns decode.ProtoTair.
func (d *Decoder) Proto() decode.Proto { return decode.ProtoTair }

// NewParser returns a request parser for decode.ToServer and a validating,
// silent response parser for decode.ToClient.
func (d *Decoder) NewParser(dir decode.Dir, midStream bool) decode.Parser {
	p := &Parser{maxBody: d.maxBody, maxFrame: d.maxFrame, synced: !midStream, requests: dir == decode.ToServer}
	if p.requests {
		p.table = requestTable
	} else {
		p.table = responseTable
	}
	return p
}

// Parser decodes one direction of one Tair connection. It holds no bytes
// between calls: everything it has not consumed is offered again by the
// stream layer.
type Parser struct {
	table             *table
	maxBody, maxFrame int
	// synced is false after a gap, on a mid-stream join or after garbage:
	// the parser then scans for the magic and accepts a header only if its
	// pcode is known and, where the layout is known, the body decodes to
	// exactly body_len bytes (spec §1.5).
	synced   bool
	counted  bool // ReasonResync reported since synced last went false
	requests bool
	req      decode.Request
	chid     uint32 // channel id of the frame being decoded
}

var magic = []byte{0x6D, 0x42, 0x64, 0x54}

// Gap makes the parser resynchronise at the next frame it can validate.
func (p *Parser) Gap() {
	if p.synced {
		p.synced, p.counted = false, false
	}
}

// Parse implements decode.Parser.
func (p *Parser) Parse(b []byte, f *decode.Flow, s decode.Sink) int {
	off := 0
	for {
		if !p.synced {
			i := bytes.Index(b[off:], magic)
			if i < 0 {
				// Keep up to 3 bytes: they may be the start of a magic.
				keep := max(off, len(b)-(len(magic)-1))
				if keep > off {
					p.dropped(f, s)
				}
				return keep
			}
			if i > 0 {
				p.dropped(f, s)
			}
			off += i
		}
		if len(b)-off < 16 {
			return off
		}
		h := b[off : off+16]
		if binary.BigEndian.Uint32(h) != 0x6D426454 {
			p.lose(f, s, ReasonBadMagic)
			off = p.skipByte(off, f, s)
			continue
		}
		pcode := int32(binary.BigEndian.Uint32(h[8:]))
		bodyLen := int32(binary.BigEndian.Uint32(h[12:]))
		if bodyLen < 0 || int(bodyLen) > p.maxBody {
			p.lose(f, s, ReasonBadLength)
			off = p.skipByte(off, f, s)
			continue
		}
		if pcode < 0 || pcode > 0xFFFF {
			p.lose(f, s, ReasonBadPcode)
			off = p.skipByte(off, f, s)
			continue
		}
		end := off + 16 + int(bodyLen)
		p.chid = binary.BigEndian.Uint32(h[4:])
		if !p.requests && p.synced && f.Pending != nil {
			// Pairing replies: the frame's size is all that is needed, its
			// body is skipped without being buffered or checked.
			p.answer(f, s, uint64(16+int(bodyLen)))
			if end > len(b) {
				return end
			}
			off = end
			continue
		}
		in := p.table.get(pcode)
		switch in.kind {
		case kindUnknown:
			if !p.synced {
				// An unknown pcode is no evidence of a frame boundary.
				off = p.skipByte(off, f, s)
				continue
			}
			p.request(f, s, opUnknown, decode.NoNS, false)
			if end > len(b) {
				return end
			}
			off = end
			continue
		case kindOpaque:
			if !p.synced && end <= len(b) {
				switch confirm(b, end) {
				case needMore:
					return off
				case bad:
					off = p.skipByte(off, f, s)
					continue
				}
			}
			p.synced = true
			p.request(f, s, in.op, decode.NoNS, in.write)
			if end > len(b) {
				return end
			}
			off = end
			continue
		}
		if end > len(b) {
			if int(bodyLen) <= p.maxFrame {
				return off // wait for the whole frame
			}
			// While resynchronising, check before reporting anything.
			var sink decode.Sink = s
			if !p.synced {
				sink = decode.Discard{}
			}
			st := p.large(in, b[off+16:], int(bodyLen), f, sink)
			if st == done && !p.synced {
				p.large(in, b[off+16:], int(bodyLen), f, s)
			}
			switch st {
			case needMore:
				return off
			case bad:
				p.lose(f, s, ReasonBadBody)
				off = p.skipByte(off, f, s)
				continue
			case tooLarge:
				// No legitimate read is this large (with the default
				// MaxFrame), so the length is more likely a lie than not:
				// scanning on for the next frame loses less than trusting it.
				p.lose(f, s, ReasonTooLarge)
				off = p.skipByte(off, f, s)
				continue
			}
			p.synced = true
			return end
		}
		body := b[off+16 : end]
		if !p.synced {
			// A resync candidate must decode exactly and be followed by
			// another magic (or end where the data ends, as requests
			// usually end a segment), so a frame-shaped byte run inside a
			// key or value is not taken for a real frame.
			if !p.frame(in, pcode, body, f, decode.Discard{}) {
				off = p.skipByte(off, f, s)
				continue
			}
			switch confirm(b, end) {
			case needMore:
				return off
			case bad:
				off = p.skipByte(off, f, s)
				continue
			}
			p.synced = true
		}
		if !p.frame(in, pcode, body, f, s) {
			p.lose(f, s, ReasonBadBody)
			off = p.skipByte(off, f, s)
			continue
		}
		off = end
	}
}

// lose drops synchronisation, counting the error only when the parser
// believed it was in sync: bytes scanned while resynchronising are expected
// to be junk.
func (p *Parser) lose(f *decode.Flow, s decode.Sink, reason string) {
	if p.synced {
		s.Error(f, reason)
		p.synced = false
		p.counted = false
	}
}

// skipByte drops the byte at off while resynchronising.
func (p *Parser) skipByte(off int, f *decode.Flow, s decode.Sink) int {
	p.dropped(f, s)
	return off + 1
}

// dropped counts ReasonResync once per episode of lost synchronisation.
func (p *Parser) dropped(f *decode.Flow, s decode.Sink) {
	if !p.counted {
		s.Error(f, ReasonResync)
		p.counted = true
	}
}

func (p *Parser) request(f *decode.Flow, s decode.Sink, op string, ns int32, write bool) {
	if !p.requests {
		return
	}
	p.req = decode.Request{Op: op, NS: ns, Write: write, ID: p.chid}
	s.Request(f, &p.req)
}

// confirm checks what follows a resync candidate ending at end: the next
// frame's magic, or the end of the data (requests usually end a segment).
func confirm(b []byte, end int) status {
	rest := b[end:]
	switch {
	case len(rest) == 0 || bytes.HasPrefix(rest, magic):
		return done
	case len(rest) < len(magic) && bytes.HasPrefix(magic, rest):
		return needMore
	}
	return bad
}

// answer gives a response frame of n bytes to the request with its channel
// id.
func (p *Parser) answer(f *decode.Flow, s decode.Sink, n uint64) {
	rs := s
	q := f.Pending
	q.SawReply(f.TS)
	i := q.Find(p.chid)
	if i < 0 {
		rs.Reply(f, n, false)
		return
	}
	e := q.At(i)
	q.Attribute(f, rs, e, n)
	rs.Reply(f, n, true)
	// Tair answers by channel id, in any order: requests before this one
	// keep waiting, unless so many are older that they were surely lost.
	q.Take(i)
	for ; i > maxOutstanding; i-- {
		q.Pop()
	}
}

// maxOutstanding is how many older requests may wait on a connection when a
// newer one is answered; beyond that the oldest are taken as lost.
const maxOutstanding = 64
