package bpf

import (
	"fmt"
	"time"

	"github.com/hotsniff/hotsniff/bpf/samplelevel"

	"github.com/cilium/ebpf"
)

// Sampling is the flow sampling state shared by every attachment.
type Sampling struct {
	// Level: about 2^(-Level/16) of the connections are copied
	// (samplelevel.Rate; 0: all).
	Level uint8
	// Raises counts the times the programs raised Level themselves
	// because a ring was filling.
	Raises uint64
	// SampledOut counts segments of connections that were sampled out.
	SampledOut uint64
	// OutBytes and KeptBytes count request payload bytes of sampled-out
	// and of kept connections while sampling was on: the fraction of
	// requests really seen, which with few connections differs from the
	// level's nominal rate by chance.
	OutBytes, KeptBytes uint64
}

// initSampling sets a fresh sampling map to "keep everything".
func initSampling(m *ebpf.Map) error {
	s := hotsniffSampling{Keep: samplelevel.KeepAll, ResumeKeep: samplelevel.KeepAll}
	if err := m.Update(uint32(0), &s, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("initialize sampling map: %w", err)
	}
	return nil
}

// Sampling reads the sampling state.
func (c *Capture) Sampling() (Sampling, error) {
	var s hotsniffSampling
	if err := c.sampling.Lookup(uint32(0), &s); err != nil {
		return Sampling{}, fmt.Errorf("read sampling map: %w", err)
	}
	var per []hotsniffSampleCounts
	if err := c.sampled.Lookup(uint32(0), &per); err != nil {
		return Sampling{}, fmt.Errorf("read sampled-out counters: %w", err)
	}
	out := Sampling{Level: uint8(min(s.Level, samplelevel.Max)), Raises: s.Raises}
	for _, n := range per {
		out.SampledOut += n.OutSegs
		out.OutBytes += n.OutBytes
		out.KeptBytes += n.KeptBytes
	}
	return out, nil
}

// SetSampleLevel makes the programs copy the connections level keeps
// (samplelevel.KeepAt). The connections kept at a deeper level are a subset of
// those kept at a shallower one, so raising the level only stops copying
// some; lowering it resumes some that were skipped: their records carry
// Segment.Resumed for resumeFor (the stream layer's idle timeout: a
// connection skipped longer than that was forgotten anyway), so the stream
// layer restarts them without counting the skipped bytes as lost.
//
// The programs may raise the level between a read and this write; the
// write wins and the next control step sees the rings again.
func (c *Capture) SetSampleLevel(level uint8, resumeFor time.Duration) error {
	level = min(level, samplelevel.Max)
	var s hotsniffSampling
	if err := c.sampling.Lookup(uint32(0), &s); err != nil {
		return fmt.Errorf("read sampling map: %w", err)
	}
	keep := samplelevel.KeepAt(level)
	if uint32(level) == s.Level && keep == s.Keep {
		return nil
	}
	if keep > s.Keep {
		now := uint64(monotonicNow())
		rk := s.Keep
		if s.ResumeUntil > now {
			rk = min(rk, s.ResumeKeep) // an earlier resume still running
		}
		s.ResumeKeep = rk
		s.ResumeUntil = now + uint64(resumeFor.Nanoseconds())
	}
	s.Level, s.Keep = uint32(level), keep
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
