// Package memcache decodes memcached requests in all three protocols the
// server speaks: the classic text protocol (get/gets/gat/gats with any number
// of keys, storage and other commands), the meta protocol (mg, ms, md, ma,
// me, mn; it shares the text framing and can be mixed with text commands on
// one connection) and the binary protocol (24-byte headers, magic 0x80).
//
// Every key of every request is reported, reads and writes alike: a
// `get a b c` is one request with three keys of weight 1, a pipeline of
// binary GETKQ is one request per GETKQ. Only the client-to-server direction
// is decoded; responses carry nothing the hot-key detector needs.
//
// Ops reported in decode.Request.Op come from fixed tables: text and meta
// commands lower-case as on the wire ("get", "gats", "mg", "ms"), binary
// opcodes upper-case ("GET", "GETKQ", "SETQ", "NOOP").
//
// Memory: Parse never leaves more than maxLine (2 KiB) unconsumed. Data
// blocks and binary values are skipped by returning past the end of the
// input; get lines longer than maxLine (memcached serves multi-gets of any
// length) are decoded key by key as they arrive.
//
// Resynchronisation: after a gap, or when a connection is joined mid-stream,
// the parser looks for the next message boundary it can believe:
//   - text/meta: a line start (the first byte handed over after the gap, or
//     the byte after a '\n') whose line is complete, names a known command
//     and parses with that command's grammar; storage commands must also be
//     followed by CRLF after their data block when it is in view;
//   - binary: a 0x80 byte starting a header with a known opcode, datatype 0,
//     the exact extras length that opcode carries, a key length consistent
//     with it and a body length within limits, confirmed by the next header
//     when it is in view.
//
// Limits of the guess: bytes inside a storage command's data block can look
// exactly like a request ("get foo\r\n" stored as a value, or a binary value
// holding a well-formed GETKQ). Joined at such a point the parser reports
// that request, as memcached itself would if it lost track of the block.
// The first token after a gap may also be the tail of a longer token
// ("tar|get a b"); its arguments are still real bytes of the stream, but not
// necessarily keys. Once the mode (text or binary) of a connection is known it
// is kept, which halves the ways a guess can go wrong: memcached fixes the
// protocol of a connection on its first byte.
package memcache

import (
	"github.com/hotsniff/hotsniff/decode"
)

// Limits taken from memcached itself.
const (
	// maxKeyLen is KEY_MAX_LENGTH: longer keys are refused by the server.
	maxKeyLen = 250
	// maxLine is the longest text line memcached buffers before it insists on
	// a newline; only get/gets lines may be longer (large multi-gets), and
	// those are decoded key by key as they arrive.
	maxLine = 2048
	// maxTokens is memcached's MAX_TOKENS for non-get commands.
	maxTokens = 24
	// maxValueLen is the largest item memcached can be configured for
	// (-I 1024m). Longer data lengths are lies.
	maxValueLen = 1 << 30
	// binHeaderLen is the binary request header size.
	binHeaderLen = 24
	// binMagicReq is the first byte of every binary request.
	binMagicReq = 0x80
)

// Decode error reasons passed to decode.Sink.Error. The set is fixed so they
// can be metric labels.
const (
	ReasonBadHeader      = "bad_header"      // binary header that cannot be a request
	ReasonBadLine        = "bad_line"        // text/meta line that does not fit its command's grammar
	ReasonUnknownCommand = "unknown_command" // text line whose first token is no memcached command
	ReasonKeyTooLong     = "key_too_long"    // key longer than 250 bytes
	ReasonLineTooLong    = "line_too_long"   // non-get line without newline within 2048 bytes
	ReasonBadLength      = "bad_length"      // data length that is not a number or beyond 1 GiB
	ReasonBadBase64      = "bad_base64"      // meta key with the b flag that is not base64
	ReasonBadData        = "bad_data"        // data block not terminated by CRLF
	ReasonResync         = "resync"          // bytes dropped while looking for a boundary
)

// Reasons lists every reason this package reports, for metric pre-creation.
func Reasons() []string {
	return []string{ReasonBadHeader, ReasonBadLine, ReasonUnknownCommand, ReasonKeyTooLong,
		ReasonLineTooLong, ReasonBadLength, ReasonBadBase64, ReasonBadData, ReasonResync, ReasonBadReply}
}

// Decoder makes memcached request parsers.
type Decoder struct{}

// New returns the memcached decoder.
func New() *Decoder { return &Decoder{} }

// Proto reports decode.ProtoMemcache.
func (*Decoder) Proto() decode.Proto { return decode.ProtoMemcache }

