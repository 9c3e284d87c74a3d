package bpf

import (
	"fmt"
	"sync"
	"time"
	"unsafe"

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

// samplingReads is what Sampling keeps between calls: the daemon reads the
// state every tick, and on a guest where a system call costs tens of
// microseconds a lookup of the per-CPU counters each time was a large
// part of an idle daemon's CPU.
type samplingReads struct {
	mem *ebpf.Memory // the sampling map, mapped (BPF_F_MMAPABLE)

	mu     sync.Mutex
	quiet  int    // consecutive reads at level 0 with no raise and no level set between
	raises uint64 // Raises at the last read
	set    bool   // SetSampleLevel wrote since the last read
	per    []hotsniffSampleCounts
	out    Sampling // the counters' sums at the last lookup
}

// Sampling reads the sampling state. The shared state is read through the
// map's memory; the per-CPU sampled-out counters only when sampling may
// have run since they were last read. The programs count them only while
// the level is above 0, and the level leaves 0 only by a raise (Raises
// moves) or by SetSampleLevel. Once two reads in a row found level 0 with
// neither since the read before (one more read than needed, so that a
// program that saw the level just before it fell back to 0 has finished
// counting), the counters cannot move until one of them happens.
func (c *Capture) Sampling() (Sampling, error) {
	var s hotsniffSampling
	if _, err := c.samp.mem.ReadAt(unsafe.Slice((*byte)(unsafe.Pointer(&s)), unsafe.Sizeof(s)), 0); err != nil {
		return Sampling{}, fmt.Errorf("read sampling map: %w", err)
	}
	r := &c.samp
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.Level == 0 && s.Raises == r.raises && !r.set {
		r.quiet++
	} else {
		r.quiet = 0
	}
	r.raises, r.set = s.Raises, false
	if r.quiet < 2 {
		if err := c.sampled.Lookup(uint32(0), &r.per); err != nil {
			return Sampling{}, fmt.Errorf("read sampled-out counters: %w", err)
		}
		r.out = Sampling{}
		for _, n := range r.per {
			r.out.SampledOut += n.OutSegs
			r.out.OutBytes += n.OutBytes
			r.out.KeptBytes += n.KeptBytes
		}
	}
	out := r.out
	out.Level, out.Raises = uint8(min(s.Level, samplelevel.Max)), s.Raises
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
	c.samp.mu.Lock()
	c.samp.set = true
	c.samp.mu.Unlock()
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
