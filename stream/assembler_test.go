package stream

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/decode"
)

const (
	syn = capture.FlagSYN
	fin = capture.FlagFIN
	rst = capture.FlagRST
)

func TestInOrder(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(1, true, 100, 0, "GET a\r\n")
	fx.send(2, true, 107, 0, "GET b\r\n")
	fx.send(3, false, 9000, 0, "+OK\r\n")
	if got := fx.dec.only(t, decode.ToServer).stream(); got != "GET a\r\nGET b\r\n" {
		t.Errorf("to server = %q", got)
	}
	if got := fx.dec.only(t, decode.ToClient).stream(); got != "+OK\r\n" {
		t.Errorf("to client = %q", got)
	}
	st := fx.a.Stats()
	if st.Bytes != 19 || st.Segments != 3 || st.FlowsCreated != 1 || st.FlowsActive != 1 || st.BufferedBytes != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestFlowFields(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(42, false, 9000, 0, "+OK\r\n")
	p := fx.dec.only(t, decode.ToClient)
	want := decode.Flow{Client: cliAddr, Server: srvAddr, Proto: decode.ProtoRedis, TS: 42}
	if p.flow != want {
		t.Errorf("flow = %+v, want %+v", p.flow, want)
	}
	fx.send(43, false, 9005, 0, "+OK\r\n")
	if p.flow.TS != 43 {
		t.Errorf("TS = %d, want 43", p.flow.TS)
	}
}

func TestSplitAcrossSegments(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeLines)
	fx.send(1, true, 100, 0, "GET a\r\nGE")
	if st := fx.a.Stats(); st.BufferedBytes == 0 {
		t.Errorf("tail not buffered: %+v", st)
	}
	fx.send(2, true, 109, 0, "T b\r")
	fx.send(3, true, 113, 0, "\nGET c\r\n")
	p := fx.dec.only(t, decode.ToServer)
	if want := []string{"GET a\r\n", "GET b\r\n", "GET c\r\n"}; !slices.Equal(p.lines, want) {
		t.Errorf("lines = %q, want %q", p.lines, want)
	}
	if st := fx.a.Stats(); st.BufferedBytes != 0 || st.TotalGaps() != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestRetransmission(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(1, true, 100, 0, "hello ")
	fx.send(2, true, 100, 0, "hello ")
	fx.send(3, true, 106, 0, "world")
	fx.send(4, true, 106, 0, "world")
	if got := fx.dec.only(t, decode.ToServer).stream(); got != "hello world" {
		t.Errorf("stream = %q", got)
	}
	if st := fx.a.Stats(); st.BytesRetransmitted != 11 || st.Bytes != 11 {
		t.Errorf("stats = %+v", st)
	}
}

func TestPartialOverlap(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(1, true, 100, 0, "0123456789")
	fx.send(2, true, 105, 0, "56789abcde")
	if got := fx.dec.only(t, decode.ToServer).stream(); got != "0123456789abcde" {
		t.Errorf("stream = %q", got)
	}
	if st := fx.a.Stats(); st.BytesRetransmitted != 5 {
		t.Errorf("retransmitted = %d, want 5", st.BytesRetransmitted)
	}
}

func TestOutOfOrder(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(1, true, 100, 0, "aaaa")
	fx.send(2, true, 112, 0, "dddd")
	fx.send(3, true, 108, 0, "cccc")
	p := fx.dec.only(t, decode.ToServer)
	if got := p.stream(); got != "aaaa" {
		t.Fatalf("delivered before the hole filled: %q", got)
	}
	fx.send(4, true, 108, 0, "cccc") // duplicate while waiting
	fx.send(5, true, 104, 0, "bbbb")
	if got := p.stream(); got != "aaaabbbbccccdddd" {
		t.Errorf("stream = %q", got)
	}
	st := fx.a.Stats()
	if st.OutOfOrder != 2 || st.TotalGaps() != 0 || st.BytesRetransmitted != 4 || st.BufferedBytes != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestOverlappingOutOfOrder(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(1, true, 100, 0, "ab")
	fx.send(2, true, 104, 0, "efgh")
	fx.send(3, true, 103, 0, "def") // overlaps the waiting segment
	fx.send(4, true, 102, 0, "c")
	if got := fx.dec.only(t, decode.ToServer).stream(); got != "abcdefgh" {
		t.Errorf("stream = %q", got)
	}
}

func TestGapTimeout(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeLines)
	fx.send(0, true, 100, 0, "GET a\r\nGET")
	fx.send(1*ms, true, 120, 0, "GET c\r\n")
	fx.a.Tick(200 * ms)
	p := fx.dec.only(t, decode.ToServer)
	if p.gaps() != 0 {
		t.Fatal("gap declared before GapTimeout")
	}
	fx.a.Tick(252 * ms)
	if got := p.stream(); got != "GET a\r\n|GET c\r\n" {
		t.Errorf("stream = %q", got)
	}
	st := fx.a.Stats()
	if st.Gaps[decode.ProtoRedis] != 1 || st.BytesLost != 10 || st.BytesDiscarded != 3 || st.BufferedBytes != 0 {
		t.Errorf("stats = %+v", st)
	}
	fx.send(300*ms, true, 110, 0, " b\r\nGET b2") // the late hole filler
	if got := p.stream(); got != "GET a\r\n|GET c\r\n" {
		t.Errorf("late data delivered: %q", got)
	}
	if st := fx.a.Stats(); st.BytesRetransmitted != 10 {
		t.Errorf("retransmitted = %d, want 10", st.BytesRetransmitted)
	}
}

func TestGapTimeoutLazy(t *testing.T) {
	// Without Tick, packet time advancing on the same flow declares the gap.
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(0, true, 100, 0, "aa")
	fx.send(1*ms, true, 104, 0, "cc")
	fx.send(300*ms, true, 106, 0, "dd")
	if got := fx.dec.only(t, decode.ToServer).stream(); got != "aa|ccdd" {
		t.Errorf("stream = %q", got)
	}
}

func TestOutOfOrderOverflow(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxOutOfOrder = 2
	fx := newFixture(t, cfg, consumeAll)
	fx.send(1, true, 100, 0, "a")
	fx.send(2, true, 102, 0, "c")
	fx.send(3, true, 104, 0, "e")
	fx.send(4, true, 106, 0, "g") // no room: give up the hole before "c"
	p := fx.dec.only(t, decode.ToServer)
	if got := p.stream(); got != "a|c" {
		t.Errorf("stream = %q", got)
	}
	fx.send(5, true, 105, 0, "f") // full again: give up the hole before "e"
	if got := p.stream(); got != "a|c|efg" {
		t.Errorf("stream = %q", got)
	}
	st := fx.a.Stats()
	if st.BufferOverflows != 2 || st.TotalGaps() != 2 {
		t.Errorf("stats = %+v", st)
	}

	// Out-of-order bytes count against MaxFlowBuffer too.
	cfg = DefaultConfig()
	cfg.MaxFlowBuffer = 8
	cfg.MaxBufferBytes = 1 << 20
	fx = newFixture(t, cfg, consumeAll)
	fx.send(1, true, 100, 0, "a")
	fx.send(2, true, 102, 0, "cccccc")
	fx.send(3, true, 108, 0, "dddddd") // no room: the hole before "c" is given up
	if got := fx.dec.only(t, decode.ToServer).stream(); got != "a|ccccccdddddd" {
		t.Errorf("stream = %q", got)
	}
}

func TestWraparound(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	isn := uint32(1<<32 - 6)
	fx.send(1, true, isn, syn, "")
	fx.send(2, true, isn+1, 0, "abc")
	fx.send(3, true, isn+8, 0, "hij")  // after the wrap, ahead of a hole
	fx.send(4, true, isn+4, 0, "defg") // crosses 2^32
	fx.send(5, true, isn+4, 0, "defg") // retransmission across the wrap
	fx.send(6, true, isn+11, 0, "klm") // in order after the wrap
	if got := fx.dec.only(t, decode.ToServer).stream(); got != "abcdefghijklm" {
		t.Errorf("stream = %q", got)
	}
	if st := fx.a.Stats(); st.TotalGaps() != 0 || st.BytesRetransmitted != 4 {
		t.Errorf("stats = %+v", st)
	}
}

func TestMidStreamJoin(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(1, true, 123456, 0, "T a\r\nGET b\r\n")
	p := fx.dec.only(t, decode.ToServer)
	if !p.midStream {
		t.Error("parser not told it joined mid-stream")
	}
	if got := p.stream(); got != "T a\r\nGET b\r\n" {
		t.Errorf("first segment not decoded at once: %q", got)
	}
	if p.gaps() != 0 {
		t.Error("Gap called on join: midStream already says it")
	}

	fx = newFixture(t, DefaultConfig(), consumeAll)
	fx.send(1, true, 1000, syn, "")
	fx.send(2, false, 5000, syn, "")
	fx.send(3, true, 1001, 0, "GET a\r\n")
	fx.send(4, false, 5001, 0, "$-1\r\n")
	for _, dir := range []decode.Dir{decode.ToServer, decode.ToClient} {
		if p := fx.dec.only(t, dir); p.midStream {
			t.Errorf("dir %d: midStream after a SYN", dir)
		}
	}
	if got := fx.dec.only(t, decode.ToClient).stream(); got != "$-1\r\n" {
		t.Errorf("to client = %q", got)
	}
}

func TestSYNPortReuse(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(1, true, 1000, syn, "")
	fx.send(2, true, 1001, 0, "old")
	fx.send(3, true, 1000, syn, "") // retransmitted SYN: same connection
	fx.send(4, true, 1004, 0, "more")
	fx.send(5, true, 777000, syn, "") // new ISN: a new connection on the same ports
	fx.send(6, true, 777001, 0, "new")
	ps := fx.dec.parsers
	if len(ps) != 2 {
		t.Fatalf("%d parsers, want 2", len(ps))
	}
	if got := ps[0].stream(); got != "oldmore" {
		t.Errorf("old connection = %q", got)
	}
	if got := ps[1].stream(); got != "new" || ps[1].midStream {
		t.Errorf("new connection = %q, midStream %v", got, ps[1].midStream)
	}
	if st := fx.a.Stats(); st.FlowsReset != 1 || st.FlowsActive != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestFINAndLateRetransmit(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(1, true, 100, 0, "GET a\r\n")
	fx.send(2, false, 500, 0, "+OK")
	fx.send(3, true, 111, fin, "zz") // FIN ahead of a hole: pending data goes out with a gap
	p := fx.dec.only(t, decode.ToServer)
	if got := p.stream(); got != "GET a\r\n|zz" {
		t.Errorf("stream = %q", got)
	}
	fx.send(4, true, 107, 0, "late")  // the direction is closed
	fx.send(4, false, 503, 0, "\r\n") // the other is not
	fx.send(5, false, 505, fin, "")
	if got := fx.dec.only(t, decode.ToClient).stream(); got != "+OK\r\n" {
		t.Errorf("to client = %q", got)
	}
	st := fx.a.Stats()
	if st.FlowsActive != 0 || st.ClosedMarkers != 1 || st.FlowsClosed != 1 || st.SegmentsAfterClose != 1 {
		t.Errorf("stats = %+v", st)
	}
	fx.send(6, false, 500, 0, "+OK\r\n") // late retransmit after close
	if n := len(fx.dec.parsers); n != 2 {
		t.Errorf("late segment made a new parser: %d parsers", n)
	}
	if st := fx.a.Stats(); st.SegmentsAfterClose != 2 || st.FlowsCreated != 1 {
		t.Errorf("stats = %+v", st)
	}
	// The marker expires; then traffic is a new mid-stream connection.
	fx.a.Tick(int64(11 * time.Second))
	if st := fx.a.Stats(); st.ClosedMarkers != 0 {
		t.Errorf("marker kept: %+v", st)
	}
	fx.send(int64(12*time.Second), true, 9999, 0, "GET z\r\n")
	if n := len(fx.dec.parsers); n != 3 || !fx.dec.parsers[2].midStream {
		t.Errorf("no new mid-stream parser: %d parsers", n)
	}
}

func TestSYNReopensClosed(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(1, true, 100, 0, "a")
	fx.send(2, true, 101, rst, "")
	fx.send(3, true, 5000, syn, "")
	fx.send(4, true, 5001, 0, "b")
	if len(fx.dec.parsers) != 2 || fx.dec.parsers[1].stream() != "b" {
		t.Errorf("new connection not decoded")
	}
	if st := fx.a.Stats(); st.FlowsCreated != 2 || st.FlowsActive != 1 || st.ClosedMarkers != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestRST(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(1, true, 100, 0, "aa")
	fx.send(2, true, 104, 0, "cc")
	fx.send(3, false, 700, rst, "")
	if got := fx.dec.only(t, decode.ToServer).stream(); got != "aa|cc" {
		t.Errorf("stream = %q", got)
	}
	st := fx.a.Stats()
	if st.FlowsActive != 0 || st.ClosedMarkers != 1 || st.BufferedBytes != 0 {
		t.Errorf("stats = %+v", st)
	}
	// An RST for an unknown connection creates nothing.
	fx.sendFrom(clientAddr(7), 4, true, 1, rst, "", 0)
	if st := fx.a.Stats(); st.FlowsCreated != 1 {
		t.Errorf("RST created a flow: %+v", st)
	}
}

func TestIdleExpiry(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(0, true, 100, 0, "aa")
	fx.send(0, true, 104, 0, "cc")
	fx.sendFrom(clientAddr(1), int64(time.Minute), true, 1, 0, "x", 0)
	fx.a.Tick(int64(2*time.Minute) + 1)
	st := fx.a.Stats()
	if st.FlowsExpired != 1 || st.FlowsActive != 1 || st.BufferedBytes != 0 {
		t.Errorf("stats = %+v", st)
	}
	if got := fx.dec.parsers[0].stream(); got != "aa|cc" {
		t.Errorf("expired flow delivered %q", got)
	}
	// Lazy: a segment two minutes later expires the other flow by itself.
	fx.sendFrom(clientAddr(2), int64(4*time.Minute), true, 1, 0, "y", 0)
	if st := fx.a.Stats(); st.FlowsExpired != 2 || st.FlowsActive != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestMaxFlowsEviction(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxFlows = 2
	fx := newFixture(t, cfg, consumeAll)
	fx.sendFrom(clientAddr(1), 1, true, 1, 0, "a", 0)
	fx.sendFrom(clientAddr(2), 2, true, 1, 0, "b", 0)
	fx.sendFrom(clientAddr(1), 3, true, 2, 0, "a", 0) // flow 2 is now the least recent
	fx.sendFrom(clientAddr(3), 4, true, 1, 0, "c", 0)
	st := fx.a.Stats()
	if st.FlowsEvicted != 1 || st.FlowsActive != 2 {
		t.Fatalf("stats = %+v", st)
	}
	fx.sendFrom(clientAddr(1), 5, true, 3, 0, "a", 0) // still tracked
	if n := len(fx.dec.parsers); n != 3 {
		t.Errorf("flow 1 was evicted: %d parsers", n)
	}
	fx.sendFrom(clientAddr(2), 6, true, 2, 0, "b", 0) // evicted: joins again
	if n := len(fx.dec.parsers); n != 4 {
		t.Errorf("flow 2 was kept: %d parsers", n)
	}
	// Closed markers give way before open flows.
	fx.sendFrom(clientAddr(2), 7, true, 3, rst, "", 0)
	fx.sendFrom(clientAddr(4), 8, true, 1, 0, "d", 0)
	if st := fx.a.Stats(); st.FlowsEvicted != 2 || st.ClosedMarkers != 0 || st.FlowsActive != 2 {
		t.Errorf("stats = %+v", st)
	}
}

func TestMaxBufferBytes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxFlowBuffer = 4096
	cfg.MaxBufferBytes = 8192
	fx := newFixture(t, cfg, consumeAll)
	payload := strings.Repeat("x", 1000)
	for i := range 10 {
		c := clientAddr(i)
		fx.sendFrom(c, int64(i), true, 1, 0, "a", 0)
		fx.sendFrom(c, int64(i), true, 3, 0, payload, 0) // out of order: buffered
		fx.sendFrom(c, int64(i), true, 1003, 0, payload, 0)
	}
	st := fx.a.Stats()
	if st.MemEvictions == 0 || st.BufferedBytes > cfg.MaxBufferBytes {
		t.Errorf("stats = %+v", st)
	}
	// The most recent flows survive with their data intact.
	fx.sendFrom(clientAddr(9), 20, true, 2, 0, "b", 0)
	last := fx.dec.parsers[len(fx.dec.parsers)-1]
	if got := last.stream(); got != "ab"+payload+payload {
		t.Errorf("recent flow lost data: %d bytes", len(got))
	}
}

func TestSkip(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeSkip)
	fx.send(1, true, 100, 0, "K1\nV10\n0123")
	fx.send(2, true, 111, 0, "45")
	fx.send(3, true, 113, 0, "6789K2\nV3\nab")
	fx.send(4, true, 125, 0, "cK3\n")
	p := fx.dec.only(t, decode.ToServer)
	if want := []string{"K1", "V10", "K2", "V3", "K3"}; !slices.Equal(p.lines, want) {
		t.Errorf("lines = %q, want %q", p.lines, want)
	}
	st := fx.a.Stats()
	if st.BytesSkipped != 7 || st.BufferedBytes != 0 || st.TotalGaps() != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestMissing(t *testing.T) {
	// Bytes the capture cut inside a value the parser skips are harmless.
	fx := newFixture(t, DefaultConfig(), consumeSkip)
	fx.sendFrom(cliAddr, 1, true, 100, 0, "V100\n0123", 50)
	fx.send(2, true, 159, 0, strings.Repeat("z", 46)+"K1\n")
	p := fx.dec.only(t, decode.ToServer)
	if want := []string{"V100", "K1"}; !slices.Equal(p.lines, want) || p.gaps() != 0 {
		t.Errorf("lines = %q, gaps %d", p.lines, p.gaps())
	}
	// They are skipped bytes, not lost ones: nothing needed them.
	if st := fx.a.Stats(); st.BytesLost != 0 || st.BytesSkipped < 50 || st.TotalGaps() != 0 {
		t.Errorf("stats = %+v", st)
	}

	// Elsewhere they are a gap, and the stream goes on after them.
	fx = newFixture(t, DefaultConfig(), consumeAll)
	fx.sendFrom(cliAddr, 1, true, 100, 0, "abc", 5)
	fx.send(2, true, 108, 0, "xyz")
	if got := fx.dec.only(t, decode.ToServer).stream(); got != "abc|xyz" {
		t.Errorf("stream = %q", got)
	}
	if st := fx.a.Stats(); st.BytesLost != 5 || st.Gaps[decode.ProtoRedis] != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestTailOverflow(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxFlowBuffer = 100
	cfg.MaxBufferBytes = 1000
	fx := newFixture(t, cfg, consumeLines)
	fx.send(1, true, 100, 0, strings.Repeat("x", 60))
	fx.send(2, true, 160, 0, strings.Repeat("y", 60)) // 120 > 100 without a newline
	fx.send(3, true, 220, 0, "\nGET a\n")
	p := fx.dec.only(t, decode.ToServer)
	if p.gaps() != 1 {
		t.Errorf("gaps = %d, want 1", p.gaps())
	}
	if want := []string{strings.Repeat("y", 20) + "\n", "GET a\n"}; !slices.Equal(p.lines, want) {
		t.Errorf("lines = %q", p.lines)
	}
	if st := fx.a.Stats(); st.BufferOverflows != 1 {
		t.Errorf("stats = %+v", st)
	}

	// A single segment whose unconsumed rest exceeds the bound.
	fx = newFixture(t, cfg, consumeNone)
	fx.send(1, true, 100, 0, strings.Repeat("x", 150))
	st := fx.a.Stats()
	if st.BufferOverflows != 1 || st.BytesDiscarded != 150 || st.BufferedBytes != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestNilParser(t *testing.T) {
	dec := &fakeDecoder{proto: decode.ProtoRedis, mode: consumeAll, noClient: true}
	var reg decode.Registry
	reg.Register(dec)
	fx := &fixture{t: t, dec: dec, a: NewAssembler(DefaultConfig(), DefaultPorts(), &reg, nopSink{})}
	fx.send(1, true, 100, 0, "GET a\r\n")
	fx.send(2, false, 500, 0, "$1\r\nx\r\n")
	fx.send(3, false, 520, 0, "ahead of a hole") // not buffered
	fx.send(4, false, 507, fin, "")
	fx.send(5, true, 107, fin, "")
	if len(dec.parsers) != 1 || dec.parsers[0].stream() != "GET a\r\n" {
		t.Errorf("parsers = %d", len(dec.parsers))
	}
	st := fx.a.Stats()
	if st.BytesDropped != 22 || st.OutOfOrder != 0 || st.BufferedBytes != 0 || st.ClosedMarkers != 1 {
		t.Errorf("stats = %+v", st)
	}

	// No decoder for the protocol at all.
	fx = &fixture{t: t, a: NewAssembler(DefaultConfig(), DefaultPorts(), new(decode.Registry), nopSink{})}
	fx.send(1, true, 100, 0, "GET a\r\n")
	if st := fx.a.Stats(); st.BytesDropped != 7 || st.Bytes != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestUnmappedPorts(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	seg := capture.Segment{Src: netip.MustParseAddrPort("10.0.0.1:40000"), Dst: netip.MustParseAddrPort("10.0.0.2:8080"), Payload: []byte("GET / HTTP/1.1\r\n")}
	fx.a.Add(&seg)
	if st := fx.a.Stats(); st.SegmentsIgnored != 1 || st.Segments != 0 || st.FlowsCreated != 0 {
		t.Errorf("stats = %+v", st)
	}
	// Server side first: the direction comes from the mapped source port.
	seg = capture.Segment{Src: srvAddr, Dst: cliAddr, Seq: 1, Payload: []byte("+OK\r\n")}
	fx.a.Add(&seg)
	if p := fx.dec.only(t, decode.ToClient); p.flow.Client != cliAddr || p.flow.Server != srvAddr {
		t.Errorf("flow = %+v", p.flow)
	}
}

func TestFlushDeliversAndCloses(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(1, true, 100, 0, "aa")
	fx.send(2, true, 104, 0, "cc")
	fx.send(3, true, 108, 0, "ee")
	fx.a.Flush()
	fx.check()
	if got := fx.dec.only(t, decode.ToServer).stream(); got != "aa|cc|ee" {
		t.Errorf("stream = %q", got)
	}
	st := fx.a.Stats()
	if st.FlowsActive != 0 || st.ClosedMarkers != 0 || st.BufferedBytes != 0 || st.Gaps[decode.ProtoRedis] != 2 {
		t.Errorf("stats = %+v", st)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	bad := []func(*Config){
		func(c *Config) { c.MaxFlows = 0 },
		func(c *Config) { c.MaxFlowBuffer = 0 },
		func(c *Config) { c.MaxBufferBytes = c.MaxFlowBuffer - 1 },
		func(c *Config) { c.MaxOutOfOrder = -1 },
		func(c *Config) { c.IdleTimeout = 0 },
		func(c *Config) { c.GapTimeout = -time.Second },
		func(c *Config) { c.ClosedTimeout = 0 },
	}
	for i, mutate := range bad {
		c := DefaultConfig()
		mutate(&c)
		if c.Validate() == nil {
			t.Errorf("case %d: invalid config accepted", i)
		}
	}
}

func TestParsePorts(t *testing.T) {
	p, err := ParsePorts([]string{"redis=6380", "memcache=11211", " tair = 5191 ", "redis=6380"})
	if err != nil {
		t.Fatal(err)
	}
	for port, want := range map[uint16]decode.Proto{6380: decode.ProtoRedis, 11211: decode.ProtoMemcache, 5191: decode.ProtoTair, 6379: decode.ProtoUnknown} {
		if got := p.Lookup(port); got != want {
			t.Errorf("port %d = %v, want %v", port, got, want)
		}
	}
	for _, spec := range []string{"redis", "redis=", "redis=0", "redis=65536", "redis=-1", "redis=abc", "http=80", "=6379", "memcache=6380,redis=6380"} {
		if _, err := ParsePorts([]string{spec}); err == nil {
			t.Errorf("%q accepted", spec)
		}
	}
	if _, err := ParsePorts([]string{"redis=6379", "memcache=6379"}); err == nil {
		t.Error("one port mapped to two protocols accepted")
	}
	p.Set(1, decode.Proto(200)) // no such protocol: unmapped, never an index out of range
	if p.Lookup(1) != decode.ProtoUnknown {
		t.Error("invalid protocol mapped")
	}
	d := DefaultPorts()
	if d.Lookup(6379) != decode.ProtoRedis || d.Lookup(11211) != decode.ProtoMemcache || d.Lookup(5191) != decode.ProtoTair {
		t.Error("default ports wrong")
	}
}

func TestResyncAfterStraySegment(t *testing.T) {
	// Joined on a stray segment far ahead of the real stream: everything
	// real looks old. After staleResync such segments the direction follows
	// the sender again.
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(1, true, 1_000_000_000, 0, "junk")
	var real strings.Builder
	for i := range staleResync + 10 {
		msg := fmt.Sprintf("m%08d\n", i)
		real.WriteString(msg)
		fx.send(int64(2+i), true, uint32(5000+10*i), 0, msg)
	}
	want := "junk|" + real.String()[10*(staleResync-1):]
	if got := fx.dec.only(t, decode.ToServer).stream(); got != want {
		t.Errorf("stream = %.40q..., want %.40q...", got, want)
	}
	if st := fx.a.Stats(); st.Resyncs != 1 || st.TotalGaps() != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestFINOneDirectionCaptured(t *testing.T) {
	// Only client->server is captured: its FIN ends the connection, so a new
	// one on the same ports is not dropped as late data for IdleTimeout.
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(1, true, 100, 0, "GET a\r\n")
	fx.send(2, true, 107, fin, "")
	if st := fx.a.Stats(); st.FlowsActive != 0 || st.ClosedMarkers != 1 {
		t.Fatalf("stats = %+v", st)
	}
	fx.send(int64(11*time.Second), true, 5000, 0, "GET b\r\n")
	if n := len(fx.dec.parsers); n != 2 || fx.dec.parsers[1].stream() != "GET b\r\n" {
		t.Errorf("new connection not decoded: %d parsers", n)
	}
}

func TestStraySegmentAhead(t *testing.T) {
	// A stray segment far ahead must not make a progressing stream jump to it.
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(0, true, 100, 0, "aa")
	fx.send(1*ms, true, 900_000, 0, "stray")
	var want strings.Builder
	want.WriteString("aa")
	for i := range 20 {
		fx.send(int64(i+1)*100*ms, true, uint32(102+2*i), 0, "bb")
		want.WriteString("bb")
	}
	fx.a.Tick(2100 * ms)
	if got := fx.dec.only(t, decode.ToServer).stream(); got != want.String() {
		t.Errorf("stream = %q", got)
	}
	if st := fx.a.Stats(); st.TotalGaps() != 0 {
		t.Errorf("stats = %+v", st)
	}
	// Once the stream stalls, the wait ends as for any hole.
	fx.a.Tick(2400 * ms)
	if got := fx.dec.only(t, decode.ToServer).stream(); got != want.String()+"|stray" {
		t.Errorf("stream = %q", got)
	}
}

// TestSkipHoles: with reply heads the eBPF capture drops segments that lie
// inside a value the parser skips; the hole they leave is not waited for,
// costs no gap and counts as skipped. OnSkip hears of the skip, with the
// sequence range it covers.
func TestSkipHoles(t *testing.T) {
	cfg := DefaultConfig()
	type call struct{ start, end uint32 }
	var calls []call
	cfg.OnSkip = func(f *decode.Flow, start, end uint32) { calls = append(calls, call{start, end}) }
	cfg.SkipNotify = 50
	fx := newFixture(t, cfg, consumeSkip)
	fx.send(1, false, 1000, 0, "V10\n0123456789V200\n01234")
	// Bytes 1024..1218 never arrive (dropped in the kernel); the next
	// message follows at once.
	fx.send(2, false, 1024+195, 0, "V1\nx")
	p := fx.dec.only(t, decode.ToClient)
	if want := []string{"V10", "V200", "V1"}; !slices.Equal(p.lines, want) || p.gaps() != 0 {
		t.Errorf("lines = %q, gaps %d", p.lines, p.gaps())
	}
	if st := fx.a.Stats(); st.BytesLost != 0 || st.OutOfOrder != 0 || st.TotalGaps() != 0 {
		t.Errorf("stats = %+v", st)
	}
	if want := []call{{1024, 1024 + 195}}; !slices.Equal(calls, want) {
		t.Errorf("OnSkip calls %v, want %v", calls, want)
	}
}

// TestRecorderPassesEverything: with reply pairing on, request parsers
// report through the recorder; every kind of call must reach the sink.
func TestRecorderPassesEverything(t *testing.T) {
	got := 0
	r := &recorder{decode.Forward{Next: absorbedSink{n: &got}}}
	r.Absorbed(&decode.Flow{}, &decode.Absorbed{})
	if got != 1 {
		t.Errorf("report not passed on")
	}
}

type absorbedSink struct {
	nopSink
	n *int
}

func (a absorbedSink) Absorbed(*decode.Flow, *decode.Absorbed) { *a.n++ }
