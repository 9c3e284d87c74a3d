package tair

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/internal/testing/replytest"
	"github.com/hotsniff/hotsniff/internal/testing/tairwire"
)

// TestReplyAttribution: responses pair with requests by channel id in any
// order; a frame (header and body) is split evenly between the request's
// read keys; a write's response and pushes go to no key.
func TestReplyAttribution(t *testing.T) {
	p := tairwire.Plain
	var req, rep []byte
	req = tairwire.AppendGet(req, 1, 3, p("a"))
	req = tairwire.AppendGet(req, 2, 3, p("b"), p("c"), p("d"))
	req = tairwire.AppendPut(req, 3, 3, 0, 0, p("w"), p("value"))
	req = tairwire.AppendPrefixGets(req, 4, 3, tairwire.Mixed("pk", "s1"), tairwire.Mixed("pk", "s2"))
	r2 := tairwire.AppendRespGet(nil, 2, 1, 0, [2]tairwire.Entry{p("b"), p(strings.Repeat("x", 5000))}, [2]tairwire.Entry{p("d"), p("y")})
	r1 := tairwire.AppendRespGet(nil, 1, 1, 0, [2]tairwire.Entry{p("a"), p("zz")})
	push := tairwire.AppendFlowControl(nil, 1, 3)
	r3 := tairwire.AppendRespReturn(nil, 3, 1, 0, "")
	r4 := tairwire.AppendRespPrefixGets(nil, 4, 1, 0, tairwire.Mixed("pk", ""), []tairwire.SKeyResult{{SKey: p("s1"), Value: p("v")}}, nil)
	for _, f := range [][]byte{r2, r1, push, r3, r4} {
		rep = append(rep, f...)
	}
	n2 := uint64(len(r2))
	want := map[string]uint64{
		"3/a":  uint64(len(r1)),
		"3/b":  n2/3 + b2u(n2%3 > 0),
		"3/c":  n2/3 + b2u(n2%3 > 1),
		"3/d":  n2 / 3,
		"3/pk": uint64(len(r4)),
	}
	for i := 0; i <= len(rep); i += 7 {
		conn := replytest.NewConn(New(Config{}), decode.PendingConfig{})
		conn.Requests(1, req)
		conn.Replies(2, rep[:i])
		conn.Replies(3, rep[i:])
		s := conn.S
		if fmt.Sprint(s.Bytes) != fmt.Sprint(want) || len(s.Errors) > 0 {
			t.Fatalf("cut %d: %v errors %v, want %v", i, s.Bytes, s.Errors, want)
		}
		if s.Total != uint64(len(rep)) || s.Unpaired != uint64(len(push)) {
			t.Fatalf("cut %d: total %d unpaired %d, want %d and %d", i, s.Total, s.Unpaired, len(rep), len(push))
		}
		if conn.F.Pending.Len() != 0 {
			t.Fatalf("cut %d: %d requests left", i, conn.F.Pending.Len())
		}
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// FuzzReply: see replytest.Check.
func FuzzReply(f *testing.F) {
	p := tairwire.Plain
	req := tairwire.AppendGet(nil, 1, 3, p("a"), p("b"))
	f.Add(req, tairwire.AppendRespGet(nil, 1, 1, 0, [2]tairwire.Entry{p("a"), p("v")}), byte(1))
	f.Add(req, tairwire.AppendRespReturn(nil, 9, 1, 0, "x"), byte(2))
	f.Fuzz(func(t *testing.T, req, rep []byte, seed byte) {
		replytest.Check(t, New(Config{}), req, rep, seed, 0)
	})
}
