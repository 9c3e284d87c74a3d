package tair

import (
	"bytes"
	"encoding/binary"

	"github.com/hotsniff/hotsniff/decode"
)

// Limits the server itself enforces (spec §1.3, §3.3, §4.2, §4.3).
const (
	entryHeader  = 40        // data_entry bytes before the payload
	maxEntrySize = 1_000_000 // TAIR_MAX_DATA_SIZE
	maxPrefix    = 1024      // TAIR_MAX_KEY_SIZE bounds P
	maxKeyCount  = 1024      // TAIR_MAX_KEY_COUNT
	maxSlice     = 8192      // simple-get slice length
	maxSimpleCnt = 1024      // simple-get prime/sub counts are < 1024
)

func be16(b []byte) int { return int(binary.BigEndian.Uint16(b)) }
func be32(b []byte) int { return int(binary.BigEndian.Uint32(b)) }

// entryHead checks the 40-byte header of a data_entry at b and returns the
// payload length n (on the wire, merged area included), prefix size and
// merged flag. It needs only the header, so large values can be checked
// without being buffered.
func entryHead(b []byte) (n, prefix int, merged, ok bool) {
	if len(b) < entryHeader {
		return 0, 0, false, false
	}
	if b[0] > 1 {
		return 0, 0, false, false
	}
	// The per-entry area is an i32 the server range-checks (spec §3.1).
	if area := binary.BigEndian.Uint32(b[1:]); area > 0xFFFF {
		return 0, 0, false, false
	}
	ms := binary.BigEndian.Uint32(b[36:])
	n, prefix = int(ms&0x3FFFFF), int(ms>>22)
	merged = b[0] == 1
	room := n
	if merged {
		room -= 2
	}
	if n > maxEntrySize || prefix > maxPrefix || room < 0 || prefix > room {
		return 0, 0, false, false
	}
	return n, prefix, merged, true
}

// entry decodes one data_entry at b. key aliases b, with a merged area
// stripped; size is the encoded size.
func entry(b []byte) (key []byte, prefix, size int, ok bool) {
	n, prefix, merged, ok := entryHead(b)
	if !ok || len(b)-entryHeader < n {
		return nil, 0, 0, false
	}
	key = b[entryHeader : entryHeader+n]
	if merged {
		key = key[2:]
	}
	return key, prefix, entryHeader + n, true
}

// skipEntries walks count entries from b[pos:] and returns the position
// after them, or -1.
func skipEntries(b []byte, pos, count int) int {
	for range count {
		_, _, sz, ok := entry(b[pos:])
		if !ok {
			return -1
		}
		pos += sz
	}
	return pos
}

// skipString walks a Tair string (u32 length including the NUL, then bytes).
func skipString(b []byte, pos int) int {
	if len(b)-pos < 4 {
		return -1
	}
	n := be32(b[pos:])
	pos += 4
	if n > len(b)-pos {
		return -1
	}
	return pos + n
}

// frame validates a complete body against its pcode's layout and, when it
// is well formed, reports it. It reports nothing for a body that does not
// decode to exactly its length: a phantom key is worse than a lost one.
func (p *Parser) frame(in pinfo, pcode int32, body []byte, f *decode.Flow, s decode.Sink) bool {
	switch in.kind {
	case kindGetFamily:
		return p.getFamily(in, body, f, s)
	case kindGetExpire:
		return p.getExpire(in, body, f, s)
	case kindSimpleGet:
		return p.simpleGet(in, body, f, s)
	case kindGetRange:
		return p.getRange(in, body, f, s)
	case kindPut:
		return p.put(in, body, len(body), f, s) == done
	case kindLock:
		return p.lock(in, body, len(body), f, s) == done
	case kindPrefixPuts:
		return p.prefixPuts(in, body, f, s)
	case kindIncDec:
		return p.single(in, body, 15, 1, f, s)
	case kindKeyed:
		return p.single(in, body, 7, 1, f, s)
	case kindFeedback:
		return feedbackOK(body)
	case kindRespReturn:
		return len(body) >= 8 && skipString(body, 8) == len(body)
	case kindRespGet:
		return respGetOK(body)
	case kindRespPrefixGets:
		return respPrefixGetsOK(body)
	case kindRespMReturn:
		return respMReturnOK(body)
	case kindFlowControl:
		return len(body) == 8
	}
	return false
}

