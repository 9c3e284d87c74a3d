package bpf

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/decode/redis"
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/internal/testing/replytest"
)

// Reply bytes in the kernel (KernelCountConfig.ReplyBytes): request
// segments and then reply segments run through the programs; each key's
// byte bucket must hold what the user-space reply attribution
// (decode/redis, replytest) gives it for the same bytes, in 64-byte units
// rounded up per reply: exactly for single-key replies, within the
// kernel's upper bound for MGET (an element's bytes plus the whole array
// header, where user space shares the header), and nothing at all for
// keys whose replies the programs could not pair.

func openKCBytes(t testing.TB) *kcEnv {
	t.Helper()
	return openKCReply(t, 300*time.Millisecond, true)
}

func openKCReply(t testing.TB, sub time.Duration, replyBytes bool) *kcEnv {
	t.Helper()
	c, objs, rd := openTestConfig(t, Config{Ports: []uint16{6379, 11211}, RingSize: 1 << 20, KernelCount: &KernelCountConfig{Commands: testRedisTable(),
		SubWindow: sub, Buckets: 4096, Protos: map[uint16]uint8{6379: uint8(decode.ProtoRedis), 11211: uint8(decode.ProtoMemcache)},
		ReplyBytes: replyBytes,
	}})
	return &kcEnv{t: t, c: c, objs: objs, rd: rd, sub: sub, ep0: c.KernelEpoch(), port: 43000}
}

// rconn is a connection run through the programs and through the
// user-space parsers (the ground truth) with the same bytes.
type rconn struct {
	*conn
	e    *kcEnv
	prog *ebpf.Program
	rseq uint32
	us   *replytest.Conn
	ts   int64
	// calls: every user-space ReplyKey, by "ns/key".
	calls map[string][]uint64
}

func (e *kcEnv) newRConn(prog *ebpf.Program) *rconn {
	c := &rconn{conn: e.newConn(srv4, prog, true), e: e, prog: prog, rseq: 7000, calls: map[string][]uint64{}}
	c.us = replytest.NewConn(redis.New(redis.Config{}), decode.PendingConfig{})
	c.us.S.Check = func(ns int32, k decode.Key, n uint64) {
		name := replytest.Name(ns, k.Bytes)
		c.calls[name] = append(c.calls[name], n)
	}
	c.ts = 1e9
	return c
}

// req sends one request segment to both.
func (c *rconn) req(b []byte) {
	c.e.t.Helper()
	c.e.send(c.prog, c.conn, b)
	c.ts += 10_000
	c.us.Requests(c.ts, b)
}

// rep sends reply bytes cut at the given lengths (the rest as a last
// segment) to both.
func (c *rconn) rep(b []byte, cuts ...int) {
	c.e.t.Helper()
	for len(b) > 0 {
		n := len(b)
		if len(cuts) > 0 {
			n, cuts = min(cuts[0], n), cuts[1:]
		}
		c.e.run(c.prog, pkt{src: c.srv, dst: c.cli, flags: 0x18, seq: c.rseq, ack: c.seq, payload: b[:n]})
		c.rseq += uint32(n)
		c.ts += 10_000
		c.us.Replies(c.ts, b[:n])
		b = b[n:]
	}
	c.e.drain()
}

// every cuts n bytes into segments of k.
func every(n, k int) []int {
	var out []int
	for ; n > 0; n -= k {
		out = append(out, k)
	}
	return out
}

// bexpect accumulates the expected byte units per kernel bucket: lo..hi.
type bexpect struct {
	lo, hi map[int]uint64
	never  map[int]string // buckets of keys whose replies must go to no key
}

func newBExpect() *bexpect {
	return &bexpect{lo: map[int]uint64{}, hi: map[int]uint64{}, never: map[int]string{}}
}

func units(n uint64) uint64 { return (n + 63) / 64 }

func bucketOf(ns int32, key string) int {
	return detect.Bucket(detect.Identity(srv4, decode.ProtoRedis, ns, []byte(key)), KernelBuckets)
}

