package stream

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/decode"
)

// vseg adds a segment with an acknowledgment number.
func (fx *fixture) vseg(ts int64, toServer bool, seq, ack uint32, flags uint8, payload string) {
	fx.t.Helper()
	seg := capture.Segment{TS: ts, Src: cliAddr, Dst: srvAddr, Seq: seq, Ack: ack, Flags: flags | capture.FlagACK, Payload: []byte(payload)}
	if flags&syn != 0 && toServer {
		seg.Flags = flags // the client's SYN carries no ACK
	}
	if !toServer {
		seg.Src, seg.Dst = srvAddr, cliAddr
	}
	fx.a.Add(&seg)
	fx.check()
}

func verifyConfig() Config {
	c := DefaultConfig()
	c.Verify = true
	return c
}

// TestVerifyHandshake: after a handshake, segments with random sequence and
// acknowledgment numbers on the connection's addresses reach no parser and
// count no lost bytes, while the real stream decodes whole.
func TestVerifyHandshake(t *testing.T) {
	fx := newFixture(t, verifyConfig(), consumeAll)
	fx.vseg(1, true, 1000, 0, syn, "")
	fx.vseg(2, false, 5000, 1001, syn, "")
	fx.vseg(3, true, 1001, 5001, 0, "GET a\r\n")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		fx.vseg(4+int64(i), true, rng.Uint32(), rng.Uint32(), 0, "SET forged x\r\n")
	}
	fx.vseg(30000, false, 5001, 1008, 0, "+OK\r\n")
	fx.vseg(30001, true, 1008, 5006, 0, "GET b\r\n")
	if got := fx.dec.only(t, decode.ToServer).stream(); got != "GET a\r\nGET b\r\n" {
		t.Errorf("requests decoded %q, want the two real GETs", got)
	}
	st := fx.a.Stats()
	if st.BytesLost != 0 || st.TotalGaps() != 0 {
		t.Errorf("forged segments counted %d lost bytes, %d gaps", st.BytesLost, st.TotalGaps())
	}
	if st.Rejected[RejectWindow] != 20000 || st.Resyncs != 0 {
		t.Errorf("rejected %v (%d resyncs), want 20000 out of window", st.Rejected, st.Resyncs)
	}
}

// TestVerifyUnconfirmed: requests before the server answered the SYN, or
// (joined mid-stream) before any segment of the server, are rejected; a
// server segment's ACK then anchors the client's stream.
func TestVerifyUnconfirmed(t *testing.T) {
	fx := newFixture(t, verifyConfig(), consumeAll)
	fx.vseg(1, true, 1000, 0, syn, "")
	fx.vseg(2, true, 1001, 0, 0, "SET early x\r\n")
	if st := fx.a.Stats(); st.Rejected[RejectUnconfirmed] != 1 {
		t.Errorf("data before the SYN-ACK: rejected %v", st.Rejected)
	}

	// Joined mid-stream: the request waits for the server's reply, whose
	// acknowledgment covers it, and is then decoded.
	fx = newFixture(t, verifyConfig(), consumeAll)
	fx.vseg(1, true, 5000, 9000, 0, "GET j\r\n")
	if got := len(fx.dec.parsers); got != 0 {
		t.Fatalf("%d parsers before the server answered", got)
	}
	fx.vseg(2, false, 9000, 5007, 0, "$-1\r\n")
	if got := fx.dec.only(t, decode.ToServer).stream(); got != "GET j\r\n" {
		t.Errorf("joined mid-stream: decoded %q, want the held GET", got)
	}

	fx = newFixture(t, verifyConfig(), consumeAll)
	fx.vseg(1, true, 3_000_000_000, 9000, 0, "SET forged x\r\n") // nobody accepted this
	fx.vseg(2, false, 9000, 123456, 0, "+OK\r\n")                // the server: the client's stream is at 123456
	fx.vseg(3, true, 123456, 9005, 0, "GET a\r\n")
	fx.vseg(4, true, 3_000_000_000, 9005, 0, "SET forged x\r\n")
	p := fx.dec.only(t, decode.ToServer)
	if got := p.stream(); got != "GET a\r\n" || !p.midStream {
		t.Errorf("decoded %q (mid-stream %v), want the anchored GET alone", got, p.midStream)
	}
	st := fx.a.Stats()
	if st.Rejected[RejectUnconfirmed] != 1 || st.Rejected[RejectWindow] != 1 || st.BytesLost != 0 {
		t.Errorf("rejected %v, lost %d", st.Rejected, st.BytesLost)
	}
}

