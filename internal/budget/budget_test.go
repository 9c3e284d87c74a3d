package budget

import (
	"math"
	"testing"
	"time"
)

// plant models the daemon: a fixed cost plus a part proportional to the
// share of connections copied, with measurement noise.
type plant struct {
	fixed, full float64
}

func (p plant) share(shift uint32, noise float64) float64 {
	return (p.fixed + p.full/math.Pow(2, float64(shift))) * (1 + noise)
}

func run(t *testing.T, c *Controller, p plant, steps int, noise func(i int) float64) []uint32 {
	t.Helper()
	now := time.Unix(0, 0)
	var cpu time.Duration
	shift := c.Step(now, cpu, 0)
	var out []uint32
	for i := 0; i < steps; i++ {
		now = now.Add(time.Second)
		cpu += time.Duration(p.share(shift, noise(i)) * float64(time.Second))
		shift = c.Step(now, cpu, shift)
		out = append(out, shift)
	}
	return out
}

func TestControllerHoldsBudget(t *testing.T) {
	c := New(0.05, 12)
	// 0.30 of a core unsampled, 0.005 fixed (the programs' parse of every packet).
	p := plant{fixed: 0.005, full: 0.30}
	shifts := run(t, c, p, 120, func(i int) float64 { return 0.08 * math.Sin(float64(i)) })
	final := shifts[len(shifts)-1]
	if got := p.share(final, 0); got > 0.05 || got < 0.05*0.4/2 {
		t.Fatalf("share %.4f at shift %d, want within the budget 0.05", got, final)
	}
	// After the first few steps it must settle: no oscillation.
	changes := 0
	for i := 10; i < len(shifts); i++ {
		if shifts[i] != shifts[i-1] {
			changes++
		}
	}
	if changes != 0 {
		t.Fatalf("shift changed %d times after settling: %v", changes, shifts)
	}
}

func TestControllerRaisesAtOnceLowersSlowly(t *testing.T) {
	c := New(0.05, 12)
	now := time.Unix(0, 0)
	c.Step(now, 0, 0)
	// 0.4 of a core: three halvings needed at once.
	if s := c.Step(now.Add(time.Second), 400*time.Millisecond, 0); s != 3 {
		t.Fatalf("shift %d after a step at 8× the budget, want 3", s)
	}
	// Load gone: lowered one step per MinDwell, not faster.
	cpu := 400 * time.Millisecond
	var got []uint32
	for i := 2; i <= 21; i++ {
		cpu += time.Millisecond
		got = append(got, c.Step(now.Add(time.Duration(i)*time.Second), cpu, c.Shift()))
	}
	want := []uint32{3, 3, 3, 3, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("shifts %v, want %v", got, want)
		}
	}
}

func TestControllerAdoptsKernelRaise(t *testing.T) {
	c := New(0.05, 12)
	now := time.Unix(0, 0)
	c.Step(now, 0, 0)
	// The programs raised the shift to 2 (a ring was filling); cost is low.
	if s := c.Step(now.Add(time.Second), 10*time.Millisecond, 2); s != 2 {
		t.Fatalf("shift %d, want the kernel's 2 kept", s)
	}
	if s := c.Step(now.Add(3*time.Second), 20*time.Millisecond, 2); s != 2 {
		t.Fatalf("shift %d before the dwell, want 2", s)
	}
	if s := c.Step(now.Add(7*time.Second), 30*time.Millisecond, 2); s != 1 {
		t.Fatalf("shift %d after the dwell, want 1", s)
	}
}

func TestProcessCPU(t *testing.T) {
	a, err := ProcessCPU()
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := 0; i < 50_000_000; i++ {
		x += i ^ (x >> 3)
	}
	b, _ := ProcessCPU()
	if b <= a || x == 42 {
		t.Fatalf("CPU time did not grow: %v then %v", a, b)
	}
}