// exact: key's kernel bytes are user space's, reply by reply, rounded up.
func (x *bexpect) exact(t testing.TB, c *rconn, key string) {
	t.Helper()
	calls := c.calls["0/"+key]
	if len(calls) == 0 {
		t.Fatalf("user space attributed nothing to %q", key)
	}
	var u uint64
	for _, n := range calls {
		u += units(n)
	}
	b := bucketOf(0, key)
	x.lo[b] += u
	x.hi[b] += u
}

// upper: key's kernel bytes are at least user space's and at most its
// replies plus slack bytes each (MGET: the array header).
func (x *bexpect) upper(t testing.TB, c *rconn, key string, slack uint64) {
	t.Helper()
	calls := c.calls["0/"+key]
	if len(calls) == 0 {
		t.Fatalf("user space attributed nothing to %q", key)
	}
	b := bucketOf(0, key)
	for _, n := range calls {
		x.lo[b] += units(n)
		x.hi[b] += units(n + slack)
	}
}

// none: the kernel gives key nothing (user space may).
func (x *bexpect) none(key string) { x.never[bucketOf(0, key)] = key }

// bcounts waits for the sub-windows since the env opened to end and sums
// their byte counts.
func (e *kcEnv) bcounts() []uint32 {
	e.t.Helper()
	return e.sumEnded(func(ep, now int64, out []uint32) (bool, error) {
		_, ok, err := e.c.ReadKernelByteCountsAt(ep, now, out, nil)
		return ok, err
	})
}

func (x *bexpect) check(t testing.TB, got []uint32) {
	t.Helper()
	for b, v := range got {
		lo, hi := x.lo[b], x.hi[b]
		if k, ok := x.never[b]; ok && lo == 0 && v != 0 {
			t.Errorf("bucket %d (%q, whose replies the programs cannot pair): %d units, want none", b, k, v)
			continue
		}
		if uint64(v) < lo || uint64(v) > hi {
			if lo == hi {
				t.Errorf("bucket %d: %d units, want %d", b, v, lo)
			} else {
				t.Errorf("bucket %d: %d units, want %d..%d", b, v, lo, hi)
			}
		}
	}
}

func bulkS(v string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(v), v) }

// getsV is a pipeline of GETs of keys prefix:from .. prefix:to-1, and their
// replies (each the value "v").
func getsV(prefix string, from, to int) (req, rep []byte) {
	for i := from; i < to; i++ {
		req = append(req, resp("GET", fmt.Sprintf("%s:%d", prefix, i))...)
		rep = append(rep, bulkS("v")...)
	}
	return req, rep
}