// NewParser returns a request parser for ToServer and a reply parser for
// ToClient (hot keys are counted on requests, hits or misses; replies give
// the bytes each key costs, when the stream layer pairs them).
func (*Decoder) NewParser(dir decode.Dir, midStream bool) decode.Parser {
	if dir != decode.ToServer {
		return &replyParser{}
	}
	return NewParser(midStream)
}

// NewParser returns a request parser for one connection. A parser joining
// mid-stream starts by resynchronising.
func NewParser(midStream bool) *Parser {
	p := &Parser{synced: !midStream, lineStart: true}
	p.req.NS = decode.NoNS
	return p
}

type mode uint8

const (
	modeUnknown mode = iota // first byte not seen yet
	modeText                // text and meta
	modeBinary
)

// needMore is returned by a step when it cannot decide without more bytes.
const needMore = -1

// Parser decodes the requests of one client connection. It is not safe for
// concurrent use; the stream layer owns one per connection.
type Parser struct {
	mode mode
	// synced is false while looking for a message boundary.
	synced bool
	// dropped records that the current resync episode has already been
	// counted, so one lost boundary is one error whatever it costs in bytes.
	dropped bool
	// inGet is set while the keys of a long get line are still arriving.
	inGet bool
	// crlf is set when the CRLF ending a data block is the next thing due:
	// checking it apart from the skipped block reports a bad terminator the
	// same way however the block was split.
	crlf bool
	// lineStart says the first byte of the next Parse call starts a line (it
	// follows a '\n' or a gap), so resync may try it as a text request.
	lineStart bool
	req       decode.Request
	// tok holds the token spans of the current text line.
	tok [maxTokens]span
	// key receives base64-decoded meta keys; keys are at most 250 bytes
	// encoded, so they always fit decoded.
	key [maxKeyLen]byte
}

type span struct{ s, e int }

// Parse implements decode.Parser.
func (p *Parser) Parse(b []byte, f *decode.Flow, s decode.Sink) int {
	pos := 0
	for pos < len(b) {
		rest := b[pos:]
		var n int
		switch {
		case !p.synced:
			drop, ok := p.resync(rest)
			if drop > 0 {
				p.lineStart = rest[drop-1] == '\n'
				if !p.dropped {
					p.dropped = true
					s.Error(f, ReasonResync)
				}
			}
			pos += drop
			if !ok {
				return pos
			}
			p.synced, p.dropped = true, false
			continue
		case p.crlf:
			if len(rest) < 2 {
				return pos
			}
			if rest[0] != '\r' || rest[1] != '\n' {
				// memcached answers "bad data chunk" and reads on after the
				// two bytes; so do we.
				s.Error(f, ReasonBadData)
			}
			p.crlf = false
			n = 2
		case p.inGet:
			n = p.getCont(rest, f, s)
		case p.mode == modeBinary:
			n = p.binary(rest, f, s)
		case p.mode == modeText:
			n = p.text(rest, f, s)
		default:
			// memcached picks the protocol of a connection from its first
			// byte, and so do we.
			if rest[0] == binMagicReq {
				p.mode = modeBinary
			} else {
				p.mode = modeText
			}
			continue
		}
		if n == needMore {
			return pos
		}
		pos += n
		if pos > len(b) {
			return pos // skip the rest of a data block without buffering it
		}
	}
	return pos
}

// Gap implements decode.Parser: bytes were lost, so the parser no longer
// knows where the next message starts. The protocol mode is kept.
func (p *Parser) Gap() {
	p.synced = false
	p.dropped = false
	p.inGet = false
	p.crlf = false
	// Segments after a gap usually start with a request: try that first.
	p.lineStart = true
}

// lostSync is called when the parser finds itself out of step in the middle
// of a stream.
func (p *Parser) lostSync() {
	p.synced = false
	p.inGet = false
	p.crlf = false
	p.lineStart = false
}

type verdict uint8

const (
	reject verdict = iota
	accept
	wait
)

// resync looks for the first believable message boundary in b. It returns
// how many bytes precede it and whether one was found; when not found, the
// bytes from the returned offset on must be offered again with more data.
func (p *Parser) resync(b []byte) (int, bool) {
	for i := 0; i < len(b); i++ {
		if b[i] == binMagicReq && p.mode != modeText {
			switch binCandidate(b[i:]) {
			case accept:
				p.mode = modeBinary
				return i, true
			case wait:
				return i, false
			}
		}
		if p.mode != modeBinary && (i == 0 && p.lineStart || i > 0 && b[i-1] == '\n') {
			switch p.textCandidate(b[i:]) {
			case accept:
				p.mode = modeText
				return i, true
			case wait:
				return i, false
			}
		}
	}
	return len(b), false
}