// TestVerifySYN: a forged SYN or SYN-ACK on an accepted connection does not
// restart it at a number the forger chose.
func TestVerifySYN(t *testing.T) {
	fx := newFixture(t, verifyConfig(), consumeAll)
	fx.vseg(1, true, 1000, 0, syn, "")
	fx.vseg(2, false, 5000, 1001, syn, "")
	fx.vseg(3, true, 1001, 5001, 0, "GET a\r\n")
	fx.vseg(4, true, 70000, 0, syn, "")
	fx.vseg(5, false, 80000, 90001, syn, "")
	fx.vseg(6, true, 90001, 80001, 0, "SET forged x\r\n")
	fx.vseg(7, true, 1008, 5001, 0, "GET b\r\n")
	if got := fx.dec.only(t, decode.ToServer).stream(); got != "GET a\r\nGET b\r\n" {
		t.Errorf("decoded %q", got)
	}
	if st := fx.a.Stats(); st.Rejected[RejectSYN] != 2 || st.FlowsReset != 0 {
		t.Errorf("rejected %v, resets %d", st.Rejected, st.FlowsReset)
	}
}

// TestVerifyReanchor: when the capture lost more than a window of the
// client's stream, the server's acknowledgments say where it went on, and
// the stream continues there (a gap: a resynchronisation, of a size nobody
// can vouch for, so not counted as lost bytes).
func TestVerifyReanchor(t *testing.T) {
	fx := newFixture(t, verifyConfig(), consumeAll)
	fx.vseg(1, true, 1000, 0, syn, "")
	fx.vseg(2, false, 5000, 1001, syn, "")
	fx.vseg(3, true, 1001, 5001, 0, "GET a\r\n")
	far := uint32(1008 + 10<<20)
	fx.vseg(4, false, 5001, far, 0, "+OK\r\n")
	fx.vseg(5, true, far, 5006, 0, "GET b\r\n")
	if got := fx.dec.only(t, decode.ToServer).stream(); got != "GET a\r\n|GET b\r\n" {
		t.Errorf("decoded %q", got)
	}
	if st := fx.a.Stats(); st.Resyncs != 1 || st.BytesLost != 0 {
		t.Errorf("resyncs %d lost %d, want one resync", st.Resyncs, st.BytesLost)
	}
}

// TestVerifyResync: a direction whose position came from a stray segment
// (joined mid-stream on a forged reply) is not stuck: after rejectResync
// segments out of window in a row it takes its position again.
func TestVerifyResync(t *testing.T) {
	fx := newFixture(t, verifyConfig(), consumeAll)
	fx.vseg(1, false, 3_000_000_000, 3_000_000_000, 0, "+forged\r\n") // positions replies, anchors requests
	for i := range rejectResync {
		fx.vseg(2+int64(i), false, 9000, 1001, 0, "+OK\r\n")
	}
	for i := range rejectResync {
		fx.vseg(100+int64(i), true, 1001, 9005, 0, "GET a\r\n") // out of window: requests in doubt
	}
	// Both directions in doubt: tracked again as if joined mid-stream.
	fx.vseg(200, false, 9005, 1001, 0, "+OK\r\n")
	fx.vseg(201, true, 1001, 9010, 0, "GET b\r\n")
	last := fx.dec.parsers[len(fx.dec.parsers)-1]
	if last.dir != decode.ToServer {
		last = fx.dec.parsers[len(fx.dec.parsers)-2]
	}
	if got := last.stream(); got != "GET b\r\n" {
		t.Errorf("requests decoded %q after the resync", got)
	}
	if st := fx.a.Stats(); st.FlowsReset != 1 {
		t.Errorf("flows reset %d, want 1", st.FlowsReset)
	}
}