// TestKernelReplyBytes: the cases of the brief, per program.
func TestKernelReplyBytes(t *testing.T) {
	e := openKCBytes(t)
	for _, pname := range []string{"tc", "xdp"} {
		prog := progsKC(e.objs)[pname]
		t.Run(pname, func(t *testing.T) {
			e.t = t
			x := newBExpect()
			p := func(k string) string { return pname + ":" + k } // keys distinct per program

			// -P 1: small values, nil, an error, integers; a 100 KB
			// value over many segments, one cut inside its header.
			c := e.newRConn(prog)
			c.req(resp("GET", p("s1")))
			c.rep([]byte(bulkS("hello")))
			c.req(resp("GET", p("s2")))
			c.rep([]byte("$-1\r\n"))
			c.req(resp("GET", p("s3")))
			c.rep([]byte("_\r\n"))
			c.req(resp("GET", p("s4")))
			c.rep([]byte("-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"))
			c.req(resp("STRLEN", p("s5")))
			c.rep([]byte(":5\r\n"))
			c.req(resp("GET", p("big")))
			big := bulkS(strings.Repeat("v", 100<<10))
			c.rep([]byte(big), append([]int{3}, every(len(big), 1400)...)...)
			c.req(resp("GET", p("s6")))
			c.rep([]byte(bulkS(strings.Repeat("w", 200))), 70, 70)
			for _, k := range []string{"s1", "s2", "s3", "s4", "s5", "big", "s6"} {
				x.exact(t, c, p(k))
			}

			// A pipeline of 16 GETs: answered in one segment, a byte a
			// segment, and at random offsets (inside headers, values and
			// CRLFs).
			rng := rand.New(rand.NewPCG(1, 2))
			for _, scheme := range []string{"one", "bytes", "random", "sevens"} {
				c := e.newRConn(prog)
				var req, rep []byte
				var keys []string
				for i := range 16 {
					k := p(fmt.Sprintf("%s:p%d", scheme, i))
					keys = append(keys, k)
					req = append(req, resp("GET", k)...)
					switch i % 4 {
					case 0:
						rep = append(rep, bulkS(strings.Repeat("x", i*37))...)
					case 1:
						rep = append(rep, "$-1\r\n"...)
					case 2:
						rep = append(rep, bulkS(strings.Repeat("y", 130+i))...)
					default:
						rep = append(rep, "-ERR no\r\n"...)
					}
				}
				c.req(req)
				var cuts []int
				switch scheme {
				case "bytes":
					cuts = every(len(rep), 1)
				case "sevens":
					cuts = every(len(rep), 7)
				case "random":
					for n := len(rep); n > 0; {
						k := 1 + rng.IntN(40)
						cuts = append(cuts, k)
						n -= k
					}
				}
				c.rep(rep, cuts...)
				for _, k := range keys {
					x.exact(t, c, k)
				}
			}

			// MGET: each element its bytes and the whole header (upper
			// bound); HMGET; HGETALL as a RESP2 array and a RESP3 map.
			c = e.newRConn(prog)
			c.req(resp("MGET", p("m1"), p("m2"), p("m3")))
			c.rep([]byte("*3\r\n"+bulkS("xy")+"$-1\r\n"+bulkS(strings.Repeat("z", 3000))), 9, 500)
			c.req(resp("HGETALL", p("h2")))
			c.rep([]byte("*4\r\n" + bulkS("f1") + bulkS("v1") + bulkS("f2") + bulkS("v2")))
			c.req(resp("HGETALL", p("h3")))
			c.rep([]byte("%2\r\n"+bulkS("f1")+bulkS("v1")+bulkS("f2")+":2\r\n"), 2, 5, 11)
			c.req(resp("HMGET", p("hm"), "f1", "f2"))
			c.rep([]byte("*2\r\n" + bulkS("x") + "$-1\r\n"))
			for _, k := range []string{"m1", "m2", "m3"} {
				x.upper(t, c, p(k), 4)
			}
			for _, k := range []string{"h2", "h3", "hm"} {
				x.exact(t, c, p(k))
			}

			// A RESP3 push between replies answers nothing; an attribute
			// goes with the reply after it; a write between reads.
			c = e.newRConn(prog)
			c.req(append(resp("GET", p("r1")), resp("GET", p("r2"))...))
			c.rep([]byte(bulkS("1")+">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\na\r\n"+"|1\r\n+ttl\r\n:3\r\n"+bulkS("2")), 5, 20)
			c.req(append(append(resp("GET", p("w1")), resp("SET", p("w2"), "v")...), resp("GET", p("w3"))...))
			c.rep([]byte(bulkS("aaa") + "+OK\r\n" + bulkS("bbb")))
			for _, k := range []string{"r1", "r2", "w1", "w3"} {
				x.exact(t, c, p(k))
			}
			x.none(p("w2"))

			// A fallback (an inline command) stops pairing: its reply,
			// and the next segments' (copied to resync the parser, then
			// counted before a quiet point), go to no key; after 1 ms of
			// quiet both ways pairing starts afresh.
			before := e.stats()
			c = e.newRConn(prog)
			c.req(resp("GET", p("f1")))
			c.rep([]byte(bulkS("one")))
			c.req([]byte("GET " + p("f2") + "\r\n"))
			c.rep([]byte(bulkS("two")))
			c.req(resp("GET", p("f3")))
			c.rep([]byte(bulkS("three")))
			c.req(resp("GET", p("f4")))
			c.rep([]byte(bulkS("four")))
			time.Sleep(3 * time.Millisecond)
			c.req(resp("GET", p("f5")))
			c.rep([]byte(bulkS("five")))
			x.exact(t, c, p("f1"))
			x.exact(t, c, p("f5"))
			for _, k := range []string{"f2", "f3", "f4"} {
				x.none(p(k))
			}
			after := e.stats()
			if d := after.QueueLost - before.QueueLost; d != 1 {
				t.Errorf("queue lost %d, want 1", d)
			}
			if d := after.QueueWait - before.QueueWait; d != 1 {
				t.Errorf("queue wait %d, want 1 (f4)", d)
			}
			if d := after.QueueResync - before.QueueResync; d != 1 {
				t.Errorf("resyncs %d, want 1", d)
			}
			un := func(r UnattrReason) uint64 { return after.Unattributed[r] - before.Unattributed[r] }
			if un(UnattrUnpaired) != uint64(len(bulkS("two"))) || un(UnattrUnsynced) != uint64(len(bulkS("three"))+len(bulkS("four"))) {
				t.Errorf("unattributed: unpaired %d (want %d), unsynced %d (want %d)", un(UnattrUnpaired), len(bulkS("two")),
					un(UnattrUnsynced), len(bulkS("three"))+len(bulkS("four")))
			}

			x.check(t, e.bcounts())
			st := e.stats()
			t.Logf("stats: %+v", st)
			// Every reply byte once: attributed, or to no key by reason.
			checkReplyTotals(t, st)
			for _, r := range []UnattrReason{UnattrBad, UnattrDepth, UnattrGap, UnattrSteps, UnattrNoFlow, UnattrLoad, UnattrRace} {
				if st.Unattributed[r] != 0 {
					t.Errorf("unattributed %s: %d bytes", r, st.Unattributed[r])
				}
			}
		})
	}
}

