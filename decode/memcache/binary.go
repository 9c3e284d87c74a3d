package memcache

import (
	"encoding/binary"

	"github.com/hotsniff/hotsniff/decode"
)

// Binary request header (memcached protocol_binary.h), big-endian:
//
//	0 magic 0x80 | 1 opcode | 2-3 key length | 4 extras length | 5 data type (0)
//	6-7 vbucket  | 8-11 total body length | 12-15 opaque | 16-23 cas
//
// The body is extras, then key, then value.

// binKind says what a binary opcode means for hot keys.
type binKind uint8

const (
	binUnknown binKind = iota // not a request opcode memcached implements
	binRead                   // key reported as a read
	binWrite                  // key reported as a write
	binOther                  // counted, no key (its key field, if any, is no cache key)
)

// keyRule says whether an opcode carries a key.
type keyRule uint8

const (
	keyNone keyRule = iota
	keyRequired
	keyOptional
)

// binOp describes one opcode: the extras length it always carries (-1: any,
// -2: 0 or 4 as FLUSH), its key rule and whether a value may follow.
type binOp struct {
	name   string
	kind   binKind
	extras int8
	key    keyRule
	value  bool
}

// binOps is indexed by opcode. Extras lengths are the fixed ones memcached
// checks, which makes them a strong plausibility test when resynchronising.
var binOps = [256]binOp{
	0x00: {"GET", binRead, 0, keyRequired, false},
	0x01: {"SET", binWrite, 8, keyRequired, true},
	0x02: {"ADD", binWrite, 8, keyRequired, true},
	0x03: {"REPLACE", binWrite, 8, keyRequired, true},
	0x04: {"DELETE", binWrite, 0, keyRequired, false},
	0x05: {"INCREMENT", binWrite, 20, keyRequired, false},
	0x06: {"DECREMENT", binWrite, 20, keyRequired, false},
	0x07: {"QUIT", binOther, 0, keyNone, false},
	0x08: {"FLUSH", binOther, -2, keyNone, false},
	0x09: {"GETQ", binRead, 0, keyRequired, false},
	0x0a: {"NOOP", binOther, 0, keyNone, false},
	0x0b: {"VERSION", binOther, 0, keyNone, false},
	0x0c: {"GETK", binRead, 0, keyRequired, false},
	0x0d: {"GETKQ", binRead, 0, keyRequired, false},
	0x0e: {"APPEND", binWrite, 0, keyRequired, true},
	0x0f: {"PREPEND", binWrite, 0, keyRequired, true},
	0x10: {"STAT", binOther, 0, keyOptional, false},
	0x11: {"SETQ", binWrite, 8, keyRequired, true},
	0x12: {"ADDQ", binWrite, 8, keyRequired, true},
	0x13: {"REPLACEQ", binWrite, 8, keyRequired, true},
	0x14: {"DELETEQ", binWrite, 0, keyRequired, false},
	0x15: {"INCREMENTQ", binWrite, 20, keyRequired, false},
	0x16: {"DECREMENTQ", binWrite, 20, keyRequired, false},
	0x17: {"QUITQ", binOther, 0, keyNone, false},
	0x18: {"FLUSHQ", binOther, -2, keyNone, false},
	0x19: {"APPENDQ", binWrite, 0, keyRequired, true},
	0x1a: {"PREPENDQ", binWrite, 0, keyRequired, true},
	0x1b: {"VERBOSITY", binOther, 4, keyNone, false},
	0x1c: {"TOUCH", binWrite, 4, keyRequired, false},
	0x1d: {"GAT", binRead, 4, keyRequired, false},
	0x1e: {"GATQ", binRead, 4, keyRequired, false},
	0x20: {"SASL_LIST_MECHS", binOther, 0, keyNone, false},
	0x21: {"SASL_AUTH", binOther, -1, keyOptional, true},
	0x22: {"SASL_STEP", binOther, -1, keyOptional, true},
	0x23: {"GATK", binRead, 4, keyRequired, false},
	0x24: {"GATKQ", binRead, 4, keyRequired, false},
}

