// Package tairwire encodes classic Tair binary packets (the C++ Taobao/Alibaba
// Tair data-server protocol, not the Redis-compatible cloud product).
//
// It was written from the project's byte-level protocol notes (which restate the
// open-source server alibaba/tair 3.2.4 and the Java client 2.3.4.71), not
// checked against a running Tair: no Tair server or client can run in the
// project's build environment. Tests, fuzz seeds and the fixture generator use
// it; the decoder never does.
//
// Every Append function appends one framed packet to dst and returns the
// extended slice, so callers can build pipelined streams in one buffer.
package tairwire

import (
	"encoding/binary"
	"math"
)

// Magic is the 4-byte packet flag, "mBdT" (spec §1.2).
const Magic uint32 = 0x6D426454

// HeaderSize is the size of the fixed packet header: flag, chid, pcode, body_len.
const HeaderSize = 16

// EntryHeaderSize is the fixed part of a data_entry before its payload (spec §3.1).
const EntryHeaderSize = 40

// MetaSize is the size of the item_meta_info block inside a data_entry.
const MetaSize = 29

// ChidPush is the channel id of unsolicited server pushes (feedback, flow control).
const ChidPush uint32 = 0xFFFFFFFF

// Packet codes (spec §4, §6, §7, §8; alibaba/tair base_packet.hpp).
const (
	PcodePut                 int32 = 1
	PcodeGet                 int32 = 2
	PcodeRemove              int32 = 3
	PcodeRemoveArea          int32 = 4
	PcodeStat                int32 = 5
	PcodePing                int32 = 6
	PcodeDump                int32 = 7
	PcodeParam               int32 = 8
	PcodeHeartbeat           int32 = 9
	PcodeIncDec              int32 = 11
	PcodeMUpdate             int32 = 13
	PcodeLock                int32 = 14
	PcodeMPut                int32 = 15
	PcodeOpCmd               int32 = 16
	PcodeRespOpCmd           int32 = 17
	PcodeGetRange            int32 = 18
	PcodeRespGetRange        int32 = 19
	PcodeHide                int32 = 20
	PcodeHideByProxy         int32 = 21
	PcodeGetHidden           int32 = 22
	PcodeInvalid             int32 = 23
	PcodePrefixPuts          int32 = 24
	PcodePrefixRemoves       int32 = 25
	PcodePrefixIncDec        int32 = 26
	PcodeRespPrefixIncDec    int32 = 27
	PcodeRespMReturn         int32 = 28
	PcodePrefixGets          int32 = 29
	PcodeRespPrefixGets      int32 = 30
	PcodePrefixHides         int32 = 31
	PcodePrefixInvalids      int32 = 32
	PcodePrefixHidesByProxy  int32 = 33
	PcodePrefixGetHiddens    int32 = 34
	PcodeRespMReturnDup      int32 = 35
	PcodeSimpleGet           int32 = 36
	PcodeRespSimpleGet       int32 = 37
	PcodeUniqRemove          int32 = 38
	PcodeRespReturn          int32 = 101
	PcodeRespGet             int32 = 102
	PcodeRespStat            int32 = 103
	PcodeRespHeartbeat       int32 = 104
	PcodeRespIncDec          int32 = 105
	PcodeGetGroup            int32 = 1002
	PcodeRespFeedbackJava    int32 = 1113
	PcodeRespFeedback        int32 = 1123
	PcodeGetExpire           int32 = 1600
	PcodeGetModifyDate       int32 = 1702
	PcodeIncDecBounded       int32 = 1704
	PcodePrefixIncDecBounded int32 = 1706
	PcodeExpire              int32 = 2127
	PcodeMCOps               int32 = 2222
	PcodeFlowControl         int32 = 9001
)

// get_range commands (spec §4.4); 7 and 8 delete the range.
const (
	RangeAll       uint16 = 1
	RangeDel       uint16 = 7
	RangeDelValues uint16 = 8
)

// Lock types (spec §6, pcode 14).
const (
	LockStatus    uint32 = 1
	LockLock      uint32 = 2
	LockUnlock    uint32 = 3
	LockPutAndLck uint32 = 4
)

