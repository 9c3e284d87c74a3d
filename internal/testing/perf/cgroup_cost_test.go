package perf

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture/ebpfsrc"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// TestCgroupCost compares the per-packet cost of the cgroup_skb programs
// with the TC programs under the same redis-benchmark traffic, from the
// kernel's accounting (run_time_ns / run_cnt), like part 1 of TestFigures:
//
//	HOTSNIFF_FIGURES=1 go test -count=1 -timeout 30m -run TestCgroupCost -v ./internal/testing/perf/
//
// The test moves itself into a cgroup of its own, so redis-server and
// redis-benchmark (its children) run there, and attaches the cgroup
// programs to that cgroup rather than the root: the figures are then this
// traffic's alone, not that of everything else running on the machine. A
// request passes two cgroup hooks (the client's egress and the server's
// ingress) where TC on the server's veth sees it once, so both the cost per
// run and per request are shown.
func TestCgroupCost(t *testing.T) {
	rounds := measurement(t, "HOTSNIFF_FIGURES", 3)
	cg := ownCgroup(t)
	p := netnstest.NewPair(t)
	srv := p.StartRedis(t, freePort(t, p))
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		t.Fatalf("enable bpf stats: %v", err)
	}
	defer stats.Close()
	t.Logf("machine: %d CPUs, load average %s at start", numCPU(), loadavg())
	var rows []string
	for _, w := range workloads[:2] {
		for _, mode := range []bpf.Mode{bpf.ModeTC, bpf.ModeCgroup} {
			ns := map[bpf.Hook][]float64{}
			runs := map[bpf.Hook]uint64{}
			var perReq []float64
			for range rounds {
				c, err := bpf.Open(bpf.Config{Ports: []uint16{srv.Port()}})
				if err != nil {
					t.Fatal(err)
				}
				var a *bpf.Attachment
				if mode == bpf.ModeCgroup {
					a, err = c.AttachCgroup(cg)
				} else {
					err = p.Do(func() error { a, err = c.Attach(p.NSIface, mode); return err })
				}
				if err != nil {
					c.Close()
					t.Fatal(err)
				}
				src, err := ebpfsrc.New(c)
				if err != nil {
					c.Close()
					t.Fatal(err)
				}
				col := drain(src)
				runWorkload(t, srv, w)
				col.waitIdle(200*time.Millisecond, 5*time.Second)
				cnt, err := a.Counters()
				if err != nil {
					t.Fatal(err)
				}
				var total time.Duration
				for h, prog := range a.Programs() {
					st, err := prog.Stats()
					if err != nil {
						t.Fatal(err)
					}
					if st.RunCount > 0 {
						ns[h] = append(ns[h], float64(st.Runtime.Nanoseconds())/float64(st.RunCount))
					}
					runs[h] += st.RunCount
					total += st.Runtime
				}
				perReq = append(perReq, float64(total.Nanoseconds())/float64(w.n))
				if segs := int(col.n.Load()); cnt.RingbufFull != 0 || cnt.Truncated != 0 || cnt.LoadErrors != 0 || int(cnt.Records) != segs {
					t.Errorf("%s %s: drops %+v, reader got %d records", mode, w.name, cnt, segs)
				}
				if err := col.stop(); err != nil {
					t.Fatal(err)
				}
			}
			for _, h := range []bpf.Hook{bpf.HookTCIngress, bpf.HookTCEgress, bpf.HookCgroupIngress, bpf.HookCgroupEgress} {
				if v, ok := ns[h]; ok {
					rows = append(rows, fmt.Sprintf("| %-9s | %-15s | %-14s | %9d | %-22s |", w.name, mode, h, runs[h]/uint64(rounds), span(v, "%.0f")))
				}
			}
			rows = append(rows, fmt.Sprintf("| %-9s | %-15s | %-14s | %9s | %-22s |", w.name, mode, "all, per GET", "", span(perReq, "%.0f")))
		}
	}
	t.Logf("load average %s at end", loadavg())
	t.Log("\nBPF ns/run (median [min–max] over rounds), runs per round\n" +
		"| workload | mode | hook | runs | ns/run |\n|---|---|---|---|---|\n" + strings.Join(rows, "\n"))
}

// ownCgroup moves the test process into a new cgroup v2 child of the
// hierarchy's root and returns its path; the process goes back and the
// cgroup is removed in t.Cleanup.
func ownCgroup(t *testing.T) string {
	t.Helper()
	root, err := bpf.CgroupRoot("")
	if err != nil {
		netnstest.Skip(t, "cgroup v2: %v", err)
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	orig := ""
	for _, line := range strings.Split(string(self), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			orig = filepath.Join(root, rest)
		}
	}
	cg := filepath.Join(root, fmt.Sprintf("hotsniff-perf-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), pid, 0); err != nil {
		os.Remove(cg)
		t.Fatalf("join cgroup: %v", err)
	}
	t.Cleanup(func() {
		if orig != "" {
			_ = os.WriteFile(filepath.Join(orig, "cgroup.procs"), pid, 0)
		}
		// Children (servers) exit in other cleanups first; retry a while.
		for range 50 {
			if os.Remove(cg) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return cg
}
