package bpf

import (
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/decode/redis"
	"github.com/hotsniff/hotsniff/detect"
)

// readSink collects the weighted reads a decoder reports, by bucket.
type readSink struct {
	decode.Discard
	srv  decode.Flow
	want map[int]uint32
}

func (s *readSink) Request(*decode.Flow, *decode.Request) {}
func (s *readSink) Error(*decode.Flow, string)            {}
func (s *readSink) Key(f *decode.Flow, r *decode.Request, k decode.Key) {
	if r.Write {
		return
	}
	w := k.Weight
	if w == 0 {
		w = 1
	}
	s.want[detect.Bucket(detect.Identity(f.Server, f.Proto, r.NS, k.Bytes), KernelBuckets)] += w
}

// slotCounts sums every CPU's counts of the current kernel sub-window.
func slotCounts(t *testing.T, c *Capture) []uint32 {
	out := make([]uint32, KernelBuckets)
	if _, err := c.readKernelSlot(c.KernelEpoch(), out, nil, c.kcReads()); err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzKernelCountRedis: for any request segment, what the programs count
// in the kernel is what the user-space decoder reports for the same bytes,
// read by read and bucket by bucket; a segment they do not count whole
// changes no count. (The programs run for real: root.)
func FuzzKernelCountRedis(f *testing.F) {
	for _, s := range [][]byte{
		resp("GET", "foo"),
		append(resp("MGET", "a", "b"), resp("HMGET", "h", "x", "y", "z")...),
		append(append(resp("SELECT", "3"), resp("GET", "a")...), resp("MULTI")...),
		append(append(append(resp("MULTI"), resp("SELECT", "5")...), resp("DISCARD")...), resp("GET", "a")...),
		resp("SET", "k", "v"),
		resp("GET", "a", "b"),
		[]byte("*2\r\n$03\r\nGET\r\n$1\r\na\r\n"),
		[]byte("*2\r\n$3\r\nget\r\n$0\r\n\r\n"),
		resp("ECHO", "hotsniff:absorbed:1 5 50 foo"),
		resp("MSET", "a", "1", "b"),
		resp("ZMSCORE", "z", "m1", "m2"),
	} {
		f.Add(s)
	}
	// One sub-window for the whole run: counts are compared within it.
	env := openKCSub(f, time.Hour)
	f.Fuzz(func(t *testing.T, payload []byte) {
		if len(payload) == 0 || len(payload) > 3000 {
			return
		}
		if env.port > 65000 {
			// Before the copy below: a client port past 65535 wraps onto
			// the server ports. Flow states are LRU: an old one is
			// replaced by the SYN.
			env.port = 41000
		}
		e := *env
		e.t = t
		prog := e.objs.HotsniffTcIngress
		c := e.newConn(srv4, prog, true)
		env.port = e.port
		before := slotCounts(t, e.c)
		recs := e.send(prog, c, payload)
		after := slotCounts(t, e.c)
		counted := len(recs) == 0 || recs[0].kernel&RecCounted != 0
		s := &readSink{want: map[int]uint32{}}
		fl := decode.Flow{Server: srv4, Proto: decode.ProtoRedis}
		p := redis.New(redis.Config{}).NewParser(decode.ToServer, false)
		p.Parse(payload, &fl, s)
		for b := range after {
			got := after[b] - before[b]
			want := uint32(0)
			if counted {
				want = s.want[b]
			}
			if got != want {
				t.Fatalf("%q (counted %v): bucket %d: kernel %d, decoder %d", payload, counted, b, got, want)
			}
		}
	})
}
