package restart

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// TestStartLoaded measures the time from a daemon's process start to
// capturing (its "capturing" log line, which comes once the eBPF programs
// are attached) on a node whose two cores are busy: two shell loops spin
// for the whole measurement. Opt-in (HOTSNIFF_MEASURE_START=1; rounds
// HOTSNIFF_ROUNDS, default 5); HOTSNIFF_BIN_BEFORE names an older hotsniff
// binary measured the same way, alternating with this one.
func TestStartLoaded(t *testing.T) {
	if os.Getenv("HOTSNIFF_MEASURE_START") != "1" {
		t.Skip("set HOTSNIFF_MEASURE_START=1 to measure the start under load (minutes)")
	}
	netnstest.RequireRoot(t)
	rounds := 5
	if v, err := strconv.Atoi(os.Getenv("HOTSNIFF_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	bins := map[string]string{"this build": buildHotsniff(t)}
	names := []string{"this build"}
	if b := os.Getenv("HOTSNIFF_BIN_BEFORE"); b != "" {
		bins["before"] = b
		names = append(names, "before")
	}
	p := netnstest.NewPair(t)
	p.StartRedis(t, 6379)
	p.StartRedis(t, 6390)
	for range 2 {
		hog := exec.Command("sh", "-c", "while :; do :; done")
		if err := hog.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = hog.Process.Kill(); _ = hog.Wait() })
	}
	took := map[string][]time.Duration{}
	for i := range rounds {
		for _, name := range names {
			d := launch(t, bins[name], p, 19464, "--capture", "tc", "--port", "redis=6379", "--redis-url", "redis://127.0.0.1:6390")
			deadline := time.Now().Add(3 * time.Minute)
			for !strings.Contains(d.log(), "msg=capturing") {
				if time.Now().After(deadline) {
					t.Fatalf("%s not capturing after 3 minutes:\n%s", name, d.log())
				}
				time.Sleep(20 * time.Millisecond)
			}
			dt := time.Since(d.start)
			took[name] = append(took[name], dt)
			t.Logf("round %d, %s: capturing %v after the process started", i+1, name, dt.Round(100*time.Millisecond))
			d.stop(t, syscall.SIGTERM, 30*time.Second)
		}
	}
	for _, name := range names {
		lo, hi := took[name][0], took[name][0]
		for _, d := range took[name] {
			lo, hi = min(lo, d), max(hi, d)
		}
		t.Logf("%s: %d starts, %v–%v from process start to capturing", name, len(took[name]), lo.Round(100*time.Millisecond), hi.Round(100*time.Millisecond))
	}
}
