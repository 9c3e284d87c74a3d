package bpf

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/decode/redis"
	"github.com/hotsniff/hotsniff/internal/testing/replytest"
)

// Reply records: with reply bytes on, the programs copy exactly
// the replies answering the request segments they copy, so user space
// measures the bytes of the keys it locates. The tests feed the records,
// with their flags, to the user-space parsers the way the stream layer
// does and compare the bytes per key with what user space attributes when
// given all the traffic: equal for the keys of copied requests, nothing
// for the others, and never bytes to a wrong key when records are lost.

// bconn is a connection run through the programs, with two user-space
// views: all (every byte, the truth) and rec (the records only, as the
// stream layer hands them on).
type bconn struct {
	t        *testing.T
	e        *kcEnv
	prog     *ebpf.Program
	c        *conn
	rseq     uint32
	ts       int64
	all, rec *replytest.Conn
	next     [2]uint32
	nextOK   [2]bool
	recs     []rawRec
	holes    int // reply bytes left out inside a skip (fed as filler)
}

func newBConn(t *testing.T, e *kcEnv, prog *ebpf.Program) *bconn {
	b := &bconn{t: t, e: e, prog: prog, c: e.newConn(srv4, prog, true), rseq: 7000, ts: 1e9}
	b.all = replytest.NewConn(redis.New(redis.Config{}), decode.PendingConfig{})
	b.rec = replytest.NewConn(redis.New(redis.Config{}), decode.PendingConfig{})
	b.next = [2]uint32{b.c.seq, b.rseq}
	b.nextOK = [2]bool{true, false}
	return b
}

// req sends one request segment; its records go to rec.
func (b *bconn) req(p []byte) []rawRec {
	b.t.Helper()
	b.e.run(b.prog, pkt{src: b.c.cli, dst: b.c.srv, flags: 0x18, seq: b.c.seq, ack: b.rseq, payload: p})
	b.c.seq += uint32(len(p))
	b.ts += 10_000
	b.all.Requests(b.ts, p)
	return b.feed()
}

// rep sends reply bytes cut at the given lengths (the rest as a last
// segment).
func (b *bconn) rep(p []byte, cuts ...int) {
	b.t.Helper()
	for len(p) > 0 {
		n := len(p)
		if len(cuts) > 0 {
			n, cuts = min(max(cuts[0], 1), n), cuts[1:]
		}
		b.e.run(b.prog, pkt{src: b.c.srv, dst: b.c.cli, flags: 0x18, seq: b.rseq, ack: b.c.seq, payload: p[:n]})
		b.rseq += uint32(n)
		b.ts += 10_000
		b.all.Replies(b.ts, p[:n])
		p = p[n:]
		b.feed()
	}
}

// feed hands the records made since the last call to rec, as the stream
// layer would: request framing before the segment, a resume on
// KC_REC_GAP, and a hole without it only inside the parser's skip (fed as
// filler: outside a skip the parser would choke on it).
func (b *bconn) feed() []rawRec {
	b.t.Helper()
	recs := b.e.drain()
	for _, r := range recs {
		if len(r.payload) == 0 {
			continue
		}
		dir := 0
		if r.reply {
			dir = 1
		}
		b.recs = append(b.recs, r)
		b.ts += 1000
		if dir == 0 {
			switch replyFraming(r.kernel) {
			case RepliesFramedFrom:
				b.rec.F.Pending.Align()
			case RepliesUnframed:
				b.rec.F.Pending.Unframed()
			}
		} else if r.kernel&RecUnframed != 0 {
			b.rec.F.Pending.Unframed()
		}
		if r.kernel&RecGap != 0 {
			b.rec.Resume(dir)
		} else if b.nextOK[dir] && r.seq != b.next[dir] {
			d := int32(r.seq - b.next[dir])
			if dir == 0 || d < 0 {
				b.t.Errorf("dir %d: record at %d, stream at %d, no KC_REC_GAP", dir, r.seq, b.next[dir])
				b.rec.Resume(dir)
			} else {
				b.rec.Replies(b.ts, bytes.Repeat([]byte{'x'}, int(d)))
				b.holes += int(d)
			}
		} else if !b.nextOK[dir] {
			b.t.Errorf("dir %d: first record at %d without KC_REC_GAP", dir, r.seq)
		}
		if dir == 0 {
			b.rec.Requests(b.ts, r.payload)
		} else {
			b.rec.Replies(b.ts, r.payload)
		}
		b.next[dir] = r.seq + uint32(len(r.payload))
		b.nextOK[dir] = true
	}
	return recs
}

