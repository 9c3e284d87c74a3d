package ebpfsrc

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// getPacket is an Ethernet/IPv4/TCP frame carrying a redis GET to 6379.
func getPacket() []byte {
	payload := netnstest.RESP("GET", "key:000000000123")
	b := []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00}
	ip := make([]byte, 20)
	ip[0], ip[8], ip[9] = 0x45, 64, 6
	binary.BigEndian.PutUint16(ip[2:], uint16(40+len(payload)))
	copy(ip[12:], []byte{10, 199, 0, 2, 10, 199, 0, 1})
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 6379)
	tcp[12], tcp[13] = 5<<4, 0x18
	return append(append(append(b, ip...), tcp...), payload...)
}

// runOn runs the XDP program n times on pkt with BPF_PROG_TEST_RUN on the
// given CPU (the program writes to that CPU's ring) and returns the time per
// run.
func runOn(a *bpf.Attachment, cpu int, pkt []byte, n int) (time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return 0, err
	}
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return 0, err
	}
	// Unpin before the thread goes back to the pool.
	defer unix.SchedSetaffinity(0, &all)
	_, d, err := a.Program(bpf.HookXDP).Benchmark(pkt, n, nil)
	return d, err
}

// loadDetached loads the programs on port 6379 without attaching them (for
// BPF_PROG_TEST_RUN) with a ring of ringSize bytes, and a Source over it.
// Cleanup closes both.
func loadDetached(tb testing.TB, ringSize int) (*Source, *bpf.Attachment) {
	tb.Helper()
	netnstest.RequireRoot(tb)
	c, err := bpf.Open(bpf.Config{Ports: []uint16{6379}, RingSize: ringSize})
	if err != nil {
		tb.Fatal(err)
	}
	a, err := c.LoadDetached()
	if err != nil {
		c.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { a.Detach() })
	src, err := New(c)
	if err != nil {
		c.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { src.Close() })
	return src, a
}

// BenchmarkNext measures reading one record from the ring into a Segment:
// the Go side cost per captured packet. Records are produced outside the
// timer with BPF_PROG_TEST_RUN of the XDP program.
func BenchmarkNext(b *testing.B) {
	src, a := loadDetached(b, 16<<20)
	pkt := getPacket()
	var seg capture.Segment
	const batch = 10000
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		b.StopTimer()
		if _, err := a.Program(bpf.HookXDP).Run(&ebpf.RunOptions{Data: pkt, Repeat: uint32(n)}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for range n {
			if err := src.Next(&seg); err != nil {
				b.Fatal(err)
			}
		}
		done += n
	}
}
