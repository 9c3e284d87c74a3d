// Package decode holds what every protocol decoder shares: the protocol
// names, the per-connection Flow, the Request and key callbacks, and the
// Parser interface the stream layer drives. Protocol decoders live in
// subpackages (decode/redis, decode/memcache, decode/tair).
package decode

import (
	"net/netip"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Proto names a cache protocol.
type Proto uint8

const (
	ProtoUnknown Proto = iota
	ProtoRedis
	ProtoMemcache
	ProtoTair
	numProtos
)

var protoNames = [...]string{"unknown", "redis", "memcache", "tair"}

// String returns the contract name of p ("redis", "memcache", "tair").
func (p Proto) String() string {
	if int(p) < len(protoNames) {
		return protoNames[p]
	}
	return "unknown"
}

// ParseProto maps a contract name to a Proto.
func ParseProto(s string) (Proto, bool) {
	for i, n := range protoNames {
		if i > 0 && n == s {
			return Proto(i), true
		}
	}
	return ProtoUnknown, false
}

// Protos lists the known protocols.
func Protos() []Proto { return []Proto{ProtoRedis, ProtoMemcache, ProtoTair} }

// Dir is the direction of a byte stream within a connection.
type Dir uint8

const (
	ToServer Dir = iota // requests
	ToClient            // responses
)

// NoNS is the namespace of protocols that have none (memcache).
const NoNS int32 = -1

// NSString formats a namespace as the contract's "ns" field: the number, or
// "" for NoNS. Small values come from a table so the hot path does not allocate.
func NSString(ns int32) string {
	if ns < 0 {
		return ""
	}
	if int(ns) < len(smallNS) {
		return smallNS[ns]
	}
	return strconv.Itoa(int(ns))
}

var smallNS = func() []string {
	s := make([]string, 256)
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

// Flow identifies one TCP connection to a cache server. The stream layer owns
// it; parsers and sinks read it.
type Flow struct {
	Client netip.AddrPort
	Server netip.AddrPort
	Proto  Proto
	// TS is the packet time (Unix ns) of the segment being parsed; the stream
	// layer sets it before every Parse call.
	TS int64
	// KernelCounted: the segment being parsed was counted by the capture
	// programs (capture.Segment.KernelCounted); set with TS.
	KernelCounted bool
	// Pending holds the connection's requests awaiting replies when the
	// stream layer decodes replies (nil otherwise).
	Pending *Pending
}

// Request is one decoded request (one command). Parsers reuse it between
// calls: a sink must not keep the pointer.
type Request struct {
	// Op is the canonical command name ("GET", "MGET", "mg", "prefix_gets").
	// It always comes from a fixed table, never from wire bytes, so it is safe
	// as a metric label.
	Op string
	// NS is the namespace (Redis DB, Tair area) or NoNS.
	NS int32
	// Write marks requests that change data; they never count toward hotness
	// but drive invalidation.
	Write bool
	// ID is the request's id where replies echo it (memcached binary
	// opaque, Tair channel id), for pairing replies; 0 elsewhere.
	ID uint32
	// Quiet marks a request the server may leave unanswered (memcached
	// binary quiet opcodes, meta q flag): on a miss no reply comes.
	Quiet bool
}

// Key is one key occurrence within a request.
type Key struct {
	// Bytes is the pick-key as the server sees it. It aliases a decode buffer
	// and is valid only during the Sink call that receives it.
	Bytes []byte
	// Weight is how many reads this occurrence stands for (HMGET fields, Tair
	// skeys under one pkey). Always >= 1.
	Weight uint32
	// Prefix marks a Tair pkey standing for prefix reads of its skeys.
	Prefix bool
}

// Sink receives everything the decoders and the stream layer report: the
// requests and their keys, decode errors, reply bytes and absorbed-demand
// reports. Calls are made synchronously from Parse. Every method is
// required, so a wrapper cannot silently drop a kind of call: embed Forward
// (pass everything on, override some) or Discard (ignore everything, handle
// some) rather than writing the rest by hand.
type Sink interface {
	// Request is called once per decoded request, before its keys.
	Request(f *Flow, r *Request)
	// Key is called once per key occurrence of the request last reported.
	Key(f *Flow, r *Request, k Key)
	// Error counts a decode error. reason is a short fixed string
	// ("bad_length", "resync", ...) usable as a metric label.
	Error(f *Flow, reason string)
	// ReplyKey reports n reply bytes attributed to read key k, read in
	// namespace ns on f. k.Bytes is valid only during the call. It is
	// called once per key occurrence of the request the reply answers (k
	// carries that occurrence's weight), with the key's whole share of the
	// reply, so calls also count answered reads.
	ReplyKey(f *Flow, ns int32, k Key, n uint64)
	// Reply reports n reply bytes read on f: a whole reply, or a part of
	// one that was attributed on its own (a memcached VALUE block). paired
	// is false when no request could be matched to them (joined
	// mid-stream, queue overflow, out-of-band push): none went to ReplyKey.
	// Summed, they are every reply byte decoded.
	Reply(f *Flow, n uint64, paired bool)
	// Absorbed hands on one absorbed-demand report (see Absorbed); a.Key
	// is valid only during the call.
	Absorbed(f *Flow, a *Absorbed)
}

// Discard is a Sink that ignores every call. Embed it in a sink that
// handles only some kinds of call.
type Discard struct{}

func (Discard) Request(*Flow, *Request)            {}
func (Discard) Key(*Flow, *Request, Key)           {}
func (Discard) Error(*Flow, string)                {}
func (Discard) ReplyKey(*Flow, int32, Key, uint64) {}
func (Discard) Reply(*Flow, uint64, bool)          {}
func (Discard) Absorbed(*Flow, *Absorbed)          {}

// Forward is a Sink that passes every call on to Next. Embed it in a
// wrapper that overrides some calls: the others still reach Next, so a new
// kind of call added to Sink can never be lost by a wrapper that does not
// know it.
type Forward struct{ Next Sink }

func (w Forward) Request(f *Flow, r *Request)                 { w.Next.Request(f, r) }
func (w Forward) Key(f *Flow, r *Request, k Key)              { w.Next.Key(f, r, k) }
func (w Forward) Error(f *Flow, reason string)                { w.Next.Error(f, reason) }
func (w Forward) ReplyKey(f *Flow, ns int32, k Key, n uint64) { w.Next.ReplyKey(f, ns, k, n) }
func (w Forward) Reply(f *Flow, n uint64, paired bool)        { w.Next.Reply(f, n, paired) }
func (w Forward) Absorbed(f *Flow, a *Absorbed)               { w.Next.Absorbed(f, a) }

// Parser decodes one direction of one connection. It is fed contiguous bytes
// by the stream layer and must never block or retain b after returning.
type Parser interface {
	// Parse decodes as much of b as it can, reporting to s, and returns how
	// many bytes it consumed. Unconsumed bytes are offered again at the next
	// call with new bytes appended, so a request split across segments is
	// seen whole. A return value larger than len(b) asks the caller to skip
	// that many bytes in total (the rest of a large value) without buffering.
	// Garbage is counted through s.Error and skipped: Parse never fails.
	Parse(b []byte, f *Flow, s Sink) int
	// Gap tells the parser bytes were lost before the next Parse call (or
	// that it joins a connection mid-stream): it must resynchronise at the
	// next plausible message boundary.
	Gap()
}

// Decoder makes parsers for one protocol.
type Decoder interface {
	Proto() Proto
	// NewParser returns a parser for one direction of a new connection, or
	// nil when that direction carries nothing the decoder needs (the stream
	// layer then drops those bytes cheaply). midStream is true when the
	// connection was joined without seeing its start.
	NewParser(dir Dir, midStream bool) Parser
}

// Registry maps protocols to decoders. main builds it explicitly.
type Registry [numProtos]Decoder

// Register adds d to the registry.
func (r *Registry) Register(d Decoder) { r[d.Proto()] = d }

// Get returns the decoder for p, or nil.
func (r *Registry) Get(p Proto) Decoder {
	if int(p) < len(r) {
		return r[p]
	}
	return nil
}

// CountKey is how `hotsniff decode --count` prints a key (docs/events.md, "Per-key counts"):
// as is when it is valid UTF-8 of printable runes (space included), else
// Go-quoted, so one line always holds exactly one key. Fixture generators
// use it to write their truth files in the same form.
func CountKey(k string) string {
	if !utf8.ValidString(k) {
		return strconv.Quote(k)
	}
	for _, r := range k {
		if !unicode.IsPrint(r) {
			return strconv.Quote(k)
		}
	}
	return k
}
