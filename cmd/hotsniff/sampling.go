package main

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/hotsniff/hotsniff/bpf/samplelevel"
	"github.com/hotsniff/hotsniff/capture/live"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/internal/budget"
	"github.com/hotsniff/hotsniff/metrics"
)

// sampler runs the flow sampling of an eBPF capture: with --max-cpu it
// keeps the measured cost at the budget; without, it only brings the rate
// back up after the programs lowered it themselves (a ring was filling),
// one halving per dwell. It also measures the fraction of requests the
// capture really copies, for the detector's scaling.
type sampler struct {
	c      live.Sampler
	ctl    *budget.Controller
	budget float64
	stats  io.Closer // BPF run-time accounting, on while the daemon runs
	resume time.Duration
	last   metrics.Sampling
	warned bool // sampling deeper than the detector resolves
	// The first steps of a budget come every earlyStep instead of every
	// second (see early).
	begun, lastStep time.Time
	floor           bool // budget not held at the deepest level

	// The fraction of requests really copied (measure).
	level             uint8
	prevKept, prevOut uint64
	luck              float64 // measured ÷ nominal, smoothed; 0: unknown
}

// startSampler sets up flow sampling for an eBPF capture (nil otherwise).
func (d *daemon) startSampler() *sampler {
	ctl := d.cap.Sampler()
	if ctl == nil {
		if d.cfg.Capture.MaxCPU > 0 {
			d.log.Warn("--max-cpu needs an eBPF capture (sampling happens in the kernel programs); AF_PACKET runs unbounded")
		}
		return nil
	}
	s := &sampler{c: ctl, budget: d.cfg.Capture.MaxCPU, resume: d.cfg.Stream.IdleTimeout}
	target := math.Inf(1)
	if d.cfg.Capture.MaxCPU > 0 {
		target = d.cfg.Capture.MaxCPU
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
	s.ctl = budget.New(target, samplelevel.Max, samplelevel.LevelsPerHalving)
	return s
}

func (s *sampler) close() {
	if s != nil && s.stats != nil {
		s.stats.Close()
	}
}

// earlyStep and earlyFor: for its first earlyFor a budget is stepped every
// earlyStep. A daemon that starts on a busy node would otherwise run its
// first second unsampled, several times over its budget, with its rings
// filling; a quarter second measures the cost coarsely, but a cost several
// times the budget is plain, and cut at once.
const (
	earlyStep = 250 * time.Millisecond
	earlyFor  = 3 * time.Second
)

// early says whether a step is due before the next full tick.
func (s *sampler) early(now time.Time) bool {
	return s.budget > 0 && !s.begun.IsZero() && now.Sub(s.begun) < earlyFor && now.Sub(s.lastStep) >= earlyStep
}

// step measures the cost and sets the sampling level; on the pipeline
// goroutine, about once a second.
func (s *sampler) step(d *daemon, det *detect.Detector, now time.Time) {
	if s.begun.IsZero() {
		s.begun = now
	}
	s.lastStep = now
	// With a budget, the pipeline's own thread (this goroutine is locked
	// to it): HTTP handlers and the publisher run elsewhere and do not
	// count. Without one the share is only reported, and is the whole
	// daemon's (the pipeline is not locked to a thread: run.go).
	cpu := budget.ProcessCPU
	if s.budget > 0 {
		cpu = budget.ThreadCPU
	}
	proc, err := cpu()
	if err != nil {
		d.log.Warn("measure CPU", "err", err)
		return
	}
	cost := budget.Cost{Process: proc}
	if s.budget > 0 {
		// The programs' run time (a system call per program) counts only
		// against a budget: without one the share is the daemon's own.
		cost.Programs = s.c.ProgramRunTime()
	}
	st, err := s.c.Sampling()
	if err != nil {
		d.log.Warn("read sampling state", "err", err)
		return
	}
	s.measure(det, st)
	level := s.ctl.Step(now, cost, st.Level)
	if level != st.Level {
		if err := s.c.SetSampleLevel(level, s.resume); err != nil {
			d.log.Warn("set sampling", "err", err)
			return
		}
		s.setLevel(level)
		d.log.Debug("flow sampling", "rate", fmt.Sprintf("%.4g", samplelevel.Rate(level)), "cpu_share", fmt.Sprintf("%.3f", s.ctl.Share()), "budget", s.budget)
	}
	rate := samplelevel.Rate(level)
	if res := det.ResolvableRate(); rate < res && !s.warned {
		s.warned = true
		d.log.Warn("flow sampling is deeper than keys near the threshold can be told apart at: keys are reported only well above it until the rate recovers; a longer --window or a larger --max-cpu avoids it",
			"rate", fmt.Sprintf("%.4g", rate), "resolvable_rate", fmt.Sprintf("%.4g", res), "cpu_share", fmt.Sprintf("%.3f", s.ctl.Share()), "budget", s.budget)
	}
	if s.budget > 0 && level == samplelevel.Max && s.ctl.Share() > s.budget && !s.floor {
		s.floor = true
		d.log.Warn("CPU budget not held at the deepest sampling: what is left is the cost of looking at every packet; raise --max-cpu",
			"cpu_share", fmt.Sprintf("%.3f", s.ctl.Share()), "budget", s.budget)
	}
	// The rate just set: the detector learns it from the records, which
	// may be few.
	shown := rate
	if s.luck > 0 && level == s.level {
		shown = min(rate*s.luck, 1)
	}
	s.last = metrics.Sampling{
		Rate: shown, SampledOut: st.SampledOut, KernelRaises: st.Raises,
		CPUShare: s.ctl.Share(), Budget: s.budget, Reportable: det.EffectiveThreshold(),
	}
}

// measure gives the detector the fraction of requests the programs really
// copy: with few connections the connections kept carry more or less than
// the level's nominal share of the requests, and every count scaled by the
// nominal rate would be off by as much. Each step whose level held
// measures the request bytes kept over all request bytes (request bytes
// stand for requests: the connections of one application send requests of
// similar sizes); the ratio to the nominal rate is smoothed over steps and
// carried over small changes of level (the kept connections are nearly the
// same), and forgotten after a change of more than half an octave.
func (s *sampler) measure(det *detect.Detector, st bpf.Sampling) {
	dk, do := st.KeptBytes-s.prevKept, st.OutBytes-s.prevOut
	s.prevKept, s.prevOut = st.KeptBytes, st.OutBytes
	if st.Level != s.level {
		// The programs changed it during the step: what was counted
		// mixes two levels.
		s.setLevel(st.Level)
		return
	}
	if st.Level == 0 || dk+do < 64<<10 || dk == 0 {
		return
	}
	rate := samplelevel.Rate(st.Level)
	luck := float64(dk) / float64(dk+do) / rate
	if s.luck == 0 {
		s.luck = luck
	} else {
		s.luck += 0.3 * (luck - s.luck)
	}
	det.SetSeenFraction(rate, s.luck*rate)
}

// setLevel notes the level in effect from now on.
func (s *sampler) setLevel(level uint8) {
	if d := int(level) - int(s.level); d > samplelevel.LevelsPerHalving/2 || d < -samplelevel.LevelsPerHalving/2 {
		s.luck = 0
	}
	s.level = level
}
