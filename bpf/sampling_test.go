package bpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/hotsniff/hotsniff/capture"
)

// At shift 2 about one connection in four is copied, each whole: every
// segment of a kept connection in both directions (its request and the
// server's FIN) is recorded, none of a skipped one, and the skipped ones
// are counted as sampled out, not as losses.
func TestSamplingKeepsConnectionsWhole(t *testing.T) {
	c, objs, rd := openTestConfig(t, Config{Ports: []uint16{6379}, RingSize: 1 << 20})
	if err := c.SetSampleShift(2, time.Minute); err != nil {
		t.Fatal(err)
	}
	get := []byte("*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n")
	const conns = 256
	for pname, prog := range map[string]*ebpf.Program{"xdp": objs.HotsniffXdp, "tc": objs.HotsniffTcIngress} {
		before, err := c.Sampling()
		if err != nil {
			t.Fatal(err)
		}
		kept := 0
		for i := range conns {
			cli := netip.AddrPortFrom(cli4.Addr(), uint16(20000+i))
			for _, p := range []pkt{
				{src: cli, dst: srv4, flags: 0x18, seq: 1, payload: get},
				{src: srv4, dst: cli, flags: 0x19, seq: 9}, // the server's FIN
			} {
				if _, err := prog.Run(&ebpf.RunOptions{Data: p.bytes()}); err != nil {
					t.Fatal(err)
				}
			}
			segs := drain(t, rd)
			switch len(segs) {
			case 0:
			case 2:
				kept++
				for _, s := range segs {
					if s.SampleShift != 2 || s.Resumed {
						t.Fatalf("%s: record %+v: want sample shift 2, not resumed", pname, s)
					}
				}
				if segs[0].Flags&capture.FlagFIN != 0 && segs[1].Flags&capture.FlagFIN != 0 {
					t.Fatalf("%s: two FINs", pname)
				}
			default:
				t.Fatalf("%s: connection %d: %d of its 2 segments recorded: sampling split it", pname, i, len(segs))
			}
		}
		after, err := c.Sampling()
		if err != nil {
			t.Fatal(err)
		}
		// Binomial(256, 1/4): 64 ± 7; 32..96 is beyond 4 σ.
		if kept < 32 || kept > 96 {
			t.Errorf("%s: %d of %d connections kept at 1/4", pname, kept, conns)
		}
		if got := after.SampledOut - before.SampledOut; got != uint64(2*(conns-kept)) {
			t.Errorf("%s: %d segments sampled out, want %d", pname, got, 2*(conns-kept))
		}
	}
}

// Lowering the shift resumes connections that were skipped: their records
// say so (Segment.Resumed) for the resume period, so the stream layer
// restarts them without counting a gap; connections kept all along do not.
func TestSamplingResumeMarks(t *testing.T) {
	c, objs, rd := openTestConfig(t, Config{Ports: []uint16{6379}, RingSize: 1 << 20})
	get := []byte("*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n")
	send := func(port int) []capture.Segment {
		p := pkt{src: netip.AddrPortFrom(cli4.Addr(), uint16(port)), dst: srv4, flags: 0x18, seq: 1, payload: get}
		if _, err := objs.HotsniffTcIngress.Run(&ebpf.RunOptions{Data: p.bytes()}); err != nil {
			t.Fatal(err)
		}
		return drain(t, rd)
	}
	if err := c.SetSampleShift(3, time.Minute); err != nil {
		t.Fatal(err)
	}
	var keptAt3 []int
	for port := 30000; port < 30200; port++ {
		if len(send(port)) == 1 {
			keptAt3 = append(keptAt3, port)
		}
	}
	if err := c.SetSampleShift(0, time.Minute); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Sampling(); st.Shift != 0 {
		t.Fatalf("shift %d after setting 0", st.Shift)
	}
	was := map[int]bool{}
	for _, p := range keptAt3 {
		was[p] = true
	}
	resumed := 0
	for port := 30000; port < 30200; port++ {
		segs := send(port)
		if len(segs) != 1 {
			t.Fatalf("port %d: %d records at shift 0", port, len(segs))
		}
		if segs[0].Resumed == was[port] {
			t.Fatalf("port %d: resumed=%v, kept at 1/8 before=%v", port, segs[0].Resumed, was[port])
		}
		if segs[0].Resumed {
			resumed++
		}
	}
	if resumed == 0 || len(keptAt3) == 0 {
		t.Fatalf("%d kept at 1/8, %d resumed: the test tests nothing", len(keptAt3), resumed)
	}
	// After the resume period nothing is marked.
	if err := c.SetSampleShift(1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.SetSampleShift(0, time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	for port := 30000; port < 30200; port++ {
		if segs := send(port); segs[0].Resumed {
			t.Fatalf("port %d marked resumed after the resume period", port)
		}
	}
}

// A ring more than three quarters full makes the programs halve the rate themselves.
func TestRingFillingRaisesShift(t *testing.T) {
	c, objs, _ := openTestConfig(t, Config{Ports: []uint16{6379}, RingSize: 64 << 10})
	get := pkt{src: cli4, dst: srv4, flags: 0x18, seq: 1, payload: []byte("*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n")}
	// Nothing reads the ring: ~700 records of 96 bytes fill three quarters of 64 KiB and more.
	if _, err := objs.HotsniffTcIngress.Run(&ebpf.RunOptions{Data: get.bytes(), Repeat: 2000}); err != nil {
		t.Fatal(err)
	}
	st, err := c.Sampling()
	if err != nil {
		t.Fatal(err)
	}
	if st.Shift == 0 || st.Raises == 0 {
		t.Fatalf("sampling %+v after filling the ring past three quarters: want the shift raised", st)
	}
}