// Entry is one data_entry: a key or a value.
type Entry struct {
	// Bytes is the payload as the client sends it (without any merged area).
	Bytes []byte
	// Prefix is P, the pkey length of a mixed key (0 for a plain key). It is
	// written into the top 10 bits of msize.
	Prefix int
	// Merged, with MergedArea, writes the 2-byte little-endian area in front
	// of the payload, as server-to-server traffic does (spec §3.4).
	Merged     bool
	MergedArea uint16
	// MetaPrefix also stores P in meta.prefixsize, as the C++ client's
	// set_prefix_size does (spec §3.3). The Java client leaves meta zero.
	MetaPrefix bool
	// Meta, when non-nil, is copied into the 29-byte meta block (responses
	// carry real stored metadata there).
	Meta *[MetaSize]byte
}

// Plain returns a C++-client key: the caller's bytes, no header.
func Plain(key string) Entry { return Entry{Bytes: []byte(key)} }

// Mixed returns a C++-client prefix key pkey‖skey with P = len(pkey), built
// like data_entry::merge_key plus set_prefix_size.
func Mixed(pkey, skey string) Entry {
	b := make([]byte, 0, len(pkey)+len(skey))
	b = append(append(b, pkey...), skey...)
	return Entry{Bytes: b, Prefix: len(pkey), MetaPrefix: true}
}

// Java serialisation type headers (spec §3.5): (type << 1), big-endian.
const (
	JavaInt       uint16 = 1 << 1
	JavaString    uint16 = 2 << 1
	JavaBool      uint16 = 3 << 1
	JavaLong      uint16 = 4 << 1
	JavaDate      uint16 = 5 << 1
	JavaByte      uint16 = 6 << 1
	JavaFloat     uint16 = 7 << 1
	JavaDouble    uint16 = 8 << 1
	JavaByteArray uint16 = 9 << 1
	JavaSerialize uint16 = 10 << 1
	JavaIncData   uint16 = 11 << 1
	JavaMixedKey  uint16 = 12 << 1
)

// JavaEnc returns enc(x): the 2-byte type header followed by payload.
func JavaEnc(typ uint16, payload []byte) []byte {
	b := make([]byte, 2, 2+len(payload))
	binary.BigEndian.PutUint16(b, typ)
	return append(b, payload...)
}

// JavaStr returns the Java client's encoding of a String key.
func JavaStr(s string) []byte { return JavaEnc(JavaString, []byte(s)) }

// JavaI32 returns the Java client's encoding of an Integer key.
func JavaI32(v int32) []byte {
	return JavaEnc(JavaInt, binary.BigEndian.AppendUint32(nil, uint32(v)))
}

// JavaI64 returns the Java client's encoding of a Long key.
func JavaI64(v int64) []byte {
	return JavaEnc(JavaLong, binary.BigEndian.AppendUint64(nil, uint64(v)))
}

// JavaF64 returns the Java client's encoding of a Double key.
func JavaF64(v float64) []byte {
	return JavaEnc(JavaDouble, binary.BigEndian.AppendUint64(nil, math.Float64bits(v)))
}

// JavaKey returns a Java-client plain key entry from an encoded object.
func JavaKey(enc []byte) Entry { return Entry{Bytes: enc} }

// JavaMixed returns a Java MixedKey entry: 00 18 ‖ enc(pkey) ‖ enc(skey)
// with P = 2 + len(enc(pkey)) (spec §3.5). Meta stays zero, as in Java.
func JavaMixed(pkeyEnc, skeyEnc []byte) Entry {
	b := make([]byte, 0, 2+len(pkeyEnc)+len(skeyEnc))
	b = binary.BigEndian.AppendUint16(b, JavaMixedKey)
	b = append(append(b, pkeyEnc...), skeyEnc...)
	return Entry{Bytes: b, Prefix: 2 + len(pkeyEnc)}
}

// JavaPrime returns the prime slice the Java client writes in a simple get
// (pcode 36) that has sub keys: 00 18 ‖ enc(pkey) (spec §4.3).
func JavaPrime(pkeyEnc []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, JavaMixedKey)
	return append(b, pkeyEnc...)
}

// PickKey returns the bytes a decoder reports for e: the pkey region for a
// mixed key, the whole payload otherwise. Generators use it for bookkeeping.
func (e Entry) PickKey() []byte {
	if e.Prefix > 0 {
		return e.Bytes[:e.Prefix]
	}
	return e.Bytes
}

// AppendHeader appends a packet header with a zero body length; FinishFrame
// patches the length once the body is written (as Java's writePacketEnd does).
func AppendHeader(dst []byte, chid uint32, pcode int32) []byte {
	dst = binary.BigEndian.AppendUint32(dst, Magic)
	dst = binary.BigEndian.AppendUint32(dst, chid)
	dst = binary.BigEndian.AppendUint32(dst, uint32(pcode))
	return binary.BigEndian.AppendUint32(dst, 0)
}

