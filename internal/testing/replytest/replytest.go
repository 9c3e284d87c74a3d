// Package replytest drives a protocol's request and reply parsers the way the
// stream layer does (requests recorded on the connection's decode.Pending
// queue, unconsumed tails offered again, skips honoured), so reply parsers
// can be tested, fuzzed and benchmarked without packets.
package replytest

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
)

// Sink records reply attribution: bytes per key (namespace and key bytes),
// whole replies, paired or not, and errors.
type Sink struct {
	decode.Discard // absorbed reports are not this package's concern
	Bytes          map[string]uint64
	Reads          map[string]uint64
	Replies        uint64
	Total          uint64
	Unpaired       uint64
	Errors         []string
	// Requested holds every read key the requests named.
	Requested map[string]bool
	// Check, when set, is called on every ReplyKey (fuzz invariants).
	Check func(ns int32, k decode.Key, n uint64)
}

// NewSink returns an empty Sink.
func NewSink() *Sink {
	return &Sink{Bytes: map[string]uint64{}, Reads: map[string]uint64{}, Requested: map[string]bool{}}
}

func (s *Sink) Request(*decode.Flow, *decode.Request) {}

func (s *Sink) Key(_ *decode.Flow, q *decode.Request, k decode.Key) {
	if !q.Write {
		s.Requested[Name(q.NS, k.Bytes)] = true
	}
}
func (s *Sink) Error(_ *decode.Flow, reason string) { s.Errors = append(s.Errors, reason) }

// Name is how a key is named in Bytes and Reads: "ns/key" (ns -1: "/key").
func Name(ns int32, key []byte) string {
	if ns < 0 {
		return "/" + string(key)
	}
	return decode.NSString(ns) + "/" + string(key)
}

func (s *Sink) ReplyKey(_ *decode.Flow, ns int32, k decode.Key, n uint64) {
	if s.Check != nil {
		s.Check(ns, k, n)
	}
	s.Bytes[Name(ns, k.Bytes)] += n
	s.Reads[Name(ns, k.Bytes)]++
}

func (s *Sink) Reply(_ *decode.Flow, n uint64, paired bool) {
	s.Replies++
	s.Total += n
	if !paired {
		s.Unpaired += n
	}
}

// Attributed sums Bytes.
func (s *Sink) Attributed() uint64 {
	var n uint64
	for _, v := range s.Bytes {
		n += v
	}
	return n
}

// recorder is the stream layer's request recorder.
type recorder struct{ decode.Forward }

func (r *recorder) Request(f *decode.Flow, q *decode.Request) {
	f.Pending.Push(f.TS, q)
	r.Next.Request(f, q)
}

func (r *recorder) Key(f *decode.Flow, q *decode.Request, k decode.Key) {
	if !q.Write {
		f.Pending.AddKey(k)
	}
	r.Next.Key(f, q, k)
}

// Conn is one connection: both parsers, the queue and each direction's
// unparsed tail and pending skip.
type Conn struct {
	F        decode.Flow
	Req, Rep decode.Parser
	S        *Sink
	// Out is where both parsers report: S unless changed (benchmarks use
	// Nop); requests go through a recorder in front of it.
	Out     decode.Sink
	rec     *recorder
	cfg     decode.PendingConfig
	st      decode.PendingStats
	tail    [2][]byte
	skip    [2]uint64
	MaxTail int // bound on a tail, as the stream's MaxFlowBuffer (default 256 KiB)
}

// NewConn returns a connection seen from its start (pairing at once).
func NewConn(d decode.Decoder, cfg decode.PendingConfig) *Conn {
	c := &Conn{Req: d.NewParser(decode.ToServer, false), Rep: d.NewParser(decode.ToClient, false), S: NewSink(), cfg: cfg, MaxTail: 256 << 10}
	c.F = decode.Flow{
		Client:  netip.MustParseAddrPort("10.0.0.1:40000"),
		Server:  netip.MustParseAddrPort("10.0.0.2:6379"),
		Proto:   d.Proto(),
		Pending: decode.NewPending(&c.cfg, &c.st),
	}
	c.F.Pending.Reset(true)
	c.Out = c.S
	c.rec = &recorder{}
	return c
}

// Nop is a sink that keeps nothing but the reply bytes attributed, for
// benchmarks: it allocates nothing.
type Nop struct {
	decode.Discard
	Bytes, Replies uint64
}

