package ebpfsrc

import (
	"testing"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture"
)

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
