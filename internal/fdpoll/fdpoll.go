// Package fdpoll waits for raw file descriptors (a BPF ring buffer map, an
// AF_PACKET socket) to become readable inside Go's network poller.
//
// The obvious way, a blocking epoll_wait or poll syscall on the reading
// goroutine, is what cilium/ebpf's ringbuf.Reader and a hand-written poll
// loop do, and it is expensive in a way no benchmark of the reader shows:
// while a goroutine sits in a blocking syscall the runtime's sysmon thread
// polls every 20 µs to hand its P to another thread, and it keeps that pace
// for as long as the process keeps entering such syscalls. Profiles of
// `hotsniff run` under redis-benchmark put 40–48 % of the daemon's CPU in
// sysmon's sleeps and the context switches they cause. Parked in the
// netpoller, the goroutine costs nothing while it waits and sysmon backs off.
//
// The descriptors are put into an epoll instance of our own (level
// triggered), and that instance's descriptor, which is itself pollable, is
// what the netpoller watches.
package fdpoll

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Poller waits until one of its descriptors is readable. Wait is meant for
// one goroutine; Close may be called from another and ends a Wait.
type Poller struct {
	f      *os.File // the epoll instance
	rc     syscall.RawConn
	closed atomic.Bool // a raw read on a closed file says "use of closed file", not os.ErrClosed
}

// ErrClosed is returned by Wait once Close has been called.
var ErrClosed = os.ErrClosed

// New returns a Poller over fds. The caller keeps ownership of fds and must
// not close them before the Poller.
func New(fds ...int) (*Poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create epoll instance: %w", err)
	}
	for _, fd := range fds {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			unix.Close(epfd)
			return nil, fmt.Errorf("add descriptor %d to epoll: %w", fd, err)
		}
	}
	// A non-blocking descriptor is what makes os.NewFile register it with
	// the netpoller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("set epoll descriptor non-blocking: %w", err)
	}
	p := &Poller{f: os.NewFile(uintptr(epfd), "epoll")}
	// SetReadDeadline fails on a descriptor the netpoller did not take.
	if err := p.f.SetReadDeadline(time.Time{}); err != nil {
		p.f.Close()
		return nil, fmt.Errorf("register epoll descriptor with the Go poller: %w", err)
	}
	if p.rc, err = p.f.SyscallConn(); err != nil {
		p.f.Close()
		return nil, fmt.Errorf("get raw epoll descriptor: %w", err)
	}
	return p, nil
}

// Wait returns nil as soon as ready reports true, which it asks first and
// again after every readiness notification; os.ErrDeadlineExceeded once
// deadline passes (the zero time waits for ever); ErrClosed after Close.
// ready must be cheap and must not block: it is the caller's own check of
// its ring, since a descriptor's readiness only says that something changed.
func (p *Poller) Wait(deadline time.Time, ready func() bool) error {
	if err := p.f.SetReadDeadline(deadline); err != nil {
		return p.wrap(err)
	}
	// No epoll_wait on the inner instance here: its entries are level
	// triggered and stay on its ready list, but every new wakeup of one of
	// its descriptors still propagates to the netpoller's edge-triggered
	// registration of it, and a syscall on every wait would wake sysmon.
	err := p.rc.Read(func(uintptr) bool { return ready() })
	if err != nil {
		return p.wrap(err)
	}
	return nil
}

func (p *Poller) wrap(err error) error {
	switch {
	case p.closed.Load():
		return ErrClosed
	case errors.Is(err, os.ErrDeadlineExceeded):
		return os.ErrDeadlineExceeded
	case errors.Is(err, os.ErrClosed):
		return ErrClosed
	}
	return fmt.Errorf("wait for readable descriptor: %w", err)
}

// Close ends a pending Wait with ErrClosed and releases the epoll instance.
func (p *Poller) Close() error {
	p.closed.Store(true)
	if err := p.f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("close epoll descriptor: %w", err)
	}
	return nil
}
