package bpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/bpf/samplelevel"

	"github.com/cilium/ebpf"

	"github.com/hotsniff/hotsniff/capture"
)

// At level 27 about 31 % of the connections are copied (a rate between
// powers of two), each whole: every segment of a kept connection in both
// directions (its request and the server's FIN) is recorded, none of a
// skipped one, the skipped ones are counted as sampled out, not as losses,
// and the request bytes of kept and skipped connections are counted apart.
func TestSamplingKeepsConnectionsWhole(t *testing.T) {
	c, objs, rd := openTestConfig(t, Config{Ports: []uint16{6379}, RingSize: 1 << 20})
	const level = 27
	if err := c.SetSampleLevel(level, time.Minute); err != nil {
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
			case 1:
				// Shed: only its FIN, which is never shed (the stream
				// layer sees every connection close).
				if segs[0].Flags&capture.FlagFIN == 0 || len(segs[0].Payload) != 0 {
					t.Fatalf("%s: connection %d: one record %+v: want only the FIN", pname, i, segs[0])
				}
			case 2:
				kept++
				for _, s := range segs {
					if s.SampleLevel != level || s.Resumed {
						t.Fatalf("%s: record %+v: want sample level %d, not resumed", pname, s, level)
					}
				}
				if segs[0].Flags&capture.FlagFIN != 0 && segs[1].Flags&capture.FlagFIN != 0 {
					t.Fatalf("%s: two FINs", pname)
				}
			default:
				t.Fatalf("%s: connection %d: %d records for its 2 segments", pname, i, len(segs))
			}
		}
		after, err := c.Sampling()
		if err != nil {
			t.Fatal(err)
		}
		// Binomial(256, 0.31): 79 ± 7.4; 45..113 is beyond 4.5 σ.
		if kept < 45 || kept > 113 {
			t.Errorf("%s: %d of %d connections kept at rate %.3f", pname, kept, conns, samplelevel.Rate(level))
		}
		if got := after.SampledOut - before.SampledOut; got != uint64(conns-kept) {
			t.Errorf("%s: %d segments sampled out, want %d (the requests of the shed connections)", pname, got, conns-kept)
		}
		if got, want := after.KeptBytes-before.KeptBytes, uint64(kept*len(get)); got != want {
			t.Errorf("%s: %d request bytes counted kept, want %d", pname, got, want)
		}
		if got, want := after.OutBytes-before.OutBytes, uint64((conns-kept)*len(get)); got != want {
			t.Errorf("%s: %d request bytes counted sampled out, want %d", pname, got, want)
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
	if err := c.SetSampleLevel(48, time.Minute); err != nil {
		t.Fatal(err)
	}
	var keptAt3 []int
	for port := 30000; port < 30200; port++ {
		if len(send(port)) == 1 {
			keptAt3 = append(keptAt3, port)
		}
	}
	if err := c.SetSampleLevel(0, time.Minute); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Sampling(); st.Level != 0 {
		t.Fatalf("level %d after setting 0", st.Level)
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
	if err := c.SetSampleLevel(16, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.SetSampleLevel(0, time.Nanosecond); err != nil {
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
func TestRingFillingRaisesLevel(t *testing.T) {
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
	if st.Level == 0 || st.Level%samplelevel.LevelsPerHalving != 0 || st.Raises == 0 {
		t.Fatalf("sampling %+v after filling the ring past three quarters: want the level raised by halvings", st)
	}
}

// A reply with replies off is never copied, sampled or not: its bytes are
// counted as uncopied reply bytes for every connection, also those the
// sampling skips (the programs end a reply's run before sampling).
func TestRepliesOffCountedWhenSampledOut(t *testing.T) {
	c, objs, rd := openTestConfig(t, Config{Ports: []uint16{6379}, RingSize: 1 << 20})
	if err := c.SetSampleLevel(127, time.Minute); err != nil { // about 1/244 of the connections kept
		t.Fatal(err)
	}
	value := make([]byte, 100)
	const conns = 64
	prog := objs.HotsniffTcEgress
	for i := range conns {
		cli := netip.AddrPortFrom(cli4.Addr(), uint16(20000+i))
		p := pkt{src: srv4, dst: cli, flags: 0x18, seq: 5, payload: value}
		if _, err := prog.Run(&ebpf.RunOptions{Data: p.bytes()}); err != nil {
			t.Fatal(err)
		}
	}
	if segs := drain(t, rd); len(segs) != 0 {
		t.Errorf("replies copied with replies off: %d records", len(segs))
	}
	var st Counters
	all, err := readCounters(objs.Stats)
	if err != nil {
		t.Fatal(err)
	}
	perCPU := hookCounters(all, HookTCEgress)
	for i := range perCPU {
		st.add(&perCPU[i])
	}
	if st.ReplyBytes != conns*uint64(len(value)) {
		t.Errorf("reply bytes %d, want %d (every connection's reply, sampled out or not)", st.ReplyBytes, conns*len(value))
	}
}

// TestSamplingQuietReads: Sampling reads the per-CPU sampled-out counters
// (a system call) only while sampling may have run since the last read:
// after two quiet reads at level 0 it reuses the sums, and a raise by the
// programs or a level set by user space makes it read them again. A count
// planted in the map while nothing samples (which the programs never do)
// shows which reads looked.
func TestSamplingQuietReads(t *testing.T) {
	c, _, _ := openTestConfig(t, Config{Ports: []uint16{6379}, RingSize: 1 << 16})
	plant := func(n uint64) {
		t.Helper()
		cpus, err := ebpf.PossibleCPU()
		if err != nil {
			t.Fatal(err)
		}
		per := make([]hotsniffSampleCounts, cpus)
		per[0].OutSegs = n
		if err := c.sampled.Update(uint32(0), per, ebpf.UpdateExist); err != nil {
			t.Fatal(err)
		}
	}
	read := func() Sampling {
		t.Helper()
		s, err := c.Sampling()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for range 3 {
		read()
	}
	plant(5)
	if s := read(); s.SampledOut != 0 {
		t.Fatalf("quiet: sampled out %d, want the sums kept (0)", s.SampledOut)
	}
	// The programs raise the level (a ring filling) and count.
	var st hotsniffSampling
	if err := c.sampling.Lookup(uint32(0), &st); err != nil {
		t.Fatal(err)
	}
	st.Raises++
	if err := c.sampling.Update(uint32(0), &st, ebpf.UpdateExist); err != nil {
		t.Fatal(err)
	}
	if s := read(); s.SampledOut != 5 || s.Raises != st.Raises {
		t.Fatalf("after a raise: sampled out %d, raises %d; want 5, %d", s.SampledOut, s.Raises, st.Raises)
	}
	read()
	read()
	plant(7)
	if s := read(); s.SampledOut != 5 {
		t.Fatalf("quiet again: sampled out %d, want 5 kept", s.SampledOut)
	}
	// User space sets a level and takes it back before the next read.
	if err := c.SetSampleLevel(27, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.SetSampleLevel(0, time.Second); err != nil {
		t.Fatal(err)
	}
	if s := read(); s.SampledOut != 7 {
		t.Fatalf("after a level set: sampled out %d, want 7", s.SampledOut)
	}
	// Level above 0: every read looks.
	if err := c.SetSampleLevel(27, time.Second); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(4) {
		plant(10 + i)
		if s := read(); s.SampledOut != 10+i || s.Level != 27 {
			t.Fatalf("sampling: read %d: sampled out %d, level %d; want %d, 27", i, s.SampledOut, s.Level, 10+i)
		}
	}
}
