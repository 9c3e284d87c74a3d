package netnstest

import (
	"io"
	"net/netip"
	"testing"

	"github.com/hotsniff/hotsniff/capture"
)

// segs is a capture.Source over a fixed list.
type segs struct{ l []capture.Segment }

func (s *segs) Next(seg *capture.Segment) error {
	if len(s.l) == 0 {
		return io.EOF
	}
	*seg, s.l = s.l[0], s.l[1:]
	return nil
}
func (s *segs) Stats() capture.Stats { return capture.Stats{} }
func (s *segs) Close() error         { return nil }

// TestStreamGaps: a truncated segment retransmitted whole counts its
// missing bytes once, and bytes no segment covered are holes, not missing.
func TestStreamGaps(t *testing.T) {
	k := FlowKey{netip.MustParseAddrPort("10.0.0.1:40000"), netip.MustParseAddrPort("10.0.0.2:6379")}
	seg := func(seq uint32, payload string, missing uint32, flags uint8) capture.Segment {
		return capture.Segment{Src: k.Src, Dst: k.Dst, Seq: seq, Payload: []byte(payload), Missing: missing, Flags: flags}
	}
	src := &segs{l: []capture.Segment{
		seg(99, "", 0, capture.FlagSYN),
		seg(100, "abcd", 4, 0), // 100-107: 4 copied, 4 missing
		seg(100, "abcd", 4, 0), // retransmitted
		seg(108, "ijkl", 0, 0),
		seg(116, "qr", 0, 0), // 112-115 never seen
	}}
	c := Collect(t, src)
	<-c.done
	data, holes, missing := c.StreamGaps(k)
	if string(data) != "abcdijklqr" || holes != 4 || missing != 4 {
		t.Fatalf("got %q, %d holes, %d missing; want abcdijklqr, 4, 4", data, holes, missing)
	}
	if _, _, m := c.Totals(); m != 8 {
		t.Fatalf("totals count %d missing, want 8 (once per transmission)", m)
	}
	if d, gap := c.Stream(k); string(d) != string(data) || gap != holes+missing {
		t.Fatalf("Stream: %q, gap %d", d, gap)
	}
}