// getFamily handles pcodes 2, 3, 20-23, 25, 29, 31-34 (spec §4.2).
func (p *Parser) getFamily(in pinfo, body []byte, f *decode.Flow, s decode.Sink) bool {
	if len(body) < 7 {
		return false
	}
	count := be32(body[3:])
	// Each entry takes at least 40 bytes: reject lying counts before walking.
	if count > maxKeyCount || count*entryHeader > len(body)-7 {
		return false
	}
	end := skipEntries(body, 7, count)
	if end < 0 {
		return false
	}
	switch in.trail {
	case trailPacketID:
		if body[0] != 0 {
			end += 4
		}
	case trailGroup:
		if end = skipString(body, end); end >= 0 {
			end += 4
		}
	}
	if end != len(body) {
		return false
	}
	op := in.op
	if count > 0 {
		_, prefix, _, _ := entry(body[7:])
		switch {
		case op == "get" && count > 1:
			op = opMGet
		case op == "get" && prefix > 0:
			op = opPrefixGet
		case op == "get_hidden" && count == 1 && prefix > 0:
			op = opPrefixGetHidden
		}
	}
	p.request(f, s, op, int32(be16(body[1:])), in.write)
	p.keys(body[7:], count, f, s)
	return true
}

// getExpire handles the Java-only 1600 / 1702 layout (spec §4.4).
func (p *Parser) getExpire(in pinfo, body []byte, f *decode.Flow, s decode.Sink) bool {
	if len(body) < 11 {
		return false
	}
	count := be32(body[7:])
	if count > maxKeyCount || count*entryHeader > len(body)-11 {
		return false
	}
	if skipEntries(body, 11, count) != len(body) {
		return false
	}
	p.request(f, s, in.op, int32(be16(body[1:])), in.write)
	p.keys(body[11:], count, f, s)
	return true
}

// keys reports count validated entries from b: plain keys one by one, mixed
// keys as their pkey, one Key per run of entries sharing it.
func (p *Parser) keys(b []byte, count int, f *decode.Flow, s decode.Sink) {
	var run []byte
	var weight uint32
	pos := 0
	for range count {
		key, prefix, sz, _ := entry(b[pos:])
		pos += sz
		if prefix > 0 {
			pk := key[:prefix]
			if weight > 0 && bytes.Equal(pk, run) {
				weight++
				continue
			}
			p.flush(run, weight, f, s)
			run, weight = pk, 1
			continue
		}
		p.flush(run, weight, f, s)
		weight = 0
		if len(key) > 0 {
			s.Key(f, &p.req, decode.Key{Bytes: key, Weight: 1})
		}
	}
	p.flush(run, weight, f, s)
}

func (p *Parser) flush(pkey []byte, weight uint32, f *decode.Flow, s decode.Sink) {
	if weight > 0 {
		s.Key(f, &p.req, decode.Key{Bytes: pkey, Weight: weight, Prefix: true})
	}
}

// pick reports one key by the pick-key rule.
func (p *Parser) pick(key []byte, prefix int, weight uint32, f *decode.Flow, s decode.Sink) {
	switch {
	case prefix > 0:
		s.Key(f, &p.req, decode.Key{Bytes: key[:prefix], Weight: weight, Prefix: true})
	case len(key) > 0:
		s.Key(f, &p.req, decode.Key{Bytes: key, Weight: weight})
	}
}

// simpleGet handles pcode 36 (spec §4.3): each prime with n subs is the
// pkey of n stored keys prime‖sub, so it weighs n.
func (p *Parser) simpleGet(in pinfo, body []byte, f *decode.Flow, s decode.Sink) bool {
	if len(body) < 12 {
		return false
	}
	primes := int(int16(be16(body[10:])))
	if primes < 0 || primes >= maxSimpleCnt {
		return false
	}
	// Validation pass.
	pos := 12
	for range primes {
		if pos = skipSlice(body, pos); pos < 0 || len(body)-pos < 2 {
			return false
		}
		subs := int(int16(be16(body[pos:])))
		pos += 2
		if subs < 0 || subs >= maxSimpleCnt || subs*2 > len(body)-pos {
			return false
		}
		for range subs {
			if pos = skipSlice(body, pos); pos < 0 {
				return false
			}
		}
	}
	if pos != len(body) {
		return false
	}
	p.request(f, s, in.op, int32(be16(body[8:])), in.write)
	pos = 12
	for range primes {
		n := be16(body[pos:])
		prime := body[pos+2 : pos+2+n]
		pos += 2 + n
		subs := be16(body[pos:])
		pos += 2
		for range subs {
			pos += 2 + be16(body[pos:])
		}
		// A prime without subs is refused by the server: it reads nothing.
		if subs > 0 && n > 0 {
			s.Key(f, &p.req, decode.Key{Bytes: prime, Weight: uint32(subs), Prefix: true})
		}
	}
	return true
}

func skipSlice(b []byte, pos int) int {
	if len(b)-pos < 2 {
		return -1
	}
	n := int(int16(be16(b[pos:])))
	pos += 2
	if n < 0 || n > maxSlice || n > len(b)-pos {
		return -1
	}
	return pos + n
}