// TestKernelReplyBytesLimits: what the programs do not pair goes to no key,
// counted by reason, and pairing resumes after a quiet point: a reply
// segment seen twice, a lost reply segment, a queue that overflows,
// nesting past KC_RDEPTH, pub/sub.
func TestKernelReplyBytesLimits(t *testing.T) {
	e := openKCBytes(t)
	prog := e.objs.HotsniffTcIngress
	x := newBExpect()
	un := func(before KernelStats, r UnattrReason) uint64 {
		return e.stats().Unattributed[r] - before.Unattributed[r]
	}

	// A reply segment seen again (cgroup's second view, a retransmission)
	// counts once.
	c := e.newRConn(prog)
	c.req(resp("GET", "dup"))
	before := e.stats()
	rep := []byte(bulkS(strings.Repeat("d", 100)))
	e.run(prog, pkt{src: c.srv, dst: c.cli, flags: 0x18, seq: c.rseq, ack: c.seq, payload: rep})
	e.run(prog, pkt{src: c.srv, dst: c.cli, flags: 0x18, seq: c.rseq, ack: c.seq, payload: rep})
	c.rseq += uint32(len(rep))
	c.us.Replies(c.ts+1, rep)
	if d := e.stats().ReplyDuplicate - before.ReplyDuplicate; d != uint64(len(rep)) {
		t.Errorf("duplicate reply bytes %d, want %d", d, len(rep))
	}
	x.exact(t, c, "dup")

	// A reply segment lost: the next one is a gap, and pairing waits for
	// a quiet point.
	c = e.newRConn(prog)
	c.req(append(resp("GET", "g1"), resp("GET", "g2")...))
	c.rep([]byte(bulkS("first")))
	c.rseq += 11 // g2's reply, never seen
	c.us.Gap(1)
	before = e.stats()
	c.req(resp("GET", "g3"))
	c.rep([]byte(bulkS("third")))
	if d := un(before, UnattrGap); d != 11 {
		t.Errorf("gap bytes %d, want 11", d)
	}
	time.Sleep(3 * time.Millisecond)
	c.ts += 5e6 // user space's quiet point, in packet time
	c.req(resp("GET", "g4"))
	c.rep([]byte(bulkS("fourth")))
	x.exact(t, c, "g1")
	x.exact(t, c, "g4")
	x.none("g2")
	x.none("g3")

	// More outstanding entries than a queue holds: the segment that does
	// not fit, and what follows, go to no key.
	c = e.newRConn(prog)
	before = e.stats()
	var replies []byte
	for s := range 3 {
		req, rep := getsV(fmt.Sprintf("q%d", s), 0, 100)
		c.req(req)
		replies = append(replies, rep...)
	}
	c.rep(replies, every(len(replies), 1000)...)
	if d := e.stats().QueueFull - before.QueueFull; d != 1 {
		t.Errorf("queue full %d, want 1", d)
	}
	for s := range 3 {
		for i := range 100 {
			if k := fmt.Sprintf("q%d:%d", s, i); s < 2 {
				x.exact(t, c, k)
			} else {
				x.none(k)
			}
		}
	}

	// The request side looks at the reply side's tail only when the
	// queue looks full from the tail it saw last: a queue the replies
	// have drained since is not full (and the entries are paired).
	c = e.newRConn(prog)
	before = e.stats()
	for s, n := range []int{200, 100, 200} {
		var replies []byte
		for from := 0; from < n; from += 100 { // 100 GETs a segment
			req, rep := getsV(fmt.Sprintf("d%d", s), from, min(from+100, n))
			c.req(req)
			replies = append(replies, rep...)
		}
		c.rep(replies, every(len(replies), 1000)...)
	}
	if d := e.stats().QueueFull - before.QueueFull; d != 0 {
		t.Errorf("queue full %d after the replies drained it, want 0", d)
	}
	for s, n := range []int{200, 100, 200} {
		for i := range n {
			x.exact(t, c, fmt.Sprintf("d%d:%d", s, i))
		}
	}

	// Nesting deeper than the programs follow.
	c = e.newRConn(prog)
	before = e.stats()
	c.req(resp("LRANGE", "deep", "0", "-1"))
	c.rep([]byte(strings.Repeat("*1\r\n", 9) + bulkS("x")))
	if d := un(before, UnattrDepth); d != 9*4+7 {
		t.Errorf("%d bytes unattributed for depth, want the reply's %d", d, 9*4+7)
	}
	x.none("deep")

	// After SUBSCRIBE, replies answer no request.
	c = e.newRConn(prog)
	before = e.stats()
	c.req(append(resp("SUBSCRIBE", "ch"), resp("GET", "sub")...))
	c.rep([]byte("*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n" + "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\nsub\r\n"))
	if d := un(before, UnattrDead); d == 0 {
		t.Errorf("no bytes unattributed after SUBSCRIBE")
	}
	x.none("sub")

	x.check(t, e.bcounts())
	st := e.stats()
	t.Logf("stats: %+v", st)
	checkReplyTotals(t, st)
}

