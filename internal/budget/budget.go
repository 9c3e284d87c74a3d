// Package budget holds hotsniff's cost under a CPU budget (--max-cpu): it
// measures what the daemon costs (its own user and system time, plus the
// run time the kernel accounts to its eBPF programs) and picks the flow
// sampling level that keeps that cost at the budget.
//
// Levels are sixteenths of an octave of the sampling rate (samplelevel.KeepAt):
// fine enough to hold the budget to a few per cent. Most of the cost is
// proportional to the share of connections copied, so the controller works
// on the logarithm of the rate: each step moves the level by a part (Gain)
// of the octaves between the measured cost and the budget. That converges
// geometrically without overshoot; a part of the cost that sampling does
// not reduce (the programs' parse of every packet) only slows it. The
// error is smoothed over a few steps, and one within Deadband of the
// budget leaves the level alone: on a busy node the cost of one second
// varies by 10–20 % at a fixed rate, and every change of level costs
// accuracy (connections that resume are picked up mid-stream, and the
// fraction of requests really seen must be measured again). A cost far
// over the budget (at start, or a load surge) is cut at once, whole.
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
	// Smooth is the weight of the newest step in the smoothed error.
	Smooth float64
	// Deadband is the smoothed error (in octaves) under which the level
	// stays.
	Deadband float64
	// MinDwell is the least time between two lowerings without a budget,
	// and, with one, the time the level is not lowered after the programs
	// raised it: their reader fell behind at the lower level, so it is not
	// tried again at once.
	MinDwell time.Duration

	level      uint8
	kernelAt   time.Time // when the programs last raised the level
	lastChange time.Time
	lastT      time.Time
	lastCost   Cost
	share      float64
	err        float64 // smoothed error, octaves over the budget
	started    bool
}

// New returns a controller for budget (share of one core; +Inf for none).
func New(budget float64, maxLevel uint8, perHalving int) *Controller {
	return &Controller{Budget: budget, MaxLevel: maxLevel, PerHalving: perHalving, Gain: 0.8, Smooth: 0.5, Deadband: 0.08, MinDwell: 3 * time.Second}
}

// Share is the cost measured over the last step, as a share of one core.
func (c *Controller) Share() float64 { return c.share }

// Cost is what the daemon has cost so far: its own user and system time,
// and the run time of its eBPF programs.
type Cost struct {
	Process, Programs time.Duration
}

// Step takes the cumulative cost at now and the level in effect (the
// programs may have raised it themselves) and returns the level to set.
// Steps should be about a second apart: shorter ones measure scheduler
// noise.
//
// The programs look at every packet whatever the rate (only copying is
// saved), so their cost is taken as given: the process's part, which is
// nearly all proportional to what is copied, is steered to what the budget
// leaves it. Steering the sum instead would see the fixed part as a weaker
// response to each step and converge several times slower.
func (c *Controller) Step(now time.Time, cost Cost, current uint8) uint8 {
	if !c.started {
		c.started, c.lastT, c.lastCost, c.lastChange, c.level = true, now, cost, now, current
		return current
	}
	dt := now.Sub(c.lastT)
	if dt <= 0 {
		return c.level
	}
	dproc := max(cost.Process-c.lastCost.Process, 0)
	dprog := max(cost.Programs-c.lastCost.Programs, 0) // a detached program's time leaves the sum
	c.lastT, c.lastCost = now, cost
	proc, prog := float64(dproc)/float64(dt), float64(dprog)/float64(dt)
	c.share = proc + prog
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
	if c.share <= 0 || proc <= 0 {
		// Nothing measured (no traffic): sample less.
		return c.move(now, -c.PerHalving)
	}
	if total := math.Log2(c.share / c.Budget); total > 1 {
		// More than twice the budget: cut it all at once. Judged on the
		// whole cost, since the programs' part shrinks too (they copy
		// less), but not in proportion: this undercuts, never overcuts.
		c.err = 0
		return c.move(now, int(math.Round(total*float64(c.PerHalving))))
	}
	octaves := math.Log2(c.share / c.Budget)
	if prog < 0.8*c.Budget {
		octaves = math.Log2(proc / (c.Budget - prog))
	}
	c.err += c.Smooth * (octaves - c.err)
	if math.Abs(c.err) < c.Deadband {
		return c.level
	}
	move := int(math.Round(c.Gain * c.err * float64(c.PerHalving)))
	if move < 0 && !c.kernelAt.IsZero() && now.Sub(c.kernelAt) < c.MinDwell {
		return c.level
	}
	before := c.level
	c.move(now, move)
	// What the move corrects is no longer an error.
	c.err -= float64(int(c.level)-int(before)) / float64(c.PerHalving)
	return c.level
}

// move changes the level by n levels, within its bounds.
func (c *Controller) move(now time.Time, n int) uint8 {
	next := min(max(int(c.level)+n, 0), int(c.MaxLevel))
	if next != int(c.level) {
		c.level, c.lastChange = uint8(next), now
	}
	return c.level
}
