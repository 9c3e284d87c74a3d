// Package redis decodes Redis requests (RESP arrays of bulk strings, and
// inline commands) into commands and keys, using a command table generated
// from a real redis-server's COMMAND output (commands_gen.go).
//
// What the parser reports, per request: one sink.Request whose Op is the
// canonical table name ("GET", "CLIENT|SETNAME", "UNKNOWN"), then one
// sink.Key per key the command's key specs name, in argument order:
//
//   - MGET k1..kn: n keys of weight 1.
//   - HGET/HMGET/HEXISTS/HSTRLEN h f1..fn, SMISMEMBER s m1..mn and
//     ZMSCORE z m1..mn: key h once with weight n (see fieldWeighted).
//   - EVAL/EVALSHA/FCALL and their _RO forms, ZUNION(STORE), LMPOP, ...:
//     numkeys from the argument the key spec points at.
//   - XREAD/XREADGROUP ... STREAMS k1..kn id1..idn, GEORADIUS ... STORE,
//     MIGRATE ... KEYS: keyword key specs.
//   - SORT ... STORE dst: SORT's store key has no key spec ("unknown"); it is
//     found as redis-server's sortGetKeys finds it. BY/GET patterns are not
//     keys of the request and are not reported.
//   - Request.Write is the command's "write" flag; all keys of a write
//     request are writes.
//   - A request whose argument count does not fit the command's arity is
//     rejected by the server: it is reported with its Op and no keys.
//
// Namespaces: SELECT n sets Request.NS for the rest of the connection, RESET
// sets it back to 0, DISCARD undoes a SELECT queued since MULTI. A
// connection joined mid-stream has missed any SELECT and reports NS 0.
//
// Resynchronisation: mid-stream, after a gap, or after garbage the parser
// scans for `*<n>\r\n$<len>\r\n<name>\r\n` where name is a known command and
// n fits its arity. It never resynchronises onto an inline command: a line
// of words is too likely to be the middle of a value.
package redis

import (
	"github.com/hotsniff/hotsniff/decode"
)

// Config bounds what the parser accepts. Zero fields take the defaults.
type Config struct {
	// MaxKeyLen is the longest key reported (default 64 KiB). A longer key
	// argument is skipped and counted as "key_too_long".
	MaxKeyLen int
	// MaxBulkLen is the longest bulk string of any argument (default 512 MiB,
	// redis-server's proto-max-bulk-len). Longer is garbage: "too_long".
	MaxBulkLen int
	// MaxArrayLen is the most arguments of one request (default 1<<20).
	MaxArrayLen int
	// MaxInlineLen is the longest inline command line (default 64 KiB,
	// redis-server's PROTO_INLINE_MAX_SIZE).
	MaxInlineLen int
}

// Defaults.
const (
	DefaultMaxKeyLen    = 64 << 10
	DefaultMaxBulkLen   = 512 << 20
	DefaultMaxArrayLen  = 1 << 20
	DefaultMaxInlineLen = 64 << 10
)

func (c Config) withDefaults() Config {
	if c.MaxKeyLen <= 0 {
		c.MaxKeyLen = DefaultMaxKeyLen
	}
	if c.MaxBulkLen <= 0 {
		c.MaxBulkLen = DefaultMaxBulkLen
	}
	if c.MaxArrayLen <= 0 {
		c.MaxArrayLen = DefaultMaxArrayLen
	}
	if c.MaxInlineLen <= 0 {
		c.MaxInlineLen = DefaultMaxInlineLen
	}
	return c
}

// Decoder makes Redis request parsers.
type Decoder struct {
	cfg Config
}

// New returns a Redis decoder with cfg's bounds.
func New(cfg Config) *Decoder {
	return &Decoder{cfg: cfg.withDefaults()}
}

// Proto returns decode.ProtoRedis.
func (d *Decoder) Proto() decode.Proto { return decode.ProtoRedis }

// NewParser returns a request parser for the client-to-server direction and
// a reply parser for the other, which pairs replies with the requests the
// stream layer queued on the flow (decode.Flow.Pending) and does nothing
// without such a queue.
func (d *Decoder) NewParser(dir decode.Dir, midStream bool) decode.Parser {
	if dir != decode.ToServer {
		return &replyParser{}
	}
	return newParser(d.cfg, midStream)
}

// Error reasons passed to Sink.Error; a fixed set, usable as metric labels.
const (
	ReasonResync     = "resync"       // scanning for the next request boundary (one per episode)
	ReasonBadType    = "bad_type"     // an argument did not start with '$'
	ReasonBadLength  = "bad_length"   // a length field is not a valid number
	ReasonTooLong    = "too_long"     // a length or inline line beyond the configured bounds
	ReasonBadFormat  = "bad_format"   // a bulk string not followed by CRLF
	ReasonBadInline  = "bad_inline"   // unbalanced quotes or NUL in an inline command
	ReasonKeyTooLong = "key_too_long" // a key beyond MaxKeyLen, skipped
)

// Reasons lists every reason this package reports (requests and replies),
// so the metrics can export each one at zero from the first scrape.
func Reasons() []string {
	return []string{ReasonResync, ReasonBadType, ReasonBadLength, ReasonTooLong, ReasonBadFormat,
		ReasonBadInline, ReasonKeyTooLong, ReasonBadReply, ReasonReplyDepth, ReasonUnexpected}
}