// TestVerifyOff: without Verify a mid-stream segment decodes at once, as
// capture files need.
func TestVerifyOff(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.vseg(1, true, 777, 9000, 0, "GET a\r\n")
	if got := fx.dec.only(t, decode.ToServer).stream(); got != "GET a\r\n" {
		t.Errorf("decoded %q", got)
	}
	_ = netip.Addr{}
}

// TestVerifyHeldExpire: requests held for a connection the server never
// confirms (a forged fresh connection) are rejected after GapTimeout, and
// their buffers given back.
func TestVerifyHeldExpire(t *testing.T) {
	fx := newFixture(t, verifyConfig(), consumeAll)
	for i := range 100 {
		seg := capture.Segment{TS: 1, Src: clientAddr(i), Dst: srvAddr, Seq: rand.Uint32(), Flags: capture.FlagACK, Payload: []byte("SET forged x\r\n")}
		fx.a.Add(&seg)
		fx.check()
	}
	if st := fx.a.Stats(); st.BufferedBytes == 0 {
		t.Fatal("nothing held")
	}
	fx.a.Tick(1 + int64(fx.a.cfg.GapTimeout) + 1)
	fx.check()
	if st := fx.a.Stats(); st.BufferedBytes != 0 || st.Rejected[RejectUnconfirmed] != 100 || len(fx.dec.parsers) != 0 {
		t.Errorf("after GapTimeout: %d bytes held, rejected %v, %d parsers", st.BufferedBytes, st.Rejected, len(fx.dec.parsers))
	}
}

// TestVerifyForgedAheadNotParsed: a forged segment that lands inside the
// window ahead of the client's stream (with an acceptable ACK) waits as
// out-of-order data. The server goes on acknowledging only the real stream,
// so when the hole is given up the forged bytes are rejected as unconfirmed,
// never parsed, and no bytes are counted lost. A hole the server did fill
// (bytes the capture lost) is still given up as a gap.
func TestVerifyForgedAheadNotParsed(t *testing.T) {
	gt := int64(DefaultConfig().GapTimeout)
	for _, lost := range []bool{false, true} {
		fx := newFixture(t, verifyConfig(), consumeAll)
		fx.vseg(1, true, 1000, 0, syn, "")
		fx.vseg(2, false, 5000, 1001, syn, "")
		fx.vseg(3, true, 1001, 5001, 0, "GET a\r\n")
		if lost {
			// The capture misses "GET b\r\n" (1008..1014); the server
			// received it and acknowledges past it.
			fx.vseg(4, true, 1015, 5001, 0, "GET c\r\n")
			fx.vseg(5, false, 5001, 1022, 0, "+OK\r\n+OK\r\n+OK\r\n")
		} else {
			fx.vseg(4, true, 1008+100000, 5001, 0, "SET forged x\r\n")
			fx.vseg(5, false, 5001, 1008, 0, "+OK\r\n")
		}
		fx.a.Tick(5 + 2*gt)
		fx.check()
		st := fx.a.Stats()
		got := fx.dec.only(t, decode.ToServer).stream()
		if lost {
			if got != "GET a\r\n|GET c\r\n" || st.BytesLost != 7 || st.TotalGaps() != 1 {
				t.Errorf("capture loss: decoded %q, %d bytes lost, %d gaps; want both real GETs around a 7-byte gap", got, st.BytesLost, st.TotalGaps())
			}
			continue
		}
		if got != "GET a\r\n" {
			t.Errorf("decoded %q: the forged segment was parsed", got)
		}
		if st.BytesLost != 0 || st.TotalGaps() != 0 || st.Rejected[RejectUnconfirmed] != 1 || st.BufferedBytes != 0 {
			t.Errorf("forged ahead: %d bytes lost, %d gaps, rejected %v, %d bytes held; want 0, 0, one unconfirmed, 0",
				st.BytesLost, st.TotalGaps(), st.Rejected, st.BufferedBytes)
		}
	}
}
