package ebpfsrc

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// TestRingContention reports what writing from every CPU at once costs:
// matched GETs run through the XDP program with BPF_PROG_TEST_RUN on each
// CPU in turn, then on all CPUs together, each runner pinned to its CPU.
// The together figure (per packet, per CPU) minus the alone figure is what
// the CPUs cost each other; aggregate is the records per second the rings
// took in. Every record must then be read back. With one ring shared by all
// CPUs (its reserve takes one spinlock) this was 862–937 ns against 293–309
// on the development VM, and the aggregate 1.9–2.0 M records/s; with a ring
// per CPU, 305–424 against 270–377, and 4.2–5.8 M.
func TestRingContention(t *testing.T) {
	src, a := loadDetached(t, 128<<20)
	pkt := getPacket()
	netnstest.RequireCPUs(t, 2)
	cpus := runtime.NumCPU()
	const n = 100000
	run := func(cpu int) (time.Duration, error) { return runOn(a, cpu, pkt, n) }
	var seg capture.Segment
	drain := func(records int) {
		for range records {
			if err := src.Next(&seg); err != nil {
				t.Fatal(err)
			}
		}
	}
	var alone time.Duration
	for cpu := range cpus {
		d, err := run(cpu)
		if err != nil {
			t.Fatal(err)
		}
		alone += d
		drain(n)
	}
	alone /= time.Duration(cpus)
	together := make([]time.Duration, cpus)
	errs := make([]error, cpus)
	var wg sync.WaitGroup
	start := time.Now()
	for cpu := range cpus {
		wg.Go(func() { together[cpu], errs[cpu] = run(cpu) })
	}
	wg.Wait()
	wall := time.Since(start)
	var sum time.Duration
	for cpu := range cpus {
		if errs[cpu] != nil {
			t.Fatal(errs[cpu])
		}
		sum += together[cpu]
	}
	drain(n * cpus)
	t.Logf("matched GET on 1 CPU: %v per packet; on %d CPUs at once: %v per packet per CPU; aggregate %.1f M records/s",
		alone, cpus, sum/time.Duration(cpus), float64(n*cpus)/wall.Seconds()/1e6)
}

// TestProgramCost reports the in-kernel cost per packet measured by
// BPF_PROG_TEST_RUN: a matched GET (one ring record) and a packet on
// another port (parsed and passed).
func TestProgramCost(t *testing.T) {
	src, a := loadDetached(t, 64<<20)
	pkt := getPacket()
	other := append([]byte(nil), pkt...)
	other[14+20+3] = 80 // dport 6379 -> 6224+...: not a cache port
	other[14+20+2] = 0
	var seg capture.Segment
	for _, h := range []bpf.Hook{bpf.HookXDP, bpf.HookTCIngress} {
		for name, p := range map[string][]byte{"match": pkt, "other": other} {
			const n = 100000
			_, d, err := a.Program(h).Benchmark(p, n, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%-10s %-5s %v per packet", h, name, d)
			if name == "match" {
				for range n {
					if err := src.Next(&seg); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
}
