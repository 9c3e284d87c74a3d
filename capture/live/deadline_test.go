package live

import (
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/capture"
)

type deadlineSource struct {
	capture.Source
	set time.Time
}

func (d *deadlineSource) SetDeadline(t time.Time) { d.set = t }

// A live pipeline ticks on the source's deadline when no traffic comes: the
// Capture must pass SetDeadline through to the reader it wraps.
func TestCaptureForwardsDeadline(t *testing.T) {
	src := &deadlineSource{}
	var c any = &Capture{Source: src}
	dl, ok := c.(interface{ SetDeadline(time.Time) })
	if !ok {
		t.Fatal("Capture has no SetDeadline")
	}
	at := time.Unix(1000, 0)
	dl.SetDeadline(at)
	if !src.set.Equal(at) {
		t.Fatalf("deadline not forwarded: %v", src.set)
	}
	(&Capture{Source: struct{ capture.Source }{}}).SetDeadline(at) // a source without one: no panic
}