// FinishFrame sets the body length of the frame whose header starts at start.
func FinishFrame(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start+12:], uint32(len(dst)-start-HeaderSize))
	return dst
}

// AppendRaw appends a frame with an arbitrary pcode and body (unknown pcodes,
// admin traffic, bad input in tests).
func AppendRaw(dst []byte, chid uint32, pcode int32, body []byte) []byte {
	start := len(dst)
	dst = AppendHeader(dst, chid, pcode)
	dst = append(dst, body...)
	return FinishFrame(dst, start)
}

// AppendEntry appends one data_entry (spec §3.1).
func AppendEntry(dst []byte, e Entry) []byte {
	n := len(e.Bytes)
	if e.Merged {
		n += 2
		dst = append(dst, 1)
	} else {
		dst = append(dst, 0)
	}
	dst = binary.BigEndian.AppendUint32(dst, 0) // per-entry area: 0 from clients
	dst = binary.BigEndian.AppendUint16(dst, 0) // entry server flag
	m := len(dst)
	if e.Meta != nil {
		dst = append(dst, e.Meta[:]...)
	} else {
		dst = append(dst, make([]byte, MetaSize)...)
	}
	if e.MetaPrefix {
		binary.BigEndian.PutUint32(dst[m+8:], uint32(e.Prefix))
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(n)&0x3FFFFF|uint32(e.Prefix)<<22)
	if e.Merged {
		dst = binary.LittleEndian.AppendUint16(dst, e.MergedArea)
	}
	return append(dst, e.Bytes...)
}

func appendString(dst []byte, s string) []byte {
	if s == "" {
		return binary.BigEndian.AppendUint32(dst, 0)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)+1))
	dst = append(dst, s...)
	return append(dst, 0)
}

// GetFamily is the body shared by pcodes 2, 3, 20, 21, 22, 23, 25, 29, 31,
// 32, 33, 34 (spec §4.2).
type GetFamily struct {
	ServerFlag uint8
	Area       uint16
	Keys       []Entry
	// PacketID is appended for 25 and 31 when ServerFlag != 0.
	PacketID uint32
	// Group and IsSync are appended for the invalidate family (21, 23, 32, 33).
	Group  string
	IsSync uint32
}

// AppendGetFamily appends a get-family packet with the given pcode.
func AppendGetFamily(dst []byte, chid uint32, pcode int32, g GetFamily) []byte {
	start := len(dst)
	dst = AppendHeader(dst, chid, pcode)
	dst = append(dst, g.ServerFlag)
	dst = binary.BigEndian.AppendUint16(dst, g.Area)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(g.Keys)))
	for _, k := range g.Keys {
		dst = AppendEntry(dst, k)
	}
	switch pcode {
	case PcodePrefixRemoves, PcodePrefixHides:
		if g.ServerFlag != 0 {
			dst = binary.BigEndian.AppendUint32(dst, g.PacketID)
		}
	case PcodeHideByProxy, PcodeInvalid, PcodePrefixInvalids, PcodePrefixHidesByProxy:
		dst = appendString(dst, g.Group)
		dst = binary.BigEndian.AppendUint32(dst, g.IsSync)
	}
	return FinishFrame(dst, start)
}

// AppendGet appends a get (one key) or mget (several keys), pcode 2.
func AppendGet(dst []byte, chid uint32, area uint16, keys ...Entry) []byte {
	return AppendGetFamily(dst, chid, PcodeGet, GetFamily{Area: area, Keys: keys})
}

// AppendPrefixGets appends a prefix_gets (pcode 29). Java's mprefix_gets
// sends one such packet per pkey.
func AppendPrefixGets(dst []byte, chid uint32, area uint16, keys ...Entry) []byte {
	return AppendGetFamily(dst, chid, PcodePrefixGets, GetFamily{Area: area, Keys: keys})
}

// SimpleGroup is one prime (pkey) with its subs (skeys) in a simple get.
type SimpleGroup struct {
	Prime []byte
	Subs  [][]byte
}

// AppendSimpleGet appends a simple prefix get (pcode 36, spec §4.3).
func AppendSimpleGet(dst []byte, chid uint32, area uint16, reserved uint64, groups ...SimpleGroup) []byte {
	start := len(dst)
	dst = AppendHeader(dst, chid, PcodeSimpleGet)
	dst = binary.BigEndian.AppendUint64(dst, reserved)
	dst = binary.BigEndian.AppendUint16(dst, area)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(groups)))
	for _, g := range groups {
		dst = appendSlice(dst, g.Prime)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(g.Subs)))
		for _, s := range g.Subs {
			dst = appendSlice(dst, s)
		}
	}
	return FinishFrame(dst, start)
}

