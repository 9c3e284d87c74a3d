package stream

import (
	"testing"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/decode"
)

// A connection skipped by flow sampling and resumed jumps ahead in sequence
// space: marked Resumed, the direction restarts there at once (the parser
// resynchronises) and no gap or lost byte is counted. Without the mark the
// same jump is a hole, declared a gap.
func TestSampleResumeIsNotALoss(t *testing.T) {
	fx := newFixture(t, DefaultConfig(), consumeAll)
	fx.send(1, true, 100, 0, "GET a\r\n")
	seg := capture.Segment{TS: 2, Src: cliAddr, Dst: srvAddr, Seq: 5000, Flags: capture.FlagACK, Payload: []byte("GET z\r\n"), Resumed: true}
	fx.a.Add(&seg)
	fx.check()
	p := fx.dec.only(t, 0)
	if got := p.stream(); got != "GET a\r\n|GET z\r\n" {
		t.Errorf("stream = %q, want the parser resynchronised before the resumed data", got)
	}
	st := fx.a.Stats()
	if st.TotalGaps() != 0 || st.BytesLost != 0 || st.SampleResumes != 1 || st.OutOfOrder != 0 {
		t.Errorf("stats = %+v: want 1 resume, no gap, nothing lost or waiting", st)
	}
	// A resumed mark on in-order data changes nothing.
	seg = capture.Segment{TS: 3, Src: cliAddr, Dst: srvAddr, Seq: 5007, Flags: capture.FlagACK, Payload: []byte("GET y\r\n"), Resumed: true}
	fx.a.Add(&seg)
	if st := fx.a.Stats(); st.SampleResumes != 1 || p.stream() != "GET a\r\n|GET z\r\nGET y\r\n" {
		t.Errorf("in-order resumed segment: stats %+v, stream %q", st, p.stream())
	}
}

// TestReplyFramingFromCapture: a request segment's Replies mark moves its
// connection's reply pairing: RepliesFramedFrom starts it there (a
// connection joined mid-stream included), RepliesUnframed stops it, and
// neither a plain RepliesFramed nor a mark on a reply restarts it.
func TestReplyFramingFromCapture(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Replies = true
	fx := newFixture(t, cfg, consumeAll)
	fx.send(1, true, 100, 0, "GET a\r\n") // joined mid-stream: not paired
	var q *decode.Pending
	for _, fl := range fx.a.flows {
		q = fl.f.Pending
	}
	if q == nil || q.Synced() {
		t.Fatalf("queue %v: want one, not pairing yet", q)
	}
	seq := uint32(107)
	add := func(toServer bool, r capture.ReplyFraming) {
		seg := capture.Segment{TS: 2, Src: cliAddr, Dst: srvAddr, Seq: seq, Flags: capture.FlagACK, Payload: []byte("GET b\r\n"), Replies: r}
		if !toServer {
			seg.Src, seg.Dst, seg.Seq = srvAddr, cliAddr, 1000
		}
		fx.a.Add(&seg)
		if toServer {
			seq += 7
		}
	}
	steps := []struct {
		toServer bool
		r        capture.ReplyFraming
		synced   bool
	}{
		{true, capture.RepliesFramed, false},
		{true, capture.RepliesFramedFrom, true},
		{true, capture.RepliesFramed, true},
		{true, capture.RepliesAsCaptured, true},
		{true, capture.RepliesUnframed, false},
		{false, capture.RepliesFramedFrom, false},
		{true, capture.RepliesFramed, false},
		{true, capture.RepliesFramedFrom, true},
	}
	for i, s := range steps {
		add(s.toServer, s.r)
		if q.Synced() != s.synced {
			t.Fatalf("step %d (%+v): synced %v", i, s, q.Synced())
		}
	}
}
