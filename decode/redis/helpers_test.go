package redis

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
)

// recSink records what a parser reports, copying keys (they alias the
// parser's input).
type recSink struct {
	decode.Discard
	reqs   []recReq
	errs   []string
	orphan int // keys reported before any request
}

type recReq struct {
	Op    string
	NS    int32
	Write bool
	Keys  []recKey
}

type recKey struct {
	Key    string
	Weight uint32
}

func (r *recSink) Request(_ *decode.Flow, q *decode.Request) {
	r.reqs = append(r.reqs, recReq{Op: q.Op, NS: q.NS, Write: q.Write})
}

func (r *recSink) Key(_ *decode.Flow, q *decode.Request, k decode.Key) {
	if len(r.reqs) == 0 {
		r.orphan++
		return
	}
	last := &r.reqs[len(r.reqs)-1]
	last.Keys = append(last.Keys, recKey{Key: string(k.Bytes), Weight: k.Weight})
}

func (r *recSink) Error(_ *decode.Flow, reason string) { r.errs = append(r.errs, reason) }

// String renders a request compactly: OP[/w][@ns] key key*weight ...
func (q recReq) String() string {
	var b strings.Builder
	b.WriteString(q.Op)
	if q.Write {
		b.WriteString("/w")
	}
	if q.NS != 0 {
		fmt.Fprintf(&b, "@%d", q.NS)
	}
	for _, k := range q.Keys {
		b.WriteByte(' ')
		b.WriteString(showKey(k.Key))
		if k.Weight != 1 {
			fmt.Fprintf(&b, "*%d", k.Weight)
		}
	}
	return b.String()
}

func showKey(k string) string {
	for i := 0; i < len(k); i++ {
		if k[i] <= ' ' || k[i] >= 0x7f || k[i] == '"' || k[i] == '*' {
			return strconv.Quote(k)
		}
	}
	if k == "" {
		return `""`
	}
	return k
}

func (r *recSink) lines() []string {
	out := make([]string, len(r.reqs))
	for i, q := range r.reqs {
		out[i] = q.String()
	}
	return out
}

// resp encodes a request as every client does: an array of bulk strings.
func resp(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

var testFlow = &decode.Flow{
	Client: netip.MustParseAddrPort("127.0.0.1:50000"),
	Server: netip.MustParseAddrPort("127.0.0.1:6379"),
	Proto:  decode.ProtoRedis,
}

// feeder drives a parser exactly as the stream layer does: the unconsumed
// tail is offered again with the next bytes appended, and a return value
// beyond the buffer skips that many bytes of what follows.
type feeder struct {
	t    testing.TB
	p    decode.Parser
	s    decode.Sink
	buf  []byte
	skip int
	// maxTail is the most bytes the parser ever left unconsumed.
	maxTail int
}

func (fd *feeder) write(chunk []byte) {
	if fd.skip > 0 {
		if fd.skip >= len(chunk) {
			fd.skip -= len(chunk)
			return
		}
		chunk = chunk[fd.skip:]
		fd.skip = 0
	}
	fd.buf = append(fd.buf, chunk...)
	n := fd.p.Parse(fd.buf, testFlow, fd.s)
	if n < 0 {
		fd.t.Fatalf("Parse returned %d", n)
	}
	if n > len(fd.buf) {
		fd.skip = n - len(fd.buf)
		fd.buf = fd.buf[:0]
		return
	}
	fd.buf = append(fd.buf[:0], fd.buf[n:]...)
	fd.maxTail = max(fd.maxTail, len(fd.buf))
}

// decodeChunks runs a fresh parser over stream cut at the given sizes.
func decodeChunks(t testing.TB, cfg Config, midStream bool, stream []byte, sizes func() int) *recSink {
	t.Helper()
	r := &recSink{}
	fd := &feeder{t: t, p: New(cfg).NewParser(decode.ToServer, midStream), s: r}
	for len(stream) > 0 {
		n := min(sizes(), len(stream))
		fd.write(stream[:n])
		stream = stream[n:]
	}
	return r
}

func decodeWhole(t testing.TB, stream []byte) *recSink {
	return decodeChunks(t, Config{}, false, stream, func() int { return len(stream) + 1 })
}

func randomSizes(rng *rand.Rand, maxChunk int) func() int {
	return func() int { return 1 + rng.IntN(maxChunk) }
}
