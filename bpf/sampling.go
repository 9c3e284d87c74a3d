package bpf

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf"
)

// MaxSampleShift is the largest flow sampling shift the programs apply:
// one connection in 4096.
const MaxSampleShift = 12

// Sampling is the flow sampling state shared by every attachment.
type Sampling struct {
	// Shift: one connection in 2^Shift is copied (0: all).
	Shift uint32
	// Raises counts the times the programs raised Shift themselves because
	// a ring was filling.
	Raises uint64
	// SampledOut counts segments of connections that were sampled out.
	SampledOut uint64
}

// Sampling reads the sampling state.
func (c *Capture) Sampling() (Sampling, error) {
	var s hotsniffSampling
	if err := c.sampling.Lookup(uint32(0), &s); err != nil {
		return Sampling{}, fmt.Errorf("read sampling map: %w", err)
	}
	var per []uint64
	if err := c.sampled.Lookup(uint32(0), &per); err != nil {
		return Sampling{}, fmt.Errorf("read sampled-out counters: %w", err)
	}
	out := Sampling{Shift: s.Shift, Raises: s.Raises}
	for _, n := range per {
		out.SampledOut += n
	}
	return out, nil
}

// SetSampleShift makes the programs copy one connection in 2^shift. The
// connections kept at a larger shift are a subset of those kept at a
// smaller one, so raising the shift only stops copying some; lowering it
// resumes some that were skipped: their records carry Segment.Resumed for
// resumeFor (the stream layer's idle timeout: a connection skipped longer
// than that was forgotten anyway), so the stream layer restarts them
// without counting the skipped bytes as lost.
//
// The programs may raise the shift between a read and this write; the
// write wins and the next control step sees the rings again.
func (c *Capture) SetSampleShift(shift uint32, resumeFor time.Duration) error {
	shift = min(shift, MaxSampleShift)
	var s hotsniffSampling
	if err := c.sampling.Lookup(uint32(0), &s); err != nil {
		return fmt.Errorf("read sampling map: %w", err)
	}
	if shift == s.Shift {
		return nil
	}
	if shift < s.Shift {
		now := uint64(monotonicNow())
		rs := s.Shift
		if s.ResumeUntil > now {
			rs = max(rs, s.ResumeShift) // an earlier resume still running
		}
		s.ResumeShift = rs
		s.ResumeUntil = now + uint64(resumeFor.Nanoseconds())
	}
	s.Shift = shift
	if err := c.sampling.Update(uint32(0), &s, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("write sampling map: %w", err)
	}
	return nil
}

// ProgramRunTime is the time the kernel accounts to the attached programs
// since they were loaded (zero unless BPF run-time statistics are on: see
// EnableRunTimeStats). Programs of detached interfaces no longer count.
func (c *Capture) ProgramRunTime() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var total time.Duration
	seen := map[*ebpf.Program]bool{}
	for _, a := range c.ifaces {
		for _, p := range []*ebpf.Program{a.objs.HotsniffXdp, a.objs.HotsniffTcIngress, a.objs.HotsniffTcEgress,
			a.objs.HotsniffCgroupIngress, a.objs.HotsniffCgroupEgress} {
			if p == nil || seen[p] {
				continue
			}
			seen[p] = true
			if st, err := p.Stats(); err == nil {
				total += st.Runtime
			}
		}
	}
	return total
}
