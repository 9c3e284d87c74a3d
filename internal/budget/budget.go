// Package budget holds hotsniff's cost under a CPU budget (--max-cpu): it
// measures what the daemon costs (its own user and system time, plus the
// run time the kernel accounts to its eBPF programs) and picks the flow
// sampling level that keeps that cost at the budget.
//
// Levels are sixteenths of an octave of the sampling rate (capture.KeepAt):
// fine enough to hold the budget to a few per cent. Most of the cost is
// proportional to the share of connections copied, so the controller works
// on the logarithm of the rate: each step moves the level by a part (Gain)
// of the octaves between the measured cost and the budget. That converges
// geometrically without overshoot; a part of the cost that sampling does
// not reduce (the programs' parse of every packet) only slows it, and a
// one-level step is ±4 %, so a cost within that of the budget leaves the
// level alone instead of hunting around it. A cost far over the budget
// (at start, or a load surge) is cut at once, whole.
package budget

import (
	"math"
	"time"
)

// Controller picks the sampling level for a budget. Its zero value is not
// usable: use New.
type Controller struct {
	// Budget is the target, as a share of one core (0.05: 5 %); +Inf for
	// none: the controller then only brings the level back down after the
	// programs raised it themselves, one halving per MinDwell.
	Budget float64
	// MaxLevel is the deepest level it asks for.
	MaxLevel uint8
	// PerHalving is the number of levels that halve the rate.
	PerHalving int
	// Gain is the part of the error (in octaves) one step corrects.
	Gain float64
	// MinDwell is the least time between two lowerings without a budget,
	// and, with one, the time the level is not lowered after the programs
	// raised it: their reader fell behind at the lower level, so it is not
	// tried again at once.
	MinDwell time.Duration

	level      uint8
	kernelAt   time.Time // when the programs last raised the level
	lastChange time.Time
	lastT      time.Time
	lastCPU    time.Duration
	share      float64
	started    bool
}

// New returns a controller for budget (share of one core; +Inf for none).
func New(budget float64, maxLevel uint8, perHalving int) *Controller {
	return &Controller{Budget: budget, MaxLevel: maxLevel, PerHalving: perHalving, Gain: 0.5, MinDwell: 3 * time.Second}
}

// Share is the cost measured over the last step, as a share of one core.
func (c *Controller) Share() float64 { return c.share }

// Level is the level last decided.
func (c *Controller) Level() uint8 { return c.level }

// Step takes the cumulative cost cpu at now and the level in effect (the
// programs may have raised it themselves) and returns the level to set.
// Steps should be about a second apart: shorter ones measure scheduler
// noise.
func (c *Controller) Step(now time.Time, cpu time.Duration, current uint8) uint8 {
	if !c.started {
		c.started, c.lastT, c.lastCPU, c.lastChange, c.level = true, now, cpu, now, current
		return current
	}
	dt := now.Sub(c.lastT)
	if dt <= 0 {
		return c.level
	}
	dcpu := max(cpu-c.lastCPU, 0) // a detached program's time leaves the sum
	c.lastT, c.lastCPU = now, cpu
	c.share = float64(dcpu) / float64(dt)
	if current > c.level {
		// The programs shed load because a ring was filling: start from
		// their level.
		c.level, c.lastChange, c.kernelAt = current, now, now
	}
	if math.IsInf(c.Budget, 1) {
		if c.level > 0 && now.Sub(c.lastChange) >= c.MinDwell {
			c.level = uint8(max(int(c.level)-c.PerHalving, 0))
			c.lastChange = now
		}
		return c.level
	}
	var octaves float64
	switch {
	case c.share <= 0:
		octaves = -1 // nothing measured: no traffic, sample less
	default:
		octaves = math.Log2(c.share / c.Budget)
	}
	gain := c.Gain
	if octaves > 1 {
		gain = 1 // more than twice the budget: cut it all at once
	}
	move := int(math.Round(gain * octaves * float64(c.PerHalving)))
	if move < 0 && !c.kernelAt.IsZero() && now.Sub(c.kernelAt) < c.MinDwell {
		move = 0
	}
	next := min(max(int(c.level)+move, 0), int(c.MaxLevel))
	if next != int(c.level) {
		c.level, c.lastChange = uint8(next), now
	}
	return c.level
}
