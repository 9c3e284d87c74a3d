// Package ebpfsrc reads the segments hotsniff's BPF programs write to their
// ring buffer and hands them out as a capture.Source.
package ebpfsrc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/internal/fdpoll"
)

// Source is a capture.Source over a bpf.Capture's ring buffer. It owns the
// Capture: Close detaches the programs too. Next is meant for one goroutine;
// Stats, SetDeadline and Close may be called from others.
type Source struct {
	c    *bpf.Capture
	mu   sync.Mutex // held while Next touches the mapping; Close unmaps under it
	ring *ring
	poll *fdpoll.Poller
	buf  []byte // the current record, copied out of the ring

	monoOffset int64
	sinceClock uint32

	closed   atomic.Bool
	deadline atomic.Int64 // SetDeadline, Unix ns; 0 = none

	packets, segments, malformed, bytes atomic.Uint64
}

// New starts reading c's ring buffer.
func New(c *bpf.Capture) (*Source, error) {
	m := c.Events()
	r, err := openRing(m.FD(), int(m.MaxEntries()))
	if err != nil {
		return nil, err
	}
	p, err := fdpoll.New(m.FD())
	if err != nil {
		_ = r.close()
		return nil, fmt.Errorf("watch ring buffer: %w", err)
	}
	return &Source{
		c:          c,
		ring:       r,
		poll:       p,
		buf:        make([]byte, 0, bpf.RecHdrSize+bpf.Chunk),
		monoOffset: bpf.MonotonicOffset(),
	}, nil
}

// Capture returns the loaded programs, for counters and port updates.
func (s *Source) Capture() *bpf.Capture { return s.c }

// clockEvery is how many records share one monotonic-to-wall offset; the
// offset only moves with NTP slewing or clock steps.
const clockEvery = 1 << 16

// Next implements capture.Source. seg.Payload aliases a buffer reused by the
// next call. It returns io.EOF after Close and os.ErrDeadlineExceeded when
// a deadline set with SetDeadline passes with nothing to read.
func (s *Source) Next(seg *capture.Segment) error {
	for {
		raw, err := s.read()
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return io.EOF
		case errors.Is(err, errEmpty), errors.Is(err, errBusy):
			now := time.Now()
			wake := now.Add(bpf.PollInterval)
			if d := s.deadline.Load(); d != 0 {
				if now.UnixNano() >= d {
					return os.ErrDeadlineExceeded
				}
				if d < wake.UnixNano() {
					wake = time.Unix(0, d)
				}
			}
			if errors.Is(err, errBusy) {
				// Another CPU is between reserve and submit, which
				// takes microseconds: a readiness wait would return at
				// once (the producer position has moved), so yield
				// and look again.
				runtime.Gosched()
				continue
			}
			// The programs wake us for the first record after
			// bpf.WakeupInterval and when the ring fills to their
			// threshold; the PollInterval timer picks up the records a
			// burst leaves behind after its last wakeup.
			werr := s.poll.Wait(wake, s.ready)
			if errors.Is(werr, fdpoll.ErrClosed) || s.closed.Load() {
				return io.EOF
			}
			if werr != nil && !errors.Is(werr, os.ErrDeadlineExceeded) {
				return fmt.Errorf("wait for ring buffer: %w", werr)
			}
			continue
		default:
			return err
		}
		s.packets.Add(1)
		s.bytes.Add(uint64(len(raw)))
		if s.sinceClock++; s.sinceClock >= clockEvery {
			s.sinceClock = 0
			s.monoOffset = bpf.MonotonicOffset()
		}
		if _, err := bpf.ParseRecord(raw, s.monoOffset, seg); err != nil {
			s.malformed.Add(1)
			continue
		}
		s.segments.Add(1)
		return nil
	}
}

// read copies the next record out of the ring.
func (s *Source) read() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, io.EOF
	}
	raw, err := s.ring.next(s.buf)
	if err == nil {
		s.buf = raw
	}
	return raw, err
}

// ready is Poller.Wait's check. It takes mu: Close may unmap the ring
// while Next waits.
func (s *Source) ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed.Load() && s.ring.available() != 0
}

// Pending is the number of bytes in the ring not yet read.
func (s *Source) Pending() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return 0
	}
	return s.ring.available()
}

// SetDeadline makes a blocked or later Next return os.ErrDeadlineExceeded
// once t passes and the ring is empty. The zero time removes the deadline.
func (s *Source) SetDeadline(t time.Time) {
	if t.IsZero() {
		s.deadline.Store(0)
		return
	}
	s.deadline.Store(t.UnixNano())
}

// Stats implements capture.Source. Packets counts ring records (a GSO
// super-packet is several).
func (s *Source) Stats() capture.Stats {
	return capture.Stats{
		Packets:   s.packets.Load(),
		Segments:  s.segments.Load(),
		Malformed: s.malformed.Load(),
		Bytes:     s.bytes.Load(),
	}
}

// Close stops a blocked Next, then detaches and unloads the programs.
func (s *Source) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	perr := s.poll.Close()
	s.mu.Lock()
	rerr := s.ring.close()
	s.mu.Unlock()
	return errors.Join(perr, rerr, s.c.Close())
}

// Ensure the interface is met.
var _ capture.Source = (*Source)(nil)
