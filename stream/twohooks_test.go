package stream

import (
	"testing"

	"github.com/hotsniff/hotsniff/decode"
)

// TestSameSegmentsOnTwoHooks: a capture on two hooks of one path (a pod's
// veth and the uplink, the client's and the server's socket) hands every
// segment over twice, with the same flow and sequence numbers, cut
// differently (one hook sees a GRO super-packet, the other its pieces) and
// interleaved in any order. The stream must come out once, with the second
// copy counted as duplicate bytes, and SYN and FIN seen twice must not
// reopen or close the connection early, even when one hook delivers the
// whole connection before the other (records are merged by timestamp, and
// a lagging hook's SYN then comes after the first hook's FIN).
func TestSameSegmentsOnTwoHooks(t *testing.T) {
	const req = "GET a\r\nGET b\r\nGET c\r\n" // 21 bytes from seq 101
	type seg struct {
		seq   uint32
		flags uint8
		data  string
	}
	whole := []seg{{100, syn, ""}, {101, 0, req}, {122, fin, ""}}
	pieces := []seg{{100, syn, ""}, {101, 0, req[:7]}, {108, 0, req[7:14]}, {115, 0, req[14:]}, {122, fin, ""}}
	for _, tc := range []struct {
		name  string
		order [][2]int // (hook, index): hook 0 is whole, 1 is pieces
	}{
		{"super-packet first", [][2]int{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {1, 2}, {1, 3}, {0, 2}, {1, 4}}},
		{"pieces first", [][2]int{{1, 0}, {0, 0}, {1, 1}, {1, 2}, {0, 1}, {1, 3}, {1, 4}, {0, 2}}},
		{"interleaved", [][2]int{{1, 0}, {1, 1}, {0, 0}, {0, 1}, {1, 2}, {1, 3}, {0, 2}, {1, 4}}},
		{"one hook ahead", [][2]int{{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}, {1, 3}, {1, 4}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, DefaultConfig(), consumeAll)
			for i, o := range tc.order {
				s := [][]seg{whole, pieces}[o[0]][o[1]]
				fx.send(int64(i+1), true, s.seq, s.flags, s.data)
			}
			if got := fx.dec.only(t, decode.ToServer).stream(); got != req {
				t.Errorf("stream = %q, want %q once", got, req)
			}
			st := fx.a.Stats()
			if tc.name == "one hook ahead" {
				// The first hook closed the connection: the second's
				// copies arrive after it, are dropped as such, and its
				// SYN does not open a new connection.
				if st.SegmentsAfterClose != 3 || st.FlowsCreated != 1 || st.TotalGaps() != 0 {
					t.Errorf("after close %d (want 3), flows %d (want 1): %+v", st.SegmentsAfterClose, st.FlowsCreated, st)
				}
				return
			}
			if st.BytesRetransmitted != uint64(len(req)) || st.TotalGaps() != 0 {
				t.Errorf("duplicate bytes %d (want %d), gaps %d: %+v", st.BytesRetransmitted, len(req), st.TotalGaps(), st)
			}
		})
	}
}
