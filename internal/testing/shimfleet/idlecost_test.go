package shimfleet

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestIdleCPUFigures prints, per shim and per published hot set (1,024
// keys; 40,000 forged ones, no expiry), the CPU the shim's application
// process uses while idle: installed, snapshot loaded, 2,048 keys read twice
// (admitted and cached), then nothing but the shim's own timers. Its
// housekeeping must not grow with the hot set. It runs only with
// HOTSNIFF_FIGURES=1; HOTSNIFF_IDLE_SECONDS (default 20) sets the window:
//
//	HOTSNIFF_FIGURES=1 go test -count=1 -run TestIdleCPUFigures -v ./internal/testing/shimfleet/
//
// The figure is the process's user+system time (/proc/PID/stat) over the
// window; it is logged, the test does not fail on it.
func TestIdleCPUFigures(t *testing.T) {
	if os.Getenv("HOTSNIFF_FIGURES") != "1" {
		t.Skip("set HOTSNIFF_FIGURES=1 to print the idle CPU figures (minutes)")
	}
	window := 20 * time.Second
	if v, err := strconv.Atoi(os.Getenv("HOTSNIFF_IDLE_SECONDS")); err == nil && v > 0 {
		window = time.Duration(v) * time.Second
	}
	var table []string
	for _, n := range []int{1024, 40000} {
		for _, s := range shims(t, false) {
			t.Run(fmt.Sprintf("%s/%d", s.name, n), func(t *testing.T) {
				e := newCostEnv(t, n)
				a := e.install(t, s, 2048)
				time.Sleep(2 * time.Second) // admission reads and their refreshes settle
				pid := a.cmd.Process.Pid
				c0, t0 := cpuTicks(t, pid), time.Now()
				time.Sleep(window)
				c1, t1 := cpuTicks(t, pid), time.Now()
				// USER_HZ is 100 on every Linux this runs on.
				pct := float64(c1-c0) / 100 / t1.Sub(t0).Seconds() * 100
				row := fmt.Sprintf("| %s | %d | %.2f |", s.name, n, pct)
				t.Log(row)
				table = append(table, row)
			})
		}
	}
	t.Logf("idle CPU, %% of one core over %v:\n| shim | hot keys | idle CPU %% |\n|---|---|---|\n%s",
		window, strings.Join(table, "\n"))
}

// cpuTicks is pid's user+system CPU time in clock ticks.
func cpuTicks(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	k, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return u + k
}