// checkReplyTotals: every reply byte once: attributed, to no key by
// reason, or a duplicate.
func checkReplyTotals(t *testing.T, st KernelStats) {
	t.Helper()
	sum := st.ReplyAttr + st.ReplyDuplicate
	for _, v := range st.Unattributed {
		sum += v
	}
	if sum != st.ReplyBytes {
		t.Errorf("reply bytes %d, attributed %d + duplicate %d + unattributed %v = %d", st.ReplyBytes, st.ReplyAttr, st.ReplyDuplicate, st.Unattributed, sum)
	}
}

// TestKernelReplyBytesRandom: random pipelines of reads, multi-key reads,
// writes and pings with random RESP2/RESP3 replies (values up to 6 KB,
// nil, errors, integers, arrays, maps, sets, pushes between replies,
// attributes before them) cut at random offsets. Each bucket must hold
// exactly the kernel's rule (a reply's bytes, rounded up, for each of its
// read keys; an MGET element its bytes and the array header), and at
// least what user space attributes to its keys on the same bytes.
func TestKernelReplyBytesRandom(t *testing.T) {
	e := openKCBytes(t)
	for _, pname := range []string{"tc", "xdp"} {
		prog := progsKC(e.objs)[pname]
		t.Run(pname, func(t *testing.T) {
			e.t = t
			rng := rand.New(rand.NewPCG(7, uint64(len(pname))))
			model := map[int]uint64{} // bucket: units by the kernel's rule
			var conns []*rconn
			var keys []string
			nk := 0
			key := func() string {
				nk++
				k := fmt.Sprintf("%s:k%d", pname, nk)
				keys = append(keys, k)
				return k
			}
			bulkN := func() string {
				switch rng.IntN(6) {
				case 0:
					return "$-1\r\n"
				case 1:
					return "_\r\n"
				case 2:
					return bulkS(strings.Repeat("b", rng.IntN(6000)))
				default:
					return bulkS(strings.Repeat("s", rng.IntN(100)))
				}
			}
			push := ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\na\r\n"
			for range 6 {
				c := e.newRConn(prog)
				conns = append(conns, c)
				for range 8 {
					var req, rep []byte
					for range 1 + rng.IntN(20) {
						var attr string
						if rng.IntN(8) == 0 {
							attr = "|1\r\n+ttl\r\n:3\r\n"
						}
						if rng.IntN(8) == 0 {
							rep = append(rep, push...)
						}
						var r string
						var ks []string
						pe := false
						switch rng.IntN(8) {
						case 0: // MGET
							n := 1 + rng.IntN(5)
							args := []string{"MGET"}
							for range n {
								ks = append(ks, key())
							}
							req = append(req, resp(append(args, ks...)...)...)
							if rng.IntN(6) == 0 {
								r = "-ERR busy\r\n"
								break
							}
							pe = true
							hdr := attr + fmt.Sprintf("*%d\r\n", n)
							r = hdr
							for _, k := range ks {
								el := bulkN()
								r += el
								model[bucketOf(0, k)] += units(uint64(len(el) + len(hdr)))
							}
						case 1: // EXISTS of several keys: the whole reply to each
							n := 1 + rng.IntN(4)
							for range n {
								ks = append(ks, key())
							}
							req = append(req, resp(append([]string{"EXISTS"}, ks...)...)...)
							r = fmt.Sprintf(":%d\r\n", rng.IntN(n+1))
						case 2: // HGETALL: RESP2 array or RESP3 map
							ks = []string{key()}
							req = append(req, resp("HGETALL", ks[0])...)
							m := rng.IntN(4)
							if rng.IntN(2) == 0 {
								r = fmt.Sprintf("*%d\r\n", 2*m)
							} else {
								r = fmt.Sprintf("%%%d\r\n", m)
							}
							for range 2 * m {
								r += bulkN()
							}
						case 3: // SMEMBERS: a RESP3 set
							ks = []string{key()}
							req = append(req, resp("SMEMBERS", ks[0])...)
							m := rng.IntN(4)
							r = fmt.Sprintf("~%d\r\n", m)
							for range m {
								r += "+member\r\n"
							}
						case 4:
							req = append(req, resp("SET", key(), "v")...)
							r = "+OK\r\n"
						case 5:
							req = append(req, resp("PING")...)
							r = "+PONG\r\n"
						default:
							ks = []string{key()}
							req = append(req, resp("GET", ks[0])...)
							r = bulkN()
							if rng.IntN(10) == 0 {
								r = "-ERR " + strings.Repeat("e", rng.IntN(80)) + "\r\n"
							}
						}
						if !pe {
							r = attr + r
							for _, k := range ks {
								model[bucketOf(0, k)] += units(uint64(len(r)))
							}
						}
						rep = append(rep, r...)
					}
					c.req(req)
					var cuts []int
					for n := len(rep); n > 0; {
						k := 1 + rng.IntN(1400)
						if rng.IntN(3) == 0 {
							k = 1 + rng.IntN(8)
						}
						cuts = append(cuts, k)
						n -= k
					}
					c.rep(rep, cuts...)
				}
			}
			// User space's attribution per bucket: a lower bound.
			lo := map[int]uint64{}
			for _, c := range conns {
				for name, calls := range c.calls {
					for _, n := range calls {
						lo[bucketOf(0, strings.TrimPrefix(name, "0/"))] += units(n)
					}
				}
			}
			got := e.bcounts()
			for b, v := range got {
				if uint64(v) != model[b] {
					t.Errorf("bucket %d: %d units, want %d", b, v, model[b])
				}
				if uint64(v) < lo[b] {
					t.Errorf("bucket %d: %d units, below user space's %d", b, v, lo[b])
				}
			}
			st := e.stats()
			checkReplyTotals(t, st)
			var unattr uint64
			for r, v := range st.Unattributed {
				if r != int(UnattrNoKey) && r != int(UnattrPush) {
					unattr += v
				}
			}
			if unattr != 0 {
				t.Errorf("unattributed %v", st.Unattributed)
			}
			t.Logf("%d keys, %d replies attributed, %d reply bytes", len(keys), st.ReplyReplies, st.ReplyBytes)
		})
	}
}

