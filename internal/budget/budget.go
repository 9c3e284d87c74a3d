// Package budget holds hotsniff's cost under a CPU budget (--max-cpu): it
// measures what the daemon costs (its own user and system time, plus the
// run time the kernel accounts to its eBPF programs) and picks the flow
// sampling shift that keeps that cost at or under the budget.
//
// The controller moves in powers of two, so detection counts stay integers
// when scaled back. It must not oscillate: one halving of the rate roughly
// halves the sampled part of the cost, so it raises the shift as soon as
// the cost is over budget (by as many steps as the excess needs), but
// lowers it only one step at a time, only when the cost is under
// LowerBelow of the budget (doubling it then stays under the budget), and
// only after MinDwell at the current shift. Between the two marks nothing
// moves.
package budget

import (
	"math"
	"time"
)

// Controller picks the sampling shift for a budget. Its zero value is not
// usable: use New.
type Controller struct {
	// Budget is the target, as a share of one core (0.05: 5 %).
	Budget float64
	// MaxShift is the largest shift it asks for.
	MaxShift uint32
	// MinDwell is the least time between two lowerings of the shift, and
	// between a raise and the next lowering.
	MinDwell time.Duration
	// LowerBelow: lower the shift when the cost is under this share of the
	// budget.
	LowerBelow float64

	shift      uint32
	lastChange time.Time
	lastT      time.Time
	lastCPU    time.Duration
	share      float64
	started    bool
}

// New returns a controller for budget (share of one core).
func New(budget float64, maxShift uint32) *Controller {
	return &Controller{Budget: budget, MaxShift: maxShift, MinDwell: 5 * time.Second, LowerBelow: 0.4}
}

// Share is the cost measured over the last step, as a share of one core.
func (c *Controller) Share() float64 { return c.share }

// Shift is the shift last decided.
func (c *Controller) Shift() uint32 { return c.shift }

// Step takes the cumulative cost cpu at now and the shift in effect (the
// programs may have raised it themselves) and returns the shift to set.
// Steps should be about a second apart: shorter ones measure scheduler
// noise.
func (c *Controller) Step(now time.Time, cpu time.Duration, current uint32) uint32 {
	if !c.started {
		c.started, c.lastT, c.lastCPU, c.lastChange, c.shift = true, now, cpu, now, current
		return current
	}
	dt := now.Sub(c.lastT)
	if dt <= 0 {
		return c.shift
	}
	dcpu := max(cpu-c.lastCPU, 0) // a detached program's time leaves the sum
	c.lastT, c.lastCPU = now, cpu
	c.share = float64(dcpu) / float64(dt)
	if current > c.shift {
		// The programs shed load because a ring was filling: keep their
		// decision for a dwell at least.
		c.shift, c.lastChange = current, now
	}
	switch {
	case c.share > c.Budget && c.shift < c.MaxShift:
		// Each step halves the sampled part of the cost: take as many as
		// the excess needs at once, so one measurement fixes it.
		steps := uint32(math.Ceil(math.Log2(c.share / c.Budget)))
		c.shift = min(c.shift+max(steps, 1), c.MaxShift)
		c.lastChange = now
	case c.shift > 0 && c.share < c.LowerBelow*c.Budget && now.Sub(c.lastChange) >= c.MinDwell:
		c.shift--
		c.lastChange = now
	}
	return c.shift
}