func appendSlice(dst, s []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

// AppendGetRange appends a get_range (pcode 18, spec §4.4).
func AppendGetRange(dst []byte, chid uint32, cmd, area uint16, offset, limit uint32, startKey, endKey Entry) []byte {
	start := len(dst)
	dst = AppendHeader(dst, chid, PcodeGetRange)
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint16(dst, cmd)
	dst = binary.BigEndian.AppendUint16(dst, area)
	dst = binary.BigEndian.AppendUint32(dst, offset)
	dst = binary.BigEndian.AppendUint32(dst, limit)
	dst = AppendEntry(dst, startKey)
	dst = AppendEntry(dst, endKey)
	return FinishFrame(dst, start)
}

// AppendPut appends a put (pcode 1).
func AppendPut(dst []byte, chid uint32, area, version uint16, expire int32, key, value Entry) []byte {
	start := len(dst)
	dst = AppendHeader(dst, chid, PcodePut)
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint16(dst, area)
	dst = binary.BigEndian.AppendUint16(dst, version)
	dst = binary.BigEndian.AppendUint32(dst, uint32(expire))
	dst = AppendEntry(dst, key)
	dst = AppendEntry(dst, value)
	return FinishFrame(dst, start)
}

// AppendIncDec appends an incdec (pcode 11).
func AppendIncDec(dst []byte, chid uint32, area uint16, add, init, expire int32, key Entry) []byte {
	start := len(dst)
	dst = AppendHeader(dst, chid, PcodeIncDec)
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint16(dst, area)
	dst = binary.BigEndian.AppendUint32(dst, uint32(add))
	dst = binary.BigEndian.AppendUint32(dst, uint32(init))
	dst = binary.BigEndian.AppendUint32(dst, uint32(expire))
	dst = AppendEntry(dst, key)
	return FinishFrame(dst, start)
}

// AppendLock appends a lock (pcode 14); value is written only for
// LockPutAndLck. The lock body has no leading server_flag.
func AppendLock(dst []byte, chid uint32, area uint16, lockType uint32, key Entry, value *Entry) []byte {
	start := len(dst)
	dst = AppendHeader(dst, chid, PcodeLock)
	dst = binary.BigEndian.AppendUint16(dst, area)
	dst = binary.BigEndian.AppendUint32(dst, lockType)
	dst = AppendEntry(dst, key)
	if lockType == LockPutAndLck && value != nil {
		dst = AppendEntry(dst, *value)
	}
	return FinishFrame(dst, start)
}

// AppendPrefixPuts appends a prefix_puts (pcode 24): pkey, then (key, value)
// pairs of mixed keys.
func AppendPrefixPuts(dst []byte, chid uint32, area uint16, pkey Entry, kvs ...[2]Entry) []byte {
	start := len(dst)
	dst = AppendHeader(dst, chid, PcodePrefixPuts)
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint16(dst, area)
	dst = AppendEntry(dst, pkey)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(kvs)))
	for _, kv := range kvs {
		dst = AppendEntry(dst, kv[0])
		dst = AppendEntry(dst, kv[1])
	}
	return FinishFrame(dst, start)
}

// AppendKeyed appends the layouts "u8 server_flag, u16 area, <extra>,
// data_entry key" of expire (2127: extra = i32 expire) and uniq_remove
// (38: extra = u32 bucket).
func AppendKeyed(dst []byte, chid uint32, pcode int32, area uint16, extra uint32, key Entry) []byte {
	start := len(dst)
	dst = AppendHeader(dst, chid, pcode)
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint16(dst, area)
	dst = binary.BigEndian.AppendUint32(dst, extra)
	dst = AppendEntry(dst, key)
	return FinishFrame(dst, start)
}

// AppendGetExpire appends the Java-only get-with-expire (1600) or
// get-modify-date (1702): u8 0, u16 ns, u32 expire, u32 n, n entries.
func AppendGetExpire(dst []byte, chid uint32, pcode int32, area uint16, expire uint32, keys ...Entry) []byte {
	start := len(dst)
	dst = AppendHeader(dst, chid, pcode)
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint16(dst, area)
	dst = binary.BigEndian.AppendUint32(dst, expire)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(keys)))
	for _, k := range keys {
		dst = AppendEntry(dst, k)
	}
	return FinishFrame(dst, start)
}