// check: the keys named in copied get exactly the truth's bytes (when
// want is nil: all of copied), every other key nothing; no parse error.
func (b *bconn) check(copied []string, exact map[string]bool) {
	b.t.Helper()
	if len(b.rec.S.Errors) > 0 {
		b.t.Errorf("user space errors on the records: %v", b.rec.S.Errors)
	}
	name := func(k string) string { return replytest.Name(0, []byte(k)) }
	isCopied := map[string]bool{}
	for _, k := range copied {
		isCopied[name(k)] = true
		got, want := b.rec.S.Bytes[name(k)], b.all.S.Bytes[name(k)]
		if exact == nil || exact[k] {
			if got != want || want == 0 {
				b.t.Errorf("key %s: %d bytes from the records, %d from all the traffic", k, got, want)
			}
		} else if got != want && got != 0 {
			b.t.Errorf("key %s: %d bytes from the records, want %d or none", k, got, want)
		}
	}
	for k, v := range b.rec.S.Bytes {
		if !isCopied[k] && v != 0 {
			b.t.Errorf("key %s (not copied): %d bytes from the records", k, v)
		}
	}
}

func locateKeys(t *testing.T, e *kcEnv, keys ...string) {
	var bits [KernelBuckets / 64]uint64
	for _, k := range keys {
		b := bucketOf(0, k)
		bits[b/64] |= 1 << (b % 64)
	}
	if err := e.c.SetLocated(bits[:]); err != nil {
		t.Fatal(err)
	}
}

