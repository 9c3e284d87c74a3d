package fdpoll

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func eventfd(t *testing.T) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func signal(t *testing.T, fd int) {
	t.Helper()
	one := [8]byte{1}
	if _, err := unix.Write(fd, one[:]); err != nil {
		t.Fatal(err)
	}
}

// waitForLateEvent starts a Wait whose ready turns true 20 ms later, when
// fd gets an event, and fails unless the Wait returns nil well before its
// 10 s deadline.
func waitForLateEvent(t *testing.T, p *Poller, fd int, what string) {
	t.Helper()
	var flag atomic.Bool
	go func() {
		time.Sleep(20 * time.Millisecond)
		flag.Store(true)
		one := [8]byte{1}
		_, _ = unix.Write(fd, one[:])
	}()
	start := time.Now()
	if err := p.Wait(time.Now().Add(10*time.Second), flag.Load); err != nil {
		t.Fatalf("%s: Wait = %v", what, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("%s: woken after %v: the event was lost", what, d)
	}
}

func TestWaitWakesOnReadable(t *testing.T) {
	a, b := eventfd(t), eventfd(t)
	p, err := New(a, b)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitForLateEvent(t, p, b, "second descriptor")
}

func TestWaitReturnsAtOnceWhenReady(t *testing.T) {
	p, err := New(eventfd(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	calls := 0
	if err := p.Wait(time.Time{}, func() bool { calls++; return true }); err != nil || calls != 1 {
		t.Fatalf("Wait = %v after %d calls of ready, want nil after 1", err, calls)
	}
}

// A readable descriptor whose caller finds nothing (ready false) must not
// make Wait spin or return: it waits for the deadline.
func TestWaitIgnoresReadinessWithoutData(t *testing.T) {
	fd := eventfd(t)
	signal(t, fd) // stays readable: level triggered
	p, err := New(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	calls := 0
	err = p.Wait(time.Now().Add(50*time.Millisecond), func() bool { calls++; return false })
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Wait = %v, want deadline exceeded", err)
	}
	if calls > 10 {
		t.Errorf("ready was asked %d times in 50 ms: Wait spins on a readable descriptor", calls)
	}
}

func TestCloseEndsWait(t *testing.T) {
	p, err := New(eventfd(t))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Wait(time.Time{}, func() bool { return false }) }()
	time.Sleep(20 * time.Millisecond)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Wait after Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end Wait")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := p.Wait(time.Time{}, func() bool { return false }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait on a closed Poller = %v, want ErrClosed", err)
	}
}

func TestNewRejectsBadDescriptor(t *testing.T) {
	if _, err := New(-1); err == nil {
		t.Fatal("New(-1) succeeded")
	}
}

// A descriptor that stays readable (its entry never leaves the inner ready
// list, since Wait does not drain it) must still wake Wait on its next
// event.
func TestWaitWakesOnNewEventOfReadableDescriptor(t *testing.T) {
	fd := eventfd(t)
	signal(t, fd)
	p, err := New(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Let a first Wait see the stale readiness and time out.
	if err := p.Wait(time.Now().Add(20*time.Millisecond), func() bool { return false }); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("first Wait = %v", err)
	}
	for round := range 3 {
		waitForLateEvent(t, p, fd, fmt.Sprintf("round %d", round))
	}
}
