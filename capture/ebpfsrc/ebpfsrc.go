// Package ebpfsrc reads the segments hotsniff's BPF programs write to their
// ring buffer and hands them out as a capture.Source.
package ebpfsrc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture"
)

// Source is a capture.Source over a bpf.Capture's ring buffer. It owns the
// Capture: Close detaches the programs too. Next is meant for one goroutine;
// Stats, SetDeadline and Close may be called from others.
type Source struct {
	c   *bpf.Capture
	rd  *ringbuf.Reader
	rec ringbuf.Record // reused: RawSample grows to the largest record once

	monoOffset int64
	sinceClock uint32

	closed   atomic.Bool
	deadline atomic.Int64 // SetDeadline, Unix ns; 0 = none

	packets, segments, malformed, bytes atomic.Uint64
}

// New starts reading c's ring buffer.
func New(c *bpf.Capture) (*Source, error) {
	rd, err := ringbuf.NewReader(c.Events())
	if err != nil {
		return nil, fmt.Errorf("open ring buffer reader: %w", err)
	}
	rd.SetDeadline(time.Now().Add(bpf.PollInterval))
	s := &Source{c: c, rd: rd, monoOffset: bpf.MonotonicOffset()}
	s.rec.RawSample = make([]byte, 0, bpf.RecHdrSize+bpf.Chunk)
	return s, nil
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
		if err := s.rd.ReadInto(&s.rec); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) || s.closed.Load() {
				return io.EOF
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("read ring buffer: %w", err)
			}
			// The programs wake us only when the ring fills up; the
			// timer picks up what a light load leaves behind.
			now := time.Now()
			if d := s.deadline.Load(); d != 0 && now.UnixNano() >= d {
				s.rd.SetDeadline(now.Add(bpf.PollInterval))
				return os.ErrDeadlineExceeded
			}
			s.rd.SetDeadline(now.Add(bpf.PollInterval))
			continue
		}
		s.packets.Add(1)
		s.bytes.Add(uint64(len(s.rec.RawSample)))
		if s.sinceClock++; s.sinceClock >= clockEvery {
			s.sinceClock = 0
			s.monoOffset = bpf.MonotonicOffset()
		}
		if _, err := bpf.ParseRecord(s.rec.RawSample, s.monoOffset, seg); err != nil {
			s.malformed.Add(1)
			continue
		}
		s.segments.Add(1)
		return nil
	}
}

// SetDeadline makes a blocked or later Next return os.ErrDeadlineExceeded
// once t passes and the ring is empty (checked every bpf.PollInterval). The
// zero time removes the deadline.
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
	return errors.Join(s.rd.Close(), s.c.Close())
}

// Ensure the interface is met.
var _ capture.Source = (*Source)(nil)