func pushMsg() string { return ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n" }

// TestKernelReplyRecords: request segments mixing copied and uncopied
// ones, then their replies whole, cut at random and byte by byte, with
// long values left out, MGET, HGETALL and a push between replies.
func TestKernelReplyRecords(t *testing.T) {
	e := openKCBytes(t)
	hot := []string{"hot", "hot2", "hh", "big"}
	locateKeys(t, e, hot...)
	rng := rand.New(rand.NewPCG(7, 7))
	val := func(n int) string { return strings.Repeat("v", n) }
	cutsets := map[string]func(n int) []int{
		"whole":  func(n int) []int { return every(n, 1400) }, // a test packet's most
		"every1": func(n int) []int { return every(n, 1) },
		"every7": func(n int) []int { return every(n, 7) },
		"random": func(n int) []int {
			var c []int
			for n > 0 {
				k := 1 + rng.IntN(1400)
				c = append(c, k)
				n -= k
			}
			return c
		},
	}
	for pname, prog := range progsKC(e.objs) {
		for cname, cuts := range cutsets {
			t.Run(pname+"/"+cname, func(t *testing.T) {
				e.t = t
				b := newBConn(t, e, prog)
				type seg struct {
					req    []byte
					rep    string
					copied bool
				}
				segs := []seg{
					{append(resp("GET", "a"), resp("GET", "b")...), bulkS(val(10)) + bulkS(val(20)), false},
					{append(append(resp("GET", "c"), resp("GET", "hot")...), resp("GET", "d")...), bulkS(val(30)) + bulkS(val(40)) + "$-1\r\n", true},
					{resp("GET", "e"), bulkS(val(300)), false},
					{append(resp("MGET", "x", "hot2", "y"), resp("GET", "z")...), "*3\r\n" + bulkS(val(5)) + bulkS(val(600)) + "$-1\r\n" + bulkS(val(7)), true},
					{resp("HGETALL", "hh"), "%2\r\n" + bulkS("f1") + bulkS(val(50)) + bulkS("f2") + bulkS(val(2000)), true},
					{resp("GET", "f"), bulkS(val(400)), false},
					{resp("GET", "big"), bulkS(val(1000)), true},
					{resp("GET", "g"), bulkS(val(3)), false},
					// An attribute goes with the reply it precedes.
					{resp("GET", "hot"), "|1\r\n+ttl\r\n:5\r\n" + bulkS(val(15)), true},
					{resp("GET", "h"), "|1\r\n+ttl\r\n:6\r\n" + bulkS(val(16)), false},
					{resp("GET", "hot2"), bulkS(val(17)), true},
				}
				var replies string
				for i, s := range segs {
					recs := b.req(s.req)
					if s.copied != (len(recs) == 1) {
						t.Fatalf("segment %d: %d records, copied %v", i, len(recs), s.copied)
					}
					if s.copied {
						f := replyFraming(recs[0].kernel)
						if want := map[bool]uint8{true: RepliesFramedFrom, false: RepliesFramed}[i == 1]; f != want {
							t.Errorf("segment %d: framing %d, want %d", i, f, want)
						}
					}
					replies += s.rep
					if i == 3 {
						replies += pushMsg()
					}
				}
				r := []byte(replies)
				b.rep(r, cuts(len(r))...)
				b.check([]string{"c", "hot", "d", "x", "hot2", "y", "z", "hh", "big"}, nil)
				var left bool
				for _, r := range b.recs {
					if r.reply && bytes.Contains(r.payload, []byte(val(600))) {
						t.Errorf("a 600-byte value copied: %d bytes", len(r.payload))
					}
					left = left || r.reply
				}
				if !left {
					t.Errorf("no reply record")
				}
				// hot2's 600 bytes and CRLF, inside the MGET reply: the next
				// record starts after them without a flag. hh's 2000 and
				// big's 1000 end their replies, and the next reply copied
				// after an uncopied one resumes the stream (KC_REC_GAP).
				if b.holes != 602 {
					t.Errorf("%d reply bytes left out inside a reply, want 602", b.holes)
				}
			})
		}
	}
}

// TestKernelReplyRecordsFailures: what the programs cannot deliver stops
// the copying at once, user space is told, and no reply is attributed to
// a wrong key.
func TestKernelReplyRecordsFailures(t *testing.T) {
	e := openKCBytes(t)
	var hot []string
	for i := range 12 {
		hot = append(hot, fmt.Sprintf("hot%d", i))
	}
	locateKeys(t, e, hot...)
	for pname, prog := range progsKC(e.objs) {
		t.Run(pname+"/ranges", func(t *testing.T) {
			e.t = t
			st0 := e.stats()
			b := newBConn(t, e, prog)
			// 10 copied requests between uncopied ones, their replies in
			// one segment: 10 ranges, the list holds 8.
			var replies string
			for i := range 10 {
				b.req(resp("GET", hot[i]))
				b.req(resp("GET", fmt.Sprintf("cold%d", i)))
				replies += bulkS(strings.Repeat("h", 10+i)) + bulkS(strings.Repeat("c", 100+i))
			}
			b.rep([]byte(replies))
			b.check(hot[:10], map[string]bool{})
			got := 0
			for _, k := range hot[:10] {
				if b.rec.S.Bytes[replytest.Name(0, []byte(k))] != 0 {
					got++
				}
			}
			if got != 8 {
				t.Errorf("%d of 10 copied replies attributed, want the 8 the list holds", got)
			}
			if st := e.stats(); st.ReplyCopyFailed == st0.ReplyCopyFailed {
				t.Errorf("no copy failure counted")
			}
			// The next copied request starts pairing afresh.
			recs := b.req(resp("GET", hot[10]))
			if len(recs) != 1 || replyFraming(recs[0].kernel) != RepliesFramedFrom {
				t.Errorf("request after the failure: %+v, want one FRAMED_FROM record", recs)
			}
			b.req(resp("GET", "cold10"))
			b.rep([]byte(bulkS("eleven") + bulkS("cold")))
			b.check(hot[:11], map[string]bool{hot[10]: true})
		})
		t.Run(pname+"/shed", func(t *testing.T) {
			e.t = t
			st0 := e.stats()
			b := newBConn(t, e, prog)
			b.req(resp("GET", hot[0]))
			// The next copied request is shed by flow sampling.
			if err := e.c.SetSampleLevel(127, time.Second); err != nil {
				t.Fatal(err)
			}
			recs := b.req(resp("GET", hot[1]))
			if err := e.c.SetSampleLevel(0, time.Second); err != nil {
				t.Fatal(err)
			}
			if len(recs) != 0 {
				t.Skipf("flow kept at the deepest sampling level")
			}
			b.req(resp("GET", "cold"))
			recs = b.req(resp("GET", hot[2]))
			if len(recs) != 1 || replyFraming(recs[0].kernel) != RepliesFramedFrom || recs[0].kernel&RecGap == 0 {
				t.Errorf("request after the shed one: %+v, want one FRAMED_FROM record resuming the stream", recs)
			}
			b.rep([]byte(bulkS("zero")+bulkS("one-one")+bulkS("cold-value")+bulkS("two-two-two")), 3, 5, 40)
			// hot0's reply came after the shed request: not copied (its
			// bytes unattributed); hot1's never; hot2's exactly.
			b.check(hot[:3], map[string]bool{hot[2]: true})
			if n := b.rec.S.Bytes[replytest.Name(0, []byte(hot[1]))]; n != 0 {
				t.Errorf("shed request's key got %d bytes", n)
			}
			if st := e.stats(); st.RequestsUnsent == st0.RequestsUnsent {
				t.Errorf("no unsent request counted")
			}
		})
		t.Run(pname+"/lost", func(t *testing.T) {
			e.t = t
			st0 := e.stats()
			b := newBConn(t, e, prog)
			b.req(resp("GET", hot[0]))
			b.req(resp("GET", hot[1]))
			r0, r1 := bulkS(strings.Repeat("a", 100)), bulkS(strings.Repeat("b", 200))
			rs := []byte(r0 + r1)
			// The reply side loses 100 bytes in the middle of the copied
			// replies: what user space has of them is dropped at the
			// next resume, and nothing is attributed to a wrong key.
			b.rep(rs[:50])
			b.rseq += 100
			b.all.Gap(1)
			b.rep(rs[150:])
			time.Sleep(3 * time.Millisecond) // a quiet point: the queue starts afresh
			recs := b.req(resp("GET", hot[2]))
			if len(recs) != 1 || replyFraming(recs[0].kernel) != RepliesFramedFrom {
				t.Errorf("request after the quiet point: %+v, want one FRAMED_FROM record", recs)
			}
			r2 := bulkS("two")
			b.rep([]byte(r2))
			// hot0's reply header came before the loss: user space
			// counts a bulk reply from its header, as with all the
			// traffic; hot1's header was lost.
			for i, want := range []uint64{uint64(len(r0)), 0, uint64(len(r2))} {
				if got := b.rec.S.Bytes[replytest.Name(0, []byte(hot[i]))]; got != want {
					t.Errorf("key %s: %d bytes from the records, want %d", hot[i], got, want)
				}
			}
			if st := e.stats(); st.ReplyCopyFailed == st0.ReplyCopyFailed {
				t.Errorf("no copy failure counted")
			}
			if len(b.rec.S.Errors) > 0 {
				t.Errorf("user space errors on the records: %v", b.rec.S.Errors)
			}
		})
	}
}

// TestKernelReplyRecordsStale: the reply ranges the framer chose for one
// reply segment are emitted for that segment only. A later segment the
// framer does not look at (a pure ACK or a FIN of the server, a reply of
// a connection with no reply state: a memcached port, a connection whose
// requests were never seen) emits nothing and blocks nothing: neither
// the previous segment's ranges cut out of its own bytes, nor a delivery
// failure charged to the previous connection.
func TestKernelReplyRecordsStale(t *testing.T) {
	e := openKCBytes(t)
	locateKeys(t, e, "hot")
	for pname, prog := range progsKC(e.objs) {
		t.Run(pname, func(t *testing.T) {
			e.t = t
			b := newBConn(t, e, prog)
			if recs := b.req(resp("GET", "hot")); len(recs) != 1 {
				t.Fatalf("the request of a located key: %d records, want 1", len(recs))
			}
			b.rep([]byte(bulkS(strings.Repeat("v", 40))))
			var replies int
			for _, r := range b.recs {
				if r.reply {
					replies++
				}
			}
			if replies != 1 {
				t.Fatalf("%d reply records for the located key's reply, want 1", replies)
			}
			before := e.stats()
			// The server's pure ACK, and a FIN without payload.
			e.run(prog, pkt{src: b.c.srv, dst: b.c.cli, flags: 0x10, seq: b.rseq, ack: b.c.seq})
			// A reply on a connection whose requests were never seen
			// (no reply state), and one on a memcached port.
			other := e.newConn(srv4, prog, false)
			e.run(prog, pkt{src: other.srv, dst: other.cli, flags: 0x18, seq: 5000, ack: other.seq, payload: []byte(bulkS(strings.Repeat("w", 60)))})
			mc := e.newConn(netip.AddrPortFrom(srv4.Addr(), 11211), prog, false)
			e.run(prog, pkt{src: mc.srv, dst: mc.cli, flags: 0x18, seq: 6000, ack: mc.seq, payload: []byte("VALUE k 0 60\r\n" + strings.Repeat("m", 60) + "\r\nEND\r\n")})
			for _, r := range e.drain() {
				if r.reply && len(r.payload) > 0 {
					t.Errorf("reply record of %d bytes at seq %d from a segment the framer did not take: %q", len(r.payload), r.seq, r.payload)
				}
			}
			if d := e.stats().ReplyCopyFailed - before.ReplyCopyFailed; d != 0 {
				t.Errorf("%d reply copies failed, want 0", d)
			}
			// The connection's next copied reply still reaches user space.
			b.req(resp("GET", "hot"))
			b.rep([]byte(bulkS(strings.Repeat("x", 30))))
			b.check([]string{"hot"}, nil)
		})
	}
}
