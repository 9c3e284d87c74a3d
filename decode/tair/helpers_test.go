package tair

import (
	"fmt"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
)

// rec is one reported key with its request.
type rec struct {
	Op     string
	NS     int32
	Write  bool
	Key    string
	Weight uint32
	Prefix bool
}

func (r rec) String() string {
	return fmt.Sprintf("{%s ns=%d w=%v %q x%d p=%v}", r.Op, r.NS, r.Write, r.Key, r.Weight, r.Prefix)
}

// recSink records what a parser reports.
type recSink struct {
	decode.Discard
	reqs []decode.Request
	keys []rec
	errs map[string]int
	// keyless counts requests without a key, checked by the ordering rule
	// that Key always follows its Request.
	lastReq bool
}

func newSink() *recSink { return &recSink{errs: map[string]int{}} }

func (s *recSink) Request(_ *decode.Flow, r *decode.Request) {
	s.reqs = append(s.reqs, *r)
	s.lastReq = true
}

func (s *recSink) Key(_ *decode.Flow, r *decode.Request, k decode.Key) {
	if !s.lastReq {
		panic("Key without a Request")
	}
	if k.Weight < 1 || len(k.Bytes) == 0 {
		panic(fmt.Sprintf("bad key %+v", k))
	}
	s.keys = append(s.keys, rec{r.Op, r.NS, r.Write, string(k.Bytes), k.Weight, k.Prefix})
}

func (s *recSink) Error(_ *decode.Flow, reason string) { s.errs[reason]++ }

func (s *recSink) nerrs() int {
	n := 0
	for _, v := range s.errs {
		n += v
	}
	return n
}

// feed drives p the way the stream layer does: it appends each chunk to the
// unconsumed tail, calls Parse, keeps what was not consumed and honours skip
// returns. It fails the test when the tail grows beyond bound, which would
// mean the parser asks for unbounded buffering. chunk returns the next
// chunk size.
func feed(t testing.TB, p decode.Parser, stream []byte, chunk func() int, s decode.Sink, bound int) {
	t.Helper()
	var f decode.Flow
	var buf []byte
	skip := 0
	for pos := 0; pos < len(stream); {
		n := min(max(chunk(), 1), len(stream)-pos)
		c := stream[pos : pos+n]
		pos += n
		if skip > 0 {
			d := min(skip, len(c))
			c, skip = c[d:], skip-d
			if len(c) == 0 {
				continue
			}
		}
		buf = append(buf, c...)
		used := p.Parse(buf, &f, s)
		if used < 0 {
			t.Fatalf("Parse returned %d", used)
		}
		if used > len(buf) {
			skip = used - len(buf)
			used = len(buf)
		}
		// Copy the tail to a fresh slice and poison the old one, so a
		// parser that kept b would see garbage.
		rest := append([]byte(nil), buf[used:]...)
		for i := range buf {
			buf[i] = 0xA5
		}
		buf = rest
		if len(buf) > bound {
			t.Fatalf("tail grew to %d bytes (bound %d)", len(buf), bound)
		}
	}
}

func whole() int { return 1 << 30 }
func one() int   { return 1 }

func sameRecs(t testing.TB, what string, got, want []rec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d keys, want %d\n got %v\nwant %v", what, len(got), len(want), got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: key %d: got %v, want %v", what, i, got[i], want[i])
		}
	}
}
