package stream

import (
	"testing"

	"github.com/hotsniff/hotsniff/capture"
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