func (n *Nop) Request(*decode.Flow, *decode.Request)                    {}
func (n *Nop) Key(*decode.Flow, *decode.Request, decode.Key)            {}
func (n *Nop) Error(*decode.Flow, string)                               {}
func (n *Nop) ReplyKey(_ *decode.Flow, _ int32, _ decode.Key, b uint64) { n.Bytes += b }
func (n *Nop) Reply(_ *decode.Flow, b uint64, _ bool)                   { n.Replies += b }

// Stats returns the queue's counters.
func (c *Conn) Stats() decode.PendingStats { return c.st }

// Requests feeds client bytes at packet time ts.
func (c *Conn) Requests(ts int64, b []byte) { c.feed(0, ts, b) }

// Replies feeds server bytes at packet time ts.
func (c *Conn) Replies(ts int64, b []byte) { c.feed(1, ts, b) }

// Resume restarts direction dir after bytes the capture left out on
// purpose (flow sampling; in-kernel counting), as the stream layer does:
// the parser resynchronises, the queue is kept.
func (c *Conn) Resume(dir int) {
	c.tail[dir], c.skip[dir] = c.tail[dir][:0], 0
	if dir == 0 {
		c.Req.Gap()
	} else {
		c.Rep.Gap()
	}
}

// Gap tells the reply direction bytes were lost, as the stream layer does.
func (c *Conn) Gap(dir int) {
	c.tail[dir], c.skip[dir] = nil, 0
	if dir == 0 {
		c.Req.Gap()
	} else {
		c.Rep.Gap()
	}
	c.F.Pending.Desync()
}

func (c *Conn) feed(dir int, ts int64, d []byte) {
	c.F.TS = ts
	p := c.Rep
	s := c.Out
	if dir == 0 {
		c.rec.Next = c.Out
		p, s = c.Req, c.rec
	}
	for len(d) > 0 {
		if c.skip[dir] > 0 {
			n := min(c.skip[dir], uint64(len(d)))
			c.skip[dir] -= n
			d = d[n:]
			continue
		}
		buf := d
		if len(c.tail[dir]) > 0 {
			room := c.MaxTail - len(c.tail[dir])
			if room <= 0 {
				c.Gap(dir)
				continue
			}
			n := min(room, len(d))
			c.tail[dir] = append(c.tail[dir], d[:n]...)
			d = d[n:]
			buf = c.tail[dir]
		} else {
			d = nil
		}
		n := p.Parse(buf, &c.F, s)
		if n >= len(buf) {
			c.skip[dir] = uint64(n - len(buf))
			c.tail[dir] = c.tail[dir][:0]
			continue
		}
		rest := buf[max(n, 0):]
		if len(rest) > c.MaxTail {
			c.Gap(dir)
			continue
		}
		c.tail[dir] = append(c.tail[dir][:0:0], rest...)
	}
}

// Check feeds req, then rep cut into chunks chosen by seed, and checks what
// every reply parser must hold whatever the bytes: no panic, only requested
// keys get bytes, no more bytes attributed than replies counted, no more
// replies counted than the stream carried (a value skipped ahead counts
// when its header is read; ahead is what may count before it arrives, such
// as the shares of memcached's END given with the VALUE blocks), and a
// bounded queue.
func Check(t testing.TB, d decode.Decoder, req, rep []byte, seed byte, ahead uint64) {
	c := NewConn(d, decode.PendingConfig{MaxRequests: 64, MaxKeyBytes: 4096})
	c.S.Check = func(ns int32, k decode.Key, n uint64) {
		if !c.S.Requested[Name(ns, k.Bytes)] {
			t.Fatalf("bytes for %q, which no request read", Name(ns, k.Bytes))
		}
	}
	c.MaxTail = 4096
	c.Requests(1, req)
	r := rand.New(rand.NewPCG(uint64(seed), 1))
	fed := uint64(len(rep))
	for len(rep) > 0 {
		n := 1 + r.IntN(len(rep))
		c.Replies(2, rep[:n])
		rep = rep[n:]
	}
	if a := c.S.Attributed(); a > c.S.Total {
		t.Fatalf("%d bytes attributed, only %d in replies", a, c.S.Total)
	}
	if c.S.Total > fed+c.skip[1]+ahead {
		t.Fatalf("%d reply bytes counted from %d (and %d to skip)", c.S.Total, fed, c.skip[1])
	}
	if c.F.Pending.Len() > 64 {
		t.Fatalf("queue of %d", c.F.Pending.Len())
	}
}