// binHeader checks that h (at least binHeaderLen bytes) is a plausible
// request header and returns its opcode entry, key length, extras length
// and body length.
func binHeader(h []byte) (op *binOp, keyLen, extLen, bodyLen int, ok bool) {
	if h[0] != binMagicReq || h[5] != 0 {
		return nil, 0, 0, 0, false
	}
	op = &binOps[h[1]]
	if op.kind == binUnknown {
		return nil, 0, 0, 0, false
	}
	keyLen = int(binary.BigEndian.Uint16(h[2:]))
	extLen = int(h[4])
	body := binary.BigEndian.Uint32(h[8:])
	switch {
	case op.extras >= 0 && extLen != int(op.extras):
		return nil, 0, 0, 0, false
	case op.extras == -2 && extLen != 0 && extLen != 4:
		return nil, 0, 0, 0, false
	}
	switch op.key {
	case keyNone:
		if keyLen != 0 {
			return nil, 0, 0, 0, false
		}
	case keyRequired:
		if keyLen == 0 {
			return nil, 0, 0, 0, false
		}
	}
	if keyLen > maxKeyLen || body > maxValueLen+binHeaderLen+maxKeyLen {
		return nil, 0, 0, 0, false
	}
	bodyLen = int(body)
	if bodyLen < keyLen+extLen || (!op.value && bodyLen != keyLen+extLen) {
		return nil, 0, 0, 0, false
	}
	return op, keyLen, extLen, bodyLen, true
}

// binary decodes one binary request from b, skipping its value.
func (p *Parser) binary(b []byte, f *decode.Flow, s decode.Sink) int {
	if len(b) < binHeaderLen {
		return needMore
	}
	op, keyLen, extLen, bodyLen, ok := binHeader(b)
	if !ok {
		s.Error(f, ReasonBadHeader)
		p.lostSync()
		return 0
	}
	keyEnd := binHeaderLen + extLen + keyLen
	hasKey := op.kind != binOther && keyLen > 0
	if hasKey && len(b) < keyEnd {
		return needMore // at most 24+20+250 bytes: bounded
	}
	p.req.Op, p.req.Write = op.name, op.kind == binWrite
	// Replies echo the opaque; quiet opcodes (names ending in Q) are not
	// answered on a miss (reads) or on success (writes).
	p.req.ID = binary.BigEndian.Uint32(b[12:16])
	p.req.Quiet = op.name[len(op.name)-1] == 'Q'
	s.Request(f, &p.req)
	p.req.ID, p.req.Quiet = 0, false
	if hasKey {
		s.Key(f, &p.req, decode.Key{Bytes: b[binHeaderLen+extLen : keyEnd], Weight: 1})
	}
	return binHeaderLen + bodyLen // may exceed len(b): the caller skips the value
}

// binCandidate decides whether b starts at a believable binary request
// while resynchronising.
func binCandidate(b []byte) verdict {
	if len(b) < binHeaderLen {
		if len(b) > 1 && binOps[b[1]].kind == binUnknown {
			return reject
		}
		return wait
	}
	op, _, _, bodyLen, ok := binHeader(b)
	if !ok {
		return reject
	}
	total := binHeaderLen + bodyLen
	if total > len(b) {
		if !op.value {
			// Small (at most 24+255+250 bytes): wait to see it whole.
			return wait
		}
		// A value runs past what we hold: the header alone must do.
		return accept
	}
	next := b[total:]
	switch {
	case len(next) == 0:
		return accept
	case len(next) >= binHeaderLen:
		if _, _, _, _, ok := binHeader(next); ok {
			return accept
		}
		return reject
	case next[0] != binMagicReq:
		return reject
	case len(next) > 1 && binOps[next[1]].kind == binUnknown:
		return reject
	}
	return accept
}