// BenchmarkKernelReplyBytes: one op is a -P 16 pipeline of GETs counted in
// the kernel and its replies (16 values of 32 bytes) in one segment, each
// a BPF_PROG_TEST_RUN of the TC program; request-ns and reply-ns are the
// program's run time per segment as the kernel measures it.
func BenchmarkKernelReplyBytes(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("reply_bytes=%v", on), func(b *testing.B) {
			e := openKCReply(b, time.Hour, on)
			prog := e.objs.HotsniffTcIngress
			c := e.newConn(srv4, prog, true)
			var req, rep []byte
			for i := range 16 {
				req = append(req, resp("GET", fmt.Sprintf("key:%012d", i))...)
				rep = append(rep, bulkS(strings.Repeat("v", 32))...)
			}
			rseq := uint32(9000)
			// The programs' own time, as the kernel measures the run
			// (not the system call and the packet's allocation).
			var in, out time.Duration
			run := func(p pkt) time.Duration {
				_, d, err := prog.Benchmark(p.bytes(), 1, nil)
				if err != nil {
					b.Fatal(err)
				}
				return d
			}
			for b.Loop() {
				in += run(pkt{src: c.cli, dst: c.srv, flags: 0x18, seq: c.seq, ack: rseq, payload: req})
				c.seq += uint32(len(req))
				out += run(pkt{src: c.srv, dst: c.cli, flags: 0x18, seq: rseq, ack: c.seq, payload: rep})
				rseq += uint32(len(rep))
			}
			b.ReportMetric(float64(in.Nanoseconds())/float64(b.N), "request-ns/op")
			b.ReportMetric(float64(out.Nanoseconds())/float64(b.N), "reply-ns/op")
			if st := e.stats(); on && st.ReplyReplies < 16*uint64(b.N) {
				b.Fatalf("%d replies attributed, want %d", st.ReplyReplies, 16*b.N)
			}
		})
	}
}

