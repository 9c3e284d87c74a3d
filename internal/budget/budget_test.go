package budget

import (
	"math"
	"runtime"
	"testing"
	"time"
)

// plant models the daemon: the programs' fixed cost (every packet is
// looked at), a small fixed cost of the process, and a part proportional
// to the share of connections copied (2^(-level/16)), with measurement
// noise.
type plant struct {
	fixed, full float64 // the programs' cost; the process's at rate 1
}

// procFixed is the process's cost that copying less does not save.
const procFixed = 0.003

func (p plant) cost(level uint8, noise float64) (proc, prog float64) {
	return (procFixed + p.full*math.Exp2(-float64(level)/16)) * (1 + noise), p.fixed * (1 + noise/2)
}

func (p plant) share(level uint8, noise float64) float64 {
	a, b := p.cost(level, noise)
	return a + b
}

func run(c *Controller, p plant, steps int, noise func(i int) float64) ([]uint8, []float64) {
	now := time.Unix(0, 0)
	var cost Cost
	level := c.Step(now, cost, 0)
	var levels []uint8
	var shares []float64
	for i := 0; i < steps; i++ {
		now = now.Add(time.Second)
		n := noise(i)
		proc, prog := p.cost(level, n)
		cost.Process += time.Duration(proc * float64(time.Second))
		cost.Programs += time.Duration(prog * float64(time.Second))
		shares = append(shares, proc+prog)
		level = c.Step(now, cost, level)
		levels = append(levels, level)
	}
	return levels, shares
}

func ms(n int) Cost { return Cost{Process: time.Duration(n) * time.Millisecond} }

func mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// The controller holds the cost within 10 % of the budget, on average over
// a stretch after settling, for plants with and without the programs'
// fixed part and with noisy measurements; it settles within 6 steps and
// does not hunt.
func TestControllerHoldsBudget(t *testing.T) {
	for _, tc := range []struct {
		name  string
		p     plant
		noise float64
	}{
		{"proportional", plant{0, 0.30}, 0},
		{"fixed part", plant{0.02, 0.30}, 0},
		{"noisy", plant{0.015, 0.40}, 0.10},
		{"heavy", plant{0.01, 1.6}, 0.15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(0.05, 127, 16)
			levels, shares := run(c, tc.p, 60, func(i int) float64 { return tc.noise * math.Sin(1.7*float64(i)) })
			if m := mean(shares[6:]); math.Abs(m-0.05) > 0.005 {
				t.Fatalf("mean share %.4f after settling, want 0.05 ± 10 %%; levels %v", m, levels)
			}
			// Settled, it does not hunt: without noise the level stays;
			// with it, it stays within two levels (9 %) of where it
			// settled.
			lo, hi := levels[20], levels[20]
			changes := 0
			for i := 21; i < len(levels); i++ {
				lo, hi = min(lo, levels[i]), max(hi, levels[i])
				if levels[i] != levels[i-1] {
					changes++
				}
			}
			if tc.noise == 0 && changes != 0 || hi-lo > 2 {
				t.Fatalf("level changed %d times, over %d levels, after settling: %v", changes, hi-lo, levels)
			}
		})
	}
}

// Far over the budget (six times it) the first step cuts all of it: the
// level drops the rate by about 6×.
func TestControllerCutsSurgeAtOnce(t *testing.T) {
	c := New(0.05, 127, 16)
	now := time.Unix(0, 0)
	c.Step(now, Cost{}, 0)
	l := c.Step(now.Add(time.Second), ms(300), 0)
	if r := math.Exp2(-float64(l) / 16); math.Abs(r-1.0/6) > 0.01 {
		t.Fatalf("level %d (rate %.3f) after a step at 6× the budget, want rate 1/6", l, r)
	}
}

// A budget the fixed part alone exceeds cannot be held: the controller goes
// to its deepest level and stays there.
func TestControllerDeepestLevel(t *testing.T) {
	c := New(0.05, 127, 16)
	levels, _ := run(c, plant{0.08, 0.5}, 40, func(int) float64 { return 0 })
	if l := levels[len(levels)-1]; l != 127 {
		t.Fatalf("level %d, want 127", l)
	}
}

// The programs raise the level when a ring fills: the controller starts
// from theirs and does not lower it for a dwell, then converges again.
func TestControllerAdoptsKernelRaise(t *testing.T) {
	c := New(0.05, 127, 16)
	now := time.Unix(0, 0)
	c.Step(now, Cost{}, 0)
	// On budget at level 0, then the programs shed two halvings.
	cpu := ms(50)
	l := c.Step(now.Add(time.Second), cpu, 32)
	if l != 32 {
		t.Fatalf("level %d, want the programs' 32", l)
	}
	// At a quarter of the rate the cost is a quarter of the budget.
	for i := 2; i <= 3; i++ {
		cpu.Process += 12500 * time.Microsecond
		if l = c.Step(now.Add(time.Duration(i)*time.Second), cpu, l); l != 32 {
			t.Fatalf("level %d %d s after the programs raised it, want it held", l, i-1)
		}
	}
	cpu.Process += 12500 * time.Microsecond
	if l = c.Step(now.Add(4*time.Second), cpu, l); l >= 32 {
		t.Fatalf("level %d after the dwell, want it lowered", l)
	}
}

// Without a budget the controller only brings a level the programs raised
// back down, one halving per dwell.
func TestControllerNoBudget(t *testing.T) {
	c := New(math.Inf(1), 127, 16)
	now := time.Unix(0, 0)
	c.Step(now, Cost{}, 0)
	var cpu Cost
	l := c.Step(now.Add(time.Second), cpu, 48)
	if l != 48 {
		t.Fatalf("level %d after the programs raised to 48", l)
	}
	for i := 2; i <= 20; i++ {
		l = c.Step(now.Add(time.Duration(i)*time.Second), cpu, l)
	}
	// Raised at 1 s; lowered at 4, 7, 10 s.
	if l != 0 {
		t.Fatalf("level %d after 20 s, want 0", l)
	}
}

// ThreadCPU counts the calling thread's work and not another thread's: a
// goroutine burning CPU on its own thread does not show in it, this
// thread's own work does.
func TestThreadCPUIsThisThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	measure := func(work func()) (thread, proc time.Duration) {
		t0, err := ThreadCPU()
		if err != nil {
			t.Fatal(err)
		}
		p0, _ := ProcessCPU()
		work()
		t1, _ := ThreadCPU()
		p1, _ := ProcessCPU()
		return t1 - t0, p1 - p0
	}
	th, pr := measure(func() {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			spin(1e8)
			close(done)
		}()
		<-done
	})
	if pr < 20*time.Millisecond || th > pr/5 {
		t.Errorf("another thread's work: this thread %v, process %v; want the thread's share under 20 %%", th, pr)
	}
	th, pr = measure(func() { spin(1e8) })
	if pr < 20*time.Millisecond || th < pr*7/10 {
		t.Errorf("this thread's work: thread %v, process %v; want most of it on the thread", th, pr)
	}
}

var sink uint64

func spin(n int) {
	x := uint64(1)
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	sink += x
}