// AppendRespReturn appends a response_return (101).
func AppendRespReturn(dst []byte, chid, configVersion uint32, code int32, msg string) []byte {
	start := len(dst)
	dst = AppendHeader(dst, chid, PcodeRespReturn)
	dst = binary.BigEndian.AppendUint32(dst, configVersion)
	dst = binary.BigEndian.AppendUint32(dst, uint32(code))
	dst = appendString(dst, msg)
	return FinishFrame(dst, start)
}

// AppendRespGet appends a response_get (102) with found (key, value) pairs;
// the trailing proxied count (always 0 in 3.2.4) is written when there is
// more than one pair.
func AppendRespGet(dst []byte, chid, configVersion uint32, code int32, kvs ...[2]Entry) []byte {
	start := len(dst)
	dst = AppendHeader(dst, chid, PcodeRespGet)
	dst = binary.BigEndian.AppendUint32(dst, configVersion)
	dst = binary.BigEndian.AppendUint32(dst, uint32(code))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(kvs)))
	for _, kv := range kvs {
		dst = AppendEntry(dst, kv[0])
		dst = AppendEntry(dst, kv[1])
	}
	if len(kvs) > 1 {
		dst = binary.BigEndian.AppendUint32(dst, 0)
	}
	return FinishFrame(dst, start)
}

// SKeyResult is one found skey of a prefix_gets response.
type SKeyResult struct {
	SKey, Value Entry
	Code        int32
}

// AppendRespPrefixGets appends a response_prefix_gets (30): pkey, found
// (skey, value, code) triples, then failed (skey, code) pairs.
func AppendRespPrefixGets(dst []byte, chid, configVersion uint32, code int32, pkey Entry, found []SKeyResult, failed []SKeyResult) []byte {
	start := len(dst)
	dst = AppendHeader(dst, chid, PcodeRespPrefixGets)
	dst = binary.BigEndian.AppendUint32(dst, configVersion)
	dst = binary.BigEndian.AppendUint32(dst, uint32(code))
	dst = AppendEntry(dst, pkey)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(found)))
	for _, r := range found {
		dst = AppendEntry(dst, r.SKey)
		dst = AppendEntry(dst, r.Value)
		dst = binary.BigEndian.AppendUint32(dst, uint32(r.Code))
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(failed)))
	for _, r := range failed {
		dst = AppendEntry(dst, r.SKey)
		dst = binary.BigEndian.AppendUint32(dst, uint32(r.Code))
	}
	return FinishFrame(dst, start)
}

// AppendFeedback appends a hot-key feedback push (chid -1). pcode is
// PcodeRespFeedback (1123, C++ server) or PcodeRespFeedbackJava (1113).
// key may be nil (has_key = 0).
func AppendFeedback(dst []byte, pcode int32, ns uint16, key *Entry) []byte {
	start := len(dst)
	dst = AppendHeader(dst, ChidPush, pcode)
	dst = binary.BigEndian.AppendUint32(dst, 0) // FEEDBACK_HOT_KEY
	dst = binary.BigEndian.AppendUint16(dst, ns)
	if key == nil {
		dst = append(dst, 0)
	} else {
		dst = append(dst, 1)
		dst = AppendEntry(dst, *key)
	}
	return FinishFrame(dst, start)
}

// AppendFlowControl appends a flow-control push (9001, chid -1).
func AppendFlowControl(dst []byte, status uint32, ns uint32) []byte {
	start := len(dst)
	dst = AppendHeader(dst, ChidPush, PcodeFlowControl)
	dst = binary.BigEndian.AppendUint32(dst, status)
	dst = binary.BigEndian.AppendUint32(dst, ns)
	return FinishFrame(dst, start)
}

// AppendRespMReturn appends a response_mreturn (28): a message and a code
// per key.
func AppendRespMReturn(dst []byte, chid, configVersion uint32, code int32, msg string, keys []Entry, codes []int32) []byte {
	start := len(dst)
	dst = AppendHeader(dst, chid, PcodeRespMReturn)
	dst = binary.BigEndian.AppendUint32(dst, configVersion)
	dst = binary.BigEndian.AppendUint32(dst, uint32(code))
	dst = appendString(dst, msg)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(keys)))
	for i, k := range keys {
		dst = AppendEntry(dst, k)
		dst = binary.BigEndian.AppendUint32(dst, uint32(codes[i]))
	}
	return FinishFrame(dst, start)
}