// FuzzKernelReplyBytes: for commands drawn from the fuzz input and any
// reply bytes cut anywhere, every reply byte is counted once (attributed,
// duplicate or unattributed by reason), and the programs add bytes only
// to buckets where the user-space attribution on the same bytes adds some
// (they never pair more than user space, nor differently).
func FuzzKernelReplyBytes(f *testing.F) {
	for _, c := range []struct{ cmds, rep string }{
		{"\x00\x00", bulkS("a") + bulkS("bb")},
		{"\x01\x02\x00", "*2\r\n" + bulkS("x") + "$-1\r\n" + "+OK\r\n" + bulkS("y")},
		{"\x03\x04", "%1\r\n+a\r\n:1\r\n+PONG\r\n"},
		{"\x00\x05\x00", bulkS("1") + ":2\r\n" + ">1\r\n+x\r\n" + bulkS("3")},
		{"\x00\xff\x00", bulkS("1") + "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n" + bulkS("2")},
		{"\x00", "*99999999999\r\n$-7\r\n%-1\r\n|0\r\n>0\r\n"},
		{"\x00\x00", "|1\r\n+ttl\r\n:3\r\n" + bulkS(strings.Repeat("v", 300)) + "-ERR x\r\n"},
	} {
		f.Add([]byte(c.cmds), []byte(c.rep), uint64(len(c.rep)))
	}
	env := openKCReply(f, time.Hour, true)
	f.Fuzz(func(t *testing.T, cmds, rep []byte, seed uint64) {
		if len(cmds) == 0 || len(cmds) > 64 || len(rep) == 0 || len(rep) > 8000 {
			return
		}
		if env.port > 65000 {
			env.port = 43000 // before the copy: ports must not wrap onto a cache port
		}
		e := *env
		e.t = t
		prog := e.objs.HotsniffTcIngress
		c := e.newRConn(prog)
		env.port = e.port
		var req []byte
		for i, b := range cmds {
			k := fmt.Sprintf("z%d", i)
			if b == 0xff {
				b = 6 // SUBSCRIBE: rare, or most inputs would end pairing
			} else {
				b %= 6
			}
			switch b {
			case 0:
				req = append(req, resp("GET", k)...)
			case 1:
				req = append(req, resp("MGET", k, k+"b")...)
			case 2:
				req = append(req, resp("SET", k, "v")...)
			case 3:
				req = append(req, resp("HGETALL", k)...)
			case 4:
				req = append(req, resp("PING")...)
			case 5:
				req = append(req, resp("EXISTS", k, k+"b")...)
			default:
				req = append(req, resp("SUBSCRIBE", "ch")...)
			}
		}
		rng := rand.New(rand.NewPCG(seed, 1))
		var cuts []int
		for n := len(rep); n > 0; {
			k := 1 + rng.IntN(64)
			cuts = append(cuts, k)
			n -= k
		}
		before := e.stats()
		b0 := make([]uint32, KernelBuckets)
		if _, err := e.c.readKernelSlot(e.c.KernelEpoch(), b0, nil, e.c.kcBytes()); err != nil {
			t.Fatal(err)
		}
		c.req(req)
		c.rep(rep, cuts...)
		b1 := make([]uint32, KernelBuckets)
		if _, err := e.c.readKernelSlot(e.c.KernelEpoch(), b1, nil, e.c.kcBytes()); err != nil {
			t.Fatal(err)
		}
		user := map[int]bool{}
		for name, calls := range c.calls {
			for _, n := range calls {
				if n > 0 {
					user[bucketOf(0, strings.TrimPrefix(name, "0/"))] = true
				}
			}
		}
		for b := range b1 {
			if b1[b] != b0[b] && !user[b] {
				t.Fatalf("bucket %d: %d units from the kernel, none from user space (calls %v)", b, b1[b]-b0[b], c.calls)
			}
		}
		after := e.stats()
		d := after.ReplyAttr - before.ReplyAttr + after.ReplyDuplicate - before.ReplyDuplicate
		for r := range after.Unattributed {
			d += after.Unattributed[r] - before.Unattributed[r]
		}
		// Never counted twice: a reply still being framed at the end
		// is counted only when it completes, and one whose value is
		// still to come is counted whole (the bytes still to skip too,
		// as user space does), so the count is at most the bytes sent
		// or user space's count. (Exactness on whole streams: the
		// tests above, checkReplyTotals.)
		got := after.ReplyBytes - before.ReplyBytes
		if got != uint64(len(rep)) || d > max(got, c.us.S.Total) {
			t.Fatalf("reply bytes %d (sent %d, user space counted %d), counted once each: %d (client %v; stats before %+v after %+v)", got, len(rep), c.us.S.Total, d, c.cli, before, after)
		}
	})
}
