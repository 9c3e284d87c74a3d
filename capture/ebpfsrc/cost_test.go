package ebpfsrc

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/internal/netnstest"
)

// TestProgramCost reports the in-kernel cost per packet measured by
// BPF_PROG_TEST_RUN: a matched GET (one ring record) and a packet on
// another port (parsed and passed).
func TestProgramCost(t *testing.T) {
	netnstest.RequireRoot(t)
	c, err := bpf.Open(bpf.Config{Ports: []uint16{6379}, RingSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.LoadDetached()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Detach()
	src, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	pkt := getPacket()
	other := append([]byte(nil), pkt...)
	other[14+20+3] = 80 // dport 6379 -> 6224+...: not a cache port
	other[14+20+2] = 0
	var seg capture.Segment
	for _, h := range []bpf.Hook{bpf.HookXDP, bpf.HookTCIngress} {
		for name, p := range map[string][]byte{"match": pkt, "other": other} {
			const n = 100000
			ret, d, err := a.Program(h).Benchmark(p, n, nil)
			_ = ret
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
	_ = ebpf.RunOptions{}
}