// getRange handles pcode 18 (spec §4.4): the range's start bound names the
// pkey (or key) it reads, as the server's own pick_key does; cmd 7 and 8
// delete the range.
func (p *Parser) getRange(in pinfo, body []byte, f *decode.Flow, s decode.Sink) bool {
	if len(body) < 13 {
		return false
	}
	start, prefix, sz, ok := entry(body[13:])
	if !ok {
		return false
	}
	_, _, sz2, ok := entry(body[13+sz:])
	if !ok || 13+sz+sz2 != len(body) {
		return false
	}
	op, write := in.op, in.write
	if cmd := be16(body[1:]); cmd == 7 || cmd == 8 {
		op, write = opDelRange, true
	}
	p.request(f, s, op, int32(be16(body[3:])), write)
	p.pick(start, prefix, 1, f, s)
	return true
}

// single handles layouts "fixed fields (area at offset 1), one key entry":
// incdec (15 fixed bytes) and expire / uniq_remove (7).
func (p *Parser) single(in pinfo, body []byte, fixed int, weight uint32, f *decode.Flow, s decode.Sink) bool {
	if len(body) < fixed {
		return false
	}
	key, prefix, sz, ok := entry(body[fixed:])
	if !ok || fixed+sz != len(body) {
		return false
	}
	p.request(f, s, in.op, int32(be16(body[1:])), in.write)
	p.pick(key, prefix, weight, f, s)
	return true
}

// status is the outcome of decoding a frame from a possibly partial body.
type status uint8

const (
	done     status = iota // reported; the frame may be skipped
	needMore               // the part holding the key is not there yet
	bad                    // not a valid frame
	tooLarge               // cannot be decoded without buffering it whole
)

// large handles a frame whose body exceeds MaxFrame and is not all in part.
// Writes whose key comes first are decoded from their front; reads are not
// (the server would not accept a read that large anyway).
func (p *Parser) large(in pinfo, part []byte, bodyLen int, f *decode.Flow, s decode.Sink) status {
	if !p.requests {
		return done // a large response (big values): nothing to check cheaply
	}
	switch in.kind {
	case kindPut:
		return p.put(in, part, bodyLen, f, s)
	case kindLock:
		return p.lock(in, part, bodyLen, f, s)
	case kindPrefixPuts:
		return p.prefixPutsFront(in, part, bodyLen, f, s)
	}
	return tooLarge
}

// put decodes pcode 1 from the front of its body: fixed fields, the key,
// and the value's header, whose length must complete body_len exactly.
func (p *Parser) put(in pinfo, part []byte, bodyLen int, f *decode.Flow, s decode.Sink) status {
	const fixed = 9 // server_flag, area, version, expire
	return p.keyValue(in, part, fixed, bodyLen, 1, f, s)
}

// lock decodes pcode 14: area, lock_type, key [, value for put-and-lock].
func (p *Parser) lock(in pinfo, part []byte, bodyLen int, f *decode.Flow, s decode.Sink) status {
	if len(part) < 6 {
		return needMore
	}
	lt := be32(part[2:])
	if lt < 1 || lt > 4 {
		return bad
	}
	if lt == 4 {
		return p.keyValue(in, part, 6, bodyLen, 0, f, s)
	}
	key, prefix, sz, ok := entry(part[6:])
	if !ok {
		if len(part) < bodyLen {
			return needMore
		}
		return bad
	}
	if 6+sz != bodyLen {
		return bad
	}
	op, write := in.op, in.write
	if lt == 1 {
		op, write = opLockStatus, false
	}
	p.request(f, s, op, int32(be16(part)), write)
	p.pick(key, prefix, 1, f, s)
	return done
}

// keyValue decodes "fixed fields, key entry, value entry" from the front of
// a body, checking the sizes add up to bodyLen. areaAt is the area offset.
func (p *Parser) keyValue(in pinfo, part []byte, fixed, bodyLen, areaAt int, f *decode.Flow, s decode.Sink) status {
	if len(part) < fixed+entryHeader {
		if len(part) >= bodyLen {
			return bad
		}
		return needMore
	}
	kn, _, _, ok := entryHead(part[fixed:])
	if !ok || fixed+2*entryHeader+kn > bodyLen {
		return bad
	}
	vpos := fixed + entryHeader + kn
	if len(part) < vpos+entryHeader {
		return needMore
	}
	key, prefix, _, _ := entry(part[fixed:])
	vn, _, _, ok := entryHead(part[vpos:])
	if !ok || vpos+entryHeader+vn != bodyLen {
		return bad
	}
	p.request(f, s, in.op, int32(be16(part[areaAt:])), in.write)
	p.pick(key, prefix, 1, f, s)
	return done
}

