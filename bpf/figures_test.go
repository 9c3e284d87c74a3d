package bpf_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture/ebpfsrc"
	"github.com/hotsniff/hotsniff/internal/netnstest"
)

// TestFigures drives redis-benchmark through a veth captured in each mode
// and prints the per-packet BPF cost from the kernel's own accounting
// (kernel.bpf_stats_enabled), the load reached, and the drop counters, which
// must be zero. Run: go test -run TestFigures -v ./bpf/
// ringSize 0 takes the production default.
const ringSize = 0

func TestFigures(t *testing.T) {
	netnstest.RequireRoot(t)
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		t.Fatalf("enable bpf stats: %v", err)
	}
	defer stats.Close()
	p := netnstest.NewPair(t)
	srv := p.StartRedis(t, 6379)
	const n = 100000
	var report []string
	for _, mode := range []bpf.Mode{bpf.ModeXDP, bpf.ModeTC} {
		for _, pipe := range []int{1, 16} {
			c, err := bpf.Open(bpf.Config{Ports: []uint16{srv.Port()}, RingSize: ringSize})
			if err != nil {
				t.Fatal(err)
			}
			var a *bpf.Attachment
			if err := p.Do(func() error { a, err = c.Attach(p.NSIface, mode); return err }); err != nil {
				c.Close()
				t.Fatal(err)
			}
			src, err := ebpfsrc.New(c)
			if err != nil {
				c.Close()
				t.Fatal(err)
			}
			col := netnstest.Collect(t, src)
			start := time.Now()
			out := netnstest.RedisBenchmark(t, srv, n, pipe, 10000)
			elapsed := time.Since(start)
			col.WaitIdle(200*time.Millisecond, 5*time.Second)
			cnt, err := a.Counters()
			if err != nil {
				t.Fatal(err)
			}
			rps := strings.TrimSpace(out[strings.LastIndex(out, "\r")+1:])
			for h, prog := range a.Programs() {
				st, err := prog.Stats()
				if err != nil {
					t.Fatal(err)
				}
				ns := 0.0
				if st.RunCount > 0 {
					ns = float64(st.Runtime.Nanoseconds()) / float64(st.RunCount)
				}
				report = append(report, fmt.Sprintf("%-4s -P %-2d %-10s runs %7d  %6.1f ns/run", mode, pipe, h, st.RunCount, ns))
				if ns > 150 {
					// Reported, not failed: the figure swings 2x with the
					// load other processes put on a shared machine.
					t.Logf("%s %s: %.1f ns per packet is over the 150 ns budget", mode, h, ns)
				}
			}
			report = append(report, fmt.Sprintf("%-4s -P %-2d %s (%.2fs); records %d bytes %d ringbuf_full %d truncated %d",
				mode, pipe, rps, elapsed.Seconds(), cnt.Records, cnt.Bytes, cnt.RingbufFull, cnt.Truncated))
			if cnt.RingbufFull != 0 || cnt.Truncated != 0 || cnt.LoadErrors != 0 {
				t.Errorf("%s -P %d: drops %+v", mode, pipe, cnt)
			}
			data, gap := col.ToServer(srv)
			if got := netnstest.CountGets(data); got != n || gap != 0 {
				t.Errorf("%s -P %d: %d GETs, gap %d", mode, pipe, got, gap)
			}
			if err := col.Stop(); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Log("\n" + strings.Join(report, "\n"))
}
