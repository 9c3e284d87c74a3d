package main

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/internal/budget"
	"github.com/hotsniff/hotsniff/metrics"
)

// sampler runs the flow sampling of an eBPF capture: with --max-cpu it
// keeps the measured cost within the budget; without, it only brings the
// rate back up after the programs lowered it themselves (a ring was
// filling), one step per dwell.
type sampler struct {
	c      *bpf.Capture
	ctl    *budget.Controller
	budget float64
	stats  io.Closer // BPF run-time accounting, on while the daemon runs
	resume time.Duration
	last   metrics.Sampling
	warned bool
}

// validateMaxCPU checks --max-cpu: a share of one core, 0 for none.
func validateMaxCPU(v float64) error {
	if math.IsNaN(v) || v < 0 || v > 1024 {
		return usagef("--max-cpu %g: want a share of one core such as 0.05 (5 %%), or 0 for no budget", v)
	}
	return nil
}

// startSampler sets up flow sampling for an eBPF capture (nil otherwise).
func (d *daemon) startSampler(det *detect.Detector) *sampler {
	if d.bpfCap == nil {
		if d.cf.maxCPU > 0 {
			d.log.Warn("--max-cpu needs an eBPF capture (sampling happens in the kernel programs); AF_PACKET runs unbounded")
		}
		return nil
	}
	s := &sampler{c: d.bpfCap, budget: d.cf.maxCPU, resume: d.scfg.IdleTimeout}
	target := math.Inf(1)
	if d.cf.maxCPU > 0 {
		target = d.cf.maxCPU
		// The programs' own cost counts against the budget; the kernel
		// accounts it only while run-time statistics are on (a clock read
		// before and after each run, tens of nanoseconds).
		st, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
		if err != nil {
			d.log.Warn("BPF run-time statistics unavailable: the budget covers the daemon's user and system time only", "err", err)
		} else {
			s.stats = st
		}
	}
	// The controller samples no deeper than the detector can still tell
	// keys 20 % above the threshold from keys 20 % below (a longer --window
	// allows more); the programs go further on their own only to keep the
	// rings from overflowing.
	s.ctl = budget.New(target, uint32(min(det.MaxSampleShift(), bpf.MaxSampleShift)))
	return s
}

func (s *sampler) close() {
	if s != nil && s.stats != nil {
		s.stats.Close()
	}
}

// step measures the cost and sets the sampling shift; on the pipeline
// goroutine, about once a second.
func (s *sampler) step(d *daemon, now time.Time) {
	cpu, err := budget.ProcessCPU()
	if err != nil {
		d.log.Warn("measure CPU", "err", err)
		return
	}
	cpu += s.c.ProgramRunTime()
	st, err := s.c.Sampling()
	if err != nil {
		d.log.Warn("read sampling state", "err", err)
		return
	}
	shift := s.ctl.Step(now, cpu, st.Shift)
	if s.budget > 0 && shift >= s.ctl.MaxShift && s.ctl.Share() > s.budget && !s.warned {
		s.warned = true
		d.log.Warn("CPU budget not held: sampling deeper would blur keys near the threshold; a longer --window allows it",
			"cpu_share", fmt.Sprintf("%.3f", s.ctl.Share()), "budget", s.budget, "rate", fmt.Sprintf("1/%d", 1<<shift))
	}
	if shift != st.Shift {
		if err := s.c.SetSampleShift(shift, s.resume); err != nil {
			d.log.Warn("set sampling", "err", err)
			return
		}
		d.log.Info("flow sampling", "rate", fmt.Sprintf("1/%d", 1<<shift), "cpu_share", fmt.Sprintf("%.3f", s.ctl.Share()), "budget", s.budget)
	}
	s.last = metrics.Sampling{
		Rate: 1 / float64(uint64(1)<<shift), SampledOut: st.SampledOut, KernelRaises: st.Raises,
		CPUShare: s.ctl.Share(), Budget: s.budget,
	}
}
