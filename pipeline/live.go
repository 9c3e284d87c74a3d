package pipeline

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hotsniff/hotsniff/capture"
)

// LiveOptions drive Run.
type LiveOptions struct {
	// TickEvery is how often time-driven work runs: flows expire, the
	// detector sees time pass without traffic (default 100 ms).
	TickEvery time.Duration
	// BeforeTick is called on the pipeline goroutine before each tick:
	// counts kept elsewhere (the kernel's) reach the detector first.
	BeforeTick func()
	// OnTick is called on the pipeline goroutine after each tick, with the
	// pipeline's clock (packet time) and the wall clock. It is where the
	// daemon copies state for HTTP and metrics.
	OnTick func(clock, now time.Time)
	// Wake, when set, is called on the pipeline goroutine at the start and
	// then as soon as the wall clock reaches the time it last returned
	// (the zero time: never again), between ticks as well: work due on a
	// clock finer than the tick. The kernel's counts (--kernel-count) must
	// reach the detector as each sub-window ends: the sub-window is W/8,
	// 50 ms at --hot-qps 2000, shorter than a tick, and every read of a
	// bucket not yet located stays in the kernel, so a reader that waits
	// for the tick delays every hot key by up to a tick.
	Wake func(now time.Time) time.Time
}

// Run feeds a live source to the pipeline until the source ends (io.EOF,
// as when it is closed: Run then returns nil) or fails. A source with
// SetDeadline (the eBPF and AF_PACKET readers) is woken for every tick
// even when no traffic comes.
//
// The stream layer and the detector run on packet time. Caught up (the
// source had nothing more), time passes for them as on the wall; behind
// (records still waiting: the reader was descheduled on a busy node), the
// clock stops at the last record, or every record of the backlog would
// arrive "late" and not count.
func (p *Pipeline) Run(src capture.Source, o LiveOptions) error {
	every := cmp.Or(o.TickEvery, 100*time.Millisecond)
	var seg capture.Segment
	dl, _ := src.(interface{ SetDeadline(time.Time) })
	now := time.Now()
	next := now.Add(every)
	var wake time.Time // zero: no Wake
	if o.Wake != nil {
		wake = o.Wake(now)
	}
	// deadline is when Next must return at the latest: the tick, or the
	// wake before it.
	deadline := func() time.Time {
		if !wake.IsZero() && wake.Before(next) {
			return wake
		}
		return next
	}
	if dl != nil {
		dl.SetDeadline(deadline())
	}
	for n := 1; ; n++ {
		err := src.Next(&seg)
		switch {
		case err == nil:
			p.Add(&seg)
			if n&1023 != 0 {
				continue
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
		case errors.Is(err, io.EOF):
			now := time.Now()
			p.tick(now, now, o)
			return nil
		default:
			return fmt.Errorf("capture: %w", err)
		}
		now := time.Now()
		woke := false
		if !wake.IsZero() && !now.Before(wake) {
			wake = o.Wake(now)
			woke = true
		}
		// A tick due before the next wake runs now, early by less than the
		// time between wakes: with the kernel's sub-windows as long as a
		// tick, the two shared one wakeup instead of taking two, each a
		// handoff to the pipeline's own thread and back.
		if now.Before(next) && !(woke && next.Before(wake)) {
			if woke && dl != nil {
				dl.SetDeadline(deadline())
			}
			continue
		}
		clock := now
		if err == nil && seg.TS < now.UnixNano() {
			clock = time.Unix(0, seg.TS)
		}
		p.tick(clock, now, o)
		next = now.Add(every)
		if dl != nil {
			dl.SetDeadline(deadline())
		}
	}
}

func (p *Pipeline) tick(clock, now time.Time, o LiveOptions) {
	if o.BeforeTick != nil {
		o.BeforeTick()
	}
	p.Tick(clock.UnixNano())
	if o.OnTick != nil {
		o.OnTick(clock, now)
	}
}
