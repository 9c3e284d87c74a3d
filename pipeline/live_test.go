package pipeline

import (
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/stream"
)

// idleSource has no traffic: Next waits for the deadline, as the live
// readers do, and ends once stop is closed.
type idleSource struct {
	mu       sync.Mutex
	deadline time.Time
	stop     chan struct{}
	once     sync.Once
}

func (s *idleSource) end() { s.once.Do(func() { close(s.stop) }) }

func (s *idleSource) SetDeadline(t time.Time) {
	s.mu.Lock()
	s.deadline = t
	s.mu.Unlock()
}

func (s *idleSource) Next(*capture.Segment) error {
	s.mu.Lock()
	d := s.deadline
	s.mu.Unlock()
	if d.IsZero() {
		d = time.Now().Add(time.Hour)
	}
	select {
	case <-s.stop:
		return io.EOF
	case <-time.After(time.Until(d)):
		return os.ErrDeadlineExceeded
	}
}

func (s *idleSource) Stats() capture.Stats { return capture.Stats{} }
func (s *idleSource) Close() error         { return nil }

// TestRunWakes: Wake runs at the times it asks for, between ticks, not at
// the next tick. The kernel reader hands each ended sub-window to the
// detector so (--kernel-count): at --hot-qps 2000 a sub-window is 50 ms
// and the tick 100 ms, and a reader run by the tick made hot keys up to a
// tick later.
func TestRunWakes(t *testing.T) {
	p, err := New(Config{Stream: stream.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	src := &idleSource{stop: make(chan struct{})}
	const period = 20 * time.Millisecond
	var (
		asked []time.Time // what each call asked for
		at    []time.Time // when the next call came
		ticks int
	)
	wake := func(now time.Time) time.Time {
		if len(asked) > 0 {
			at = append(at, now)
		}
		if len(at) == 5 {
			src.end()
		}
		next := now.Add(period)
		asked = append(asked, next)
		return next
	}
	done := make(chan error, 1)
	go func() {
		done <- p.Run(src, LiveOptions{TickEvery: time.Hour, Wake: wake, BeforeTick: func() { ticks++ }})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		src.end()
		<-done
		t.Fatalf("Wake called %d times in 10 s with a %v period (ticks every hour): it waits for the tick", len(asked), period)
	}
	if len(at) < 5 {
		t.Fatalf("Wake called %d times, want 6", len(asked))
	}
	for i, a := range at {
		if a.Before(asked[i]) {
			t.Errorf("call %d at %v, before the %v it asked for", i+1, a, asked[i])
		}
	}
	if ticks != 1 { // the one at the end
		t.Errorf("%d ticks, want 1 (at the end)", ticks)
	}
}

// countingSource is idleSource counting the times Next returned at its
// deadline: the pipeline's wakeups.
type countingSource struct {
	idleSource
	mu      sync.Mutex
	wakeups int
}

func (s *countingSource) Next(seg *capture.Segment) error {
	err := s.idleSource.Next(seg)
	if err == os.ErrDeadlineExceeded {
		s.mu.Lock()
		s.wakeups++
		s.mu.Unlock()
	}
	return err
}

// TestRunTickSharesWake: a tick due before the next wake runs at the wake,
// so wakes and ticks of one period cost one wakeup, not two (the kernel's
// sub-window is often as long as the tick, and each wakeup of the
// pipeline's locked thread is a handoff and back), while ticks keep their
// rate and every wake still runs.
func TestRunTickSharesWake(t *testing.T) {
	p, err := New(Config{Stream: stream.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	src := &countingSource{idleSource: idleSource{stop: make(chan struct{})}}
	const period = 40 * time.Millisecond
	// Wakes on a grid offset from the start by half a period, as the
	// sub-window ends fall anywhere between two ticks.
	start := time.Now()
	wakes, ticks := 0, 0
	wake := func(now time.Time) time.Time {
		wakes++
		n := now.Sub(start)/period + 1
		return start.Add(n*period + period/2)
	}
	done := make(chan error, 1)
	go func() {
		done <- p.Run(src, LiveOptions{TickEvery: period, Wake: wake, BeforeTick: func() { ticks++ }})
	}()
	time.Sleep(50 * period)
	src.end()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	src.mu.Lock()
	n := src.wakeups
	src.mu.Unlock()
	t.Logf("%d wakeups, %d wakes, %d ticks in %d periods", n, wakes, ticks, 50)
	// Apart, wakes and ticks would take about 100 wakeups in 50 periods.
	if n > 60 {
		t.Errorf("%d wakeups in 50 periods of both a tick and a wake: they do not share them", n)
	}
	if ticks < 40 || wakes < 45 {
		t.Errorf("%d ticks, %d wakes in 50 periods: want about 50 of each", ticks, wakes)
	}
}
