// Package ebpfsrc reads the segments hotsniff's BPF programs write to their
// ring buffers (one per CPU) and hands them out, merged in timestamp order,
// as a capture.Source.
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

// Source is a capture.Source over a bpf.Capture's ring buffers, one per
// CPU, merged back into one stream in timestamp order. It owns the Capture:
// Close detaches the programs too. Next is meant for one goroutine; Stats,
// SetDeadline and Close may be called from others.
//
// The merge works in rounds. A round starts by loading every ring's
// producer position; within the round, Next hands out the oldest of the
// rings' next records until every ring's window is used up. Loading a
// producer position pulls a cache line from the CPU that writes it, so it
// is done once per ring per round, not once per record; and what a ring
// receives during a round was written after everything in the other rings'
// windows, so leaving it for the next round keeps the order.
type Source struct {
	c      *bpf.Capture
	mu     sync.Mutex // held while Next touches the mappings; Close unmaps under it
	rings  []*ring
	active []int // rings with records left in this round
	poll   *fdpoll.Poller
	// buf holds the current record, copied out of its ring: the Segment
	// Next fills points into it, and Close may unmap the rings while the
	// pipeline still reads that Segment.
	buf []byte
	rec bpf.Record // the record being turned into a Segment

	monoOffset int64
	sinceClock uint32

	closed   atomic.Bool
	deadline atomic.Int64 // SetDeadline, Unix ns; 0 = none

	packets, segments, malformed, bytes atomic.Uint64
}

// New starts reading c's ring buffers.
func New(c *bpf.Capture) (*Source, error) {
	s := &Source{
		c:          c,
		buf:        make([]byte, 0, bpf.RecHdrSize+bpf.Chunk),
		monoOffset: bpf.MonotonicOffset(),
	}
	var fds []int
	for cpu, m := range c.Rings() {
		r, err := openRing(m.FD(), int(m.MaxEntries()))
		if err != nil {
			s.closeRings()
			return nil, fmt.Errorf("ring of CPU %d: %w", cpu, err)
		}
		s.rings = append(s.rings, r)
		fds = append(fds, m.FD())
	}
	p, err := fdpoll.New(fds...)
	if err != nil {
		s.closeRings()
		return nil, fmt.Errorf("watch ring buffers: %w", err)
	}
	s.poll = p
	return s, nil
}

func (s *Source) closeRings() error {
	var errs []error
	for _, r := range s.rings {
		errs = append(errs, r.close())
	}
	return errors.Join(errs...)
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
		if _, err := bpf.ParseRecord(raw, s.monoOffset, &s.rec); err != nil {
			s.malformed.Add(1)
			continue
		}
		r := &s.rec
		*seg = capture.Segment{TS: r.TS, Src: r.Src, Dst: r.Dst, Seq: r.Seq, Ack: r.Ack, Flags: r.Flags,
			Payload: r.Payload, Missing: r.Missing, Resumed: r.Resumed, SampleLevel: r.SampleLevel, KernelCounted: r.KernelCounted, Replies: capture.ReplyFraming(r.Replies)}
		s.segments.Add(1)
		return nil
	}
}

// read copies the next record out of the rings.
func (s *Source) read() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, io.EOF
	}
	for {
		r, err := s.oldest()
		if err != nil {
			return nil, err
		}
		raw, err := r.next(s.buf)
		if errors.Is(err, errEmpty) {
			continue // the rest of its window was discarded records
		}
		if err == nil {
			s.buf = raw
		}
		return raw, err
	}
}

// oldest returns the ring whose next record is the oldest in this round,
// starting a new round when the last one is used up. It returns errBusy
// when a ring's next record is still being written (its timestamp is not
// there yet) and errEmpty when no ring has anything.
func (s *Source) oldest() (*ring, error) {
	for round := 0; ; round++ {
		if len(s.active) == 1 {
			// Nothing to compare with: the common case when one CPU
			// handles the traffic of the moment.
			if r := s.rings[s.active[0]]; r.pos != r.prodSeen {
				return r, nil
			}
		}
		best, bestTS, busy := -1, uint64(0), false
		for i := 0; i < len(s.active); {
			ts, err := s.rings[s.active[i]].peek()
			switch {
			case err == nil:
				if best < 0 || ts < bestTS {
					best, bestTS = s.active[i], ts
				}
			case errors.Is(err, errEmpty):
				s.active[i] = s.active[len(s.active)-1]
				s.active = s.active[:len(s.active)-1]
				continue
			case errors.Is(err, errBusy):
				busy = true
			default:
				return nil, err
			}
			i++
		}
		switch {
		case busy:
			return nil, errBusy
		case best >= 0:
			return s.rings[best], nil
		case round > 0:
			return nil, errEmpty
		}
		for i, r := range s.rings {
			if r.refresh() {
				s.active = append(s.active, i)
			}
		}
	}
}

// ready is Poller.Wait's check. It takes mu: Close may unmap the rings
// while Next waits.
func (s *Source) ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return false
	}
	for _, r := range s.rings {
		if r.available() != 0 {
			return true
		}
	}
	return false
}

// Pending is the number of bytes in the rings not yet read.
func (s *Source) Pending() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return 0
	}
	var n uint64
	for _, r := range s.rings {
		n += r.available()
	}
	return n
}

// SetDeadline makes a blocked or later Next return os.ErrDeadlineExceeded
// once t passes and the rings are empty. The zero time removes the deadline.
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
	rerr := s.closeRings()
	s.mu.Unlock()
	return errors.Join(perr, rerr, s.c.Close())
}

// Ensure the interface is met.
var _ capture.Source = (*Source)(nil)