// prefixPuts decodes pcode 24 whole: server_flag, area, pkey entry, count,
// count (key, value) pairs [, packet_id]. Its keys are reported like a
// get-family's, so a pkey matches the one its reads report.
func (p *Parser) prefixPuts(in pinfo, body []byte, f *decode.Flow, s decode.Sink) bool {
	if len(body) < 3 {
		return false
	}
	_, _, psz, ok := entry(body[3:])
	if !ok || len(body)-3-psz < 4 {
		return false
	}
	pos := 3 + psz
	count := be32(body[pos:])
	pos += 4
	if count > maxKeyCount || count*2*entryHeader > len(body)-pos {
		return false
	}
	first := pos
	if pos = skipEntries(body, pos, 2*count); pos < 0 {
		return false
	}
	if body[0] != 0 {
		pos += 4
	}
	if pos != len(body) {
		return false
	}
	p.request(f, s, in.op, int32(be16(body[1:])), in.write)
	// Report the keys, skipping the values between them.
	var run []byte
	var weight uint32
	pos = first
	for range count {
		key, prefix, sz, _ := entry(body[pos:])
		_, _, vsz, _ := entry(body[pos+sz:])
		pos += sz + vsz
		if prefix > 0 && weight > 0 && bytes.Equal(key[:prefix], run) {
			weight++
			continue
		}
		p.flush(run, weight, f, s)
		weight = 0
		if prefix > 0 {
			run, weight = key[:prefix], 1
			continue
		}
		p.pick(key, 0, 1, f, s)
	}
	p.flush(run, weight, f, s)
	return true
}

// prefixPutsFront decodes a prefix_puts too large to buffer from its front:
// the first key's pick-key stands for all count keys (the API puts skeys of
// one pkey).
func (p *Parser) prefixPutsFront(in pinfo, part []byte, bodyLen int, f *decode.Flow, s decode.Sink) status {
	if len(part) < 3+entryHeader {
		return needMore
	}
	pn, _, _, ok := entryHead(part[3:])
	if !ok || 3+entryHeader+pn+4 > bodyLen {
		return bad
	}
	pos := 3 + entryHeader + pn
	if len(part) < pos+4+entryHeader {
		return needMore
	}
	count := be32(part[pos:])
	pos += 4
	if count > maxKeyCount || count == 0 {
		return bad
	}
	kn, _, _, ok := entryHead(part[pos:])
	if !ok {
		return bad
	}
	if len(part) < pos+entryHeader+kn {
		return needMore
	}
	key, prefix, _, _ := entry(part[pos:])
	p.request(f, s, in.op, int32(be16(part[1:])), in.write)
	p.pick(key, prefix, uint32(count), f, s)
	return done
}

// feedbackOK checks a hot-key feedback body (spec §8.1).
func feedbackOK(body []byte) bool {
	if len(body) < 4 {
		return false
	}
	if be32(body) != 0 {
		return len(body) == 4 // only type 0 carries ns and key
	}
	if len(body) < 7 || body[6] > 1 {
		return false
	}
	if body[6] == 0 {
		return len(body) == 7
	}
	_, _, sz, ok := entry(body[7:])
	return ok && 7+sz == len(body)
}

// respGetOK checks a response_get (102, spec §7.1).
func respGetOK(body []byte) bool {
	if len(body) < 12 {
		return false
	}
	n := be32(body[8:])
	if n > maxKeyCount || n*2*entryHeader > len(body)-12 {
		return false
	}
	pos := skipEntries(body, 12, 2*n)
	if pos < 0 {
		return false
	}
	if n > 1 {
		if len(body)-pos < 4 {
			return false
		}
		m := be32(body[pos:])
		if m > maxKeyCount {
			return false
		}
		pos = skipEntries(body, pos+4, m)
	}
	return pos == len(body)
}

// respPrefixGetsOK checks a response_prefix_gets (30, spec §7.2).
func respPrefixGetsOK(body []byte) bool {
	if len(body) < 8 {
		return false
	}
	_, _, sz, ok := entry(body[8:])
	if !ok {
		return false
	}
	pos := 8 + sz
	for _, per := range [2]int{2, 1} { // found: skey, value, code; failed: skey, code
		if len(body)-pos < 4 {
			return false
		}
		n := be32(body[pos:])
		pos += 4
		if n > maxKeyCount {
			return false
		}
		for range n {
			if pos = skipEntries(body, pos, per); pos < 0 || len(body)-pos < 4 {
				return false
			}
			pos += 4
		}
	}
	return pos == len(body)
}

// respMReturnOK checks a response_mreturn (28, spec §7.4).
func respMReturnOK(body []byte) bool {
	if len(body) < 8 {
		return false
	}
	pos := skipString(body, 8)
	if pos < 0 || len(body)-pos < 4 {
		return false
	}
	n := be32(body[pos:])
	pos += 4
	if n > maxKeyCount {
		return false
	}
	for range n {
		if pos = skipEntries(body, pos, 1); pos < 0 || len(body)-pos < 4 {
			return false
		}
		pos += 4
	}
	return pos == len(body)
}
