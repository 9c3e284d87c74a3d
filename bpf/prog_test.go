package bpf

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// pkt describes a crafted test packet.
type pkt struct {
	src, dst   netip.AddrPort
	vlans      int
	flags      uint8
	seq, ack   uint32
	payload    []byte
	ipLenDelta int // added to the IP length field (lying headers)
}

func (p pkt) bytes() []byte {
	var b []byte
	b = append(b, 0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2) // dst, src MAC
	for range p.vlans {
		b = binary.BigEndian.AppendUint16(b, 0x8100)
		b = binary.BigEndian.AppendUint16(b, 42)
	}
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:], p.src.Port())
	binary.BigEndian.PutUint16(tcp[2:], p.dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], p.seq)
	binary.BigEndian.PutUint32(tcp[8:], p.ack)
	tcp[12] = 5 << 4
	tcp[13] = p.flags
	tcp = append(tcp, p.payload...)
	if p.src.Addr().Is4() {
		b = binary.BigEndian.AppendUint16(b, 0x0800)
		ip := make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(tcp)+p.ipLenDelta))
		ip[8] = 64
		ip[9] = 6
		s, d := p.src.Addr().As4(), p.dst.Addr().As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		b = append(b, ip...)
	} else {
		b = binary.BigEndian.AppendUint16(b, 0x86DD)
		ip := make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(tcp)+p.ipLenDelta))
		ip[6] = 6
		ip[7] = 64
		s, d := p.src.Addr().As16(), p.dst.Addr().As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		b = append(b, ip...)
	}
	return append(b, tcp...)
}

var (
	cli4 = netip.MustParseAddrPort("10.199.0.2:40000")
	srv4 = netip.MustParseAddrPort("10.199.0.1:6379")
	cli6 = netip.MustParseAddrPort("[fd00:199::2]:40000")
	srv6 = netip.MustParseAddrPort("[fd00:199::1]:6379")
	oth4 = netip.MustParseAddrPort("10.199.0.1:8080")
)

// openTest opens a Capture for port 6379 and a reader on its ring.
func openTest(t *testing.T, maxCopy uint32) (*Capture, *hotsniffObjects, testRings) {
	t.Helper()
	return openTestConfig(t, Config{Ports: []uint16{6379}, RingSize: 1 << 20, MaxCopy: maxCopy, Replies: true})
}

// testRings reads every CPU's ring; [0] is CPU 0's.
type testRings []*ringbuf.Reader

func openTestConfig(t testing.TB, cfg Config) (*Capture, *hotsniffObjects, testRings) {
	t.Helper()
	netnstest.RequireRoot(t)
	c, err := Open(cfg)
	if err != nil {
		t.Fatalf("open as root: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	var objs hotsniffObjects
	if err := c.load(&objs, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	// The programs write to the ring of the CPU they run on. Tests that
	// block on one ring (TestWakeup) run the programs from this goroutine,
	// so keep it on CPU 0; the thread stays locked and exits with the test
	// instead of returning to the pool pinned. Subtests run elsewhere:
	// drain reads every ring.
	runtime.LockOSThread()
	var cpu0 unix.CPUSet
	cpu0.Set(0)
	if err := unix.SchedSetaffinity(0, &cpu0); err != nil {
		t.Fatalf("pin to CPU 0: %v", err)
	}
	var rd testRings
	for _, m := range c.Rings() {
		r, err := ringbuf.NewReader(m)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		rd = append(rd, r)
	}
	return c, &objs, rd
}

// drain reads every record in the rings, in timestamp order.
func drain(t *testing.T, rd testRings) []capture.Segment {
	t.Helper()
	var out []capture.Segment
	for _, r := range rd {
		r.SetDeadline(time.Now())
		for {
			rec, err := r.Read()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			var r Record
			if _, err := ParseRecord(rec.RawSample, 0, &r); err != nil {
				t.Fatal(err)
			}
			out = append(out, capture.Segment{TS: r.TS, Src: r.Src, Dst: r.Dst, Seq: r.Seq, Ack: r.Ack, Flags: r.Flags,
				Payload: bytes.Clone(r.Payload), Missing: r.Missing, Resumed: r.Resumed, SampleLevel: r.SampleLevel})
		}
	}
	slices.SortStableFunc(out, func(a, b capture.Segment) int { return cmp.Compare(a.TS, b.TS) })
	return out
}

func TestProgramsOnCraftedPackets(t *testing.T) {
	_, objs, rd := openTest(t, 0)
	get := []byte("*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n")
	cases := []struct {
		name string
		p    pkt
		want bool // a record is expected
	}{
		{"ipv4 request", pkt{src: cli4, dst: srv4, flags: 0x18, seq: 1000, ack: 7, payload: get}, true},
		{"ipv4 response", pkt{src: srv4, dst: cli4, flags: 0x18, seq: 5, ack: 9, payload: []byte("$-1\r\n")}, true},
		{"ipv6", pkt{src: cli6, dst: srv6, flags: 0x18, seq: 1, payload: get}, true},
		{"vlan", pkt{src: cli4, dst: srv4, vlans: 1, flags: 0x18, seq: 2, payload: get}, true},
		{"qinq", pkt{src: cli6, dst: srv6, vlans: 2, flags: 0x18, seq: 3, payload: get}, true},
		{"other port", pkt{src: cli4, dst: oth4, flags: 0x18, payload: get}, false},
		{"syn only", pkt{src: cli4, dst: srv4, flags: 0x02, seq: 999}, true},
		{"fin", pkt{src: cli4, dst: srv4, flags: 0x11, seq: 1100}, true},
		{"rst", pkt{src: srv4, dst: cli4, flags: 0x04, seq: 1}, true},
		{"pure ack", pkt{src: cli4, dst: srv4, flags: 0x10, seq: 1000}, false},
		{"ip length beyond frame", pkt{src: cli4, dst: srv4, flags: 0x18, seq: 10, payload: get, ipLenDelta: 100}, true},
	}
	progs := map[string]*ebpf.Program{"xdp": objs.HotsniffXdp, "tc": objs.HotsniffTcIngress}
	for pname, prog := range progs {
		for _, tc := range cases {
			t.Run(pname+"/"+tc.name, func(t *testing.T) {
				ret, err := prog.Run(&ebpf.RunOptions{Data: tc.p.bytes()})
				if err != nil {
					t.Fatal(err)
				}
				pass := uint32(2) // XDP_PASS
				if pname == "tc" {
					pass = 0xffffffff // TC_ACT_UNSPEC
				}
				if ret != pass {
					t.Errorf("returned %d, want %d", ret, pass)
				}
				segs := drain(t, rd)
				if !tc.want {
					if len(segs) != 0 {
						t.Fatalf("got %d records, want none", len(segs))
					}
					return
				}
				if len(segs) != 1 {
					t.Fatalf("got %d records, want 1", len(segs))
				}
				s := segs[0]
				if s.Src != tc.p.src || s.Dst != tc.p.dst || s.Seq != tc.p.seq || s.Ack != tc.p.ack || s.Flags != tc.p.flags {
					t.Errorf("got %v>%v seq %d ack %d flags %#x, want %v>%v seq %d ack %d flags %#x",
						s.Src, s.Dst, s.Seq, s.Ack, s.Flags, tc.p.src, tc.p.dst, tc.p.seq, tc.p.ack, tc.p.flags)
				}
				if !bytes.Equal(s.Payload, tc.p.payload) {
					t.Errorf("payload %q, want %q", s.Payload, tc.p.payload)
				}
				if want := uint32(max(tc.p.ipLenDelta, 0)); s.Missing != want {
					t.Errorf("missing %d, want %d", s.Missing, want)
				}
				if s.TS == 0 {
					t.Error("no timestamp")
				}
			})
		}
	}
}

// TestRepliesOff: with Config.Replies off (the default) a reply yields no
// record unless it carries SYN, FIN or RST, and then without its payload;
// its bytes are counted as ReplyBytes, not as truncated; requests are
// untouched.
func TestRepliesOff(t *testing.T) {
	_, objs, rd := openTestConfig(t, Config{Ports: []uint16{6379}, RingSize: 1 << 20})
	get := []byte("*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n")
	value := bytes.Repeat([]byte("v"), 300)
	for pname, prog := range map[string]*ebpf.Program{"xdp": objs.HotsniffXdp, "tc": objs.HotsniffTcIngress} {
		run := func(p pkt) []capture.Segment {
			if _, err := prog.Run(&ebpf.RunOptions{Data: p.bytes()}); err != nil {
				t.Fatal(err)
			}
			return drain(t, rd)
		}
		if segs := run(pkt{src: cli4, dst: srv4, flags: 0x18, seq: 1, payload: get}); len(segs) != 1 || !bytes.Equal(segs[0].Payload, get) {
			t.Errorf("%s: request not copied: %+v", pname, segs)
		}
		if segs := run(pkt{src: srv4, dst: cli4, flags: 0x18, seq: 5, payload: value}); len(segs) != 0 {
			t.Errorf("%s: reply copied with replies off: %d records", pname, len(segs))
		}
		segs := run(pkt{src: srv4, dst: cli4, flags: 0x19, seq: 305, payload: value}) // FIN
		if len(segs) != 1 || len(segs[0].Payload) != 0 || segs[0].Missing != 0 || segs[0].Flags&capture.FlagFIN == 0 || segs[0].Seq != 305 {
			t.Errorf("%s: reply FIN: %+v, want one empty record with FIN", pname, segs)
		}
		if segs := run(pkt{src: srv4, dst: cli4, flags: 0x12, seq: 99}); len(segs) != 1 || segs[0].Flags&capture.FlagSYN == 0 {
			t.Errorf("%s: SYN-ACK: %+v", pname, segs)
		}
	}
	var st Counters
	for _, h := range []Hook{HookXDP, HookTCIngress} {
		all, err := readCounters(objs.Stats)
		if err != nil {
			t.Fatal(err)
		}
		perCPU := hookCounters(all, h)
		for i := range perCPU {
			st.add(&perCPU[i])
		}
	}
	if st.ReplyBytes != 2*2*uint64(len(value)) || st.Truncated != 0 {
		t.Errorf("reply bytes %d (want %d), truncated %d (want 0)", st.ReplyBytes, 4*len(value), st.Truncated)
	}
}

// TestChunkingAndTruncation feeds a packet larger than one chunk and larger
// than the copy limit: the records must tile the copied bytes with
// consecutive sequence numbers and carry the rest as Missing.
func TestChunkingAndTruncation(t *testing.T) {
	const limit = 3*Chunk + 100
	c, objs, rd := openTest(t, limit)
	if c.MaxCopy() != limit {
		t.Fatalf("MaxCopy %d", c.MaxCopy())
	}
	for _, size := range []int{Chunk - 1, Chunk, Chunk + 1, 2*Chunk + 17, limit, limit + 1, 14000} {
		payload := make([]byte, size)
		for i := range payload {
			payload[i] = byte(i * 7)
		}
		p := pkt{src: cli4, dst: srv4, flags: 0x19, seq: 0xfffff000, payload: payload} // wraps seq space, has FIN
		// XDP: BPF_PROG_TEST_RUN takes multi-buffer XDP frames larger than a
		// page; skb test runs stop at one page.
		if _, err := objs.HotsniffXdp.Run(&ebpf.RunOptions{Data: p.bytes()}); err != nil {
			t.Fatal(err)
		}
		segs := drain(t, rd)
		var got []byte
		for i, s := range segs {
			if s.Seq != p.seq+uint32(len(got)) {
				t.Errorf("size %d record %d: seq %d, want %d", size, i, s.Seq, p.seq+uint32(len(got)))
			}
			last := i == len(segs)-1
			if fin := s.Flags&capture.FlagFIN != 0; fin != last {
				t.Errorf("size %d record %d: FIN %v", size, i, fin)
			}
			if !last && s.Missing != 0 {
				t.Errorf("size %d record %d: Missing %d before the last", size, i, s.Missing)
			}
			got = append(got, s.Payload...)
		}
		copied := min(size, limit)
		if !bytes.Equal(got, payload[:copied]) {
			t.Errorf("size %d: reassembled %d bytes, want the first %d", size, len(got), copied)
		}
		if m := segs[len(segs)-1].Missing; int(m) != size-copied {
			t.Errorf("size %d: Missing %d, want %d", size, m, size-copied)
		}
	}
	var st Counters
	all, err := readCounters(objs.Stats)
	if err != nil {
		t.Fatal(err)
	}
	perCPU := hookCounters(all, HookXDP)
	for i := range perCPU {
		st.add(&perCPU[i])
	}
	if want := uint64((limit + 1 - limit) + (14000 - limit)); st.Truncated != want {
		t.Errorf("truncated counter %d, want %d", st.Truncated, want)
	}
	if st.RingbufFull != 0 || st.LoadErrors != 0 {
		t.Errorf("drops: %+v", st)
	}
}

func TestSetPorts(t *testing.T) {
	c, objs, rd := openTest(t, 0)
	p := pkt{src: cli4, dst: oth4, flags: 0x18, payload: []byte("x")}
	run := func() int {
		if _, err := objs.HotsniffXdp.Run(&ebpf.RunOptions{Data: p.bytes()}); err != nil {
			t.Fatal(err)
		}
		return len(drain(t, rd))
	}
	if n := run(); n != 0 {
		t.Fatalf("port 8080 captured before SetPorts: %d", n)
	}
	if err := c.SetPorts([]uint16{6379, 8080}); err != nil {
		t.Fatal(err)
	}
	if n := run(); n != 1 {
		t.Fatalf("port 8080 not captured after SetPorts: %d", n)
	}
}

// TestWakeup checks the wakeup policy: the first record after a quiet spell
// wakes the reader (the shared wake map takes that record's time), records
// within WakeupInterval of it do not, and a reader blocked on the ring is
// woken by that first record long before its PollInterval timer.
func TestWakeup(t *testing.T) {
	c, objs, rd := openTestConfig(t, Config{Ports: []uint16{6379}, RingSize: 1 << 20})
	get := pkt{src: cli4, dst: srv4, flags: 0x18, seq: 1, payload: []byte("*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n")}
	var last uint64
	if err := c.wake.Lookup(uint32(0), &last); err != nil || last != 0 {
		t.Fatalf("wake before any record = %d, %v; want 0", last, err)
	}
	// A blocked reader, woken only by the program: its deadline is far.
	rd[0].SetDeadline(time.Now().Add(time.Minute))
	got := make(chan error, 1)
	go func() {
		_, err := rd[0].Read()
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if _, err := objs.HotsniffTcIngress.Run(&ebpf.RunOptions{Data: get.bytes()}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a record after a quiet spell did not wake the reader")
	}
	if err := c.wake.Lookup(uint32(0), &last); err != nil || last == 0 {
		t.Fatalf("wake after the first record = %d, %v; want its timestamp", last, err)
	}
	// A burst right after: at most one more wakeup (if the burst straddles
	// the interval), never one per record.
	before := last
	if _, err := objs.HotsniffTcIngress.Run(&ebpf.RunOptions{Data: get.bytes(), Repeat: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := c.wake.Lookup(uint32(0), &last); err != nil {
		t.Fatal(err)
	}
	if last != before && last-before < uint64(WakeupInterval.Nanoseconds()) {
		t.Fatalf("wake moved by %d ns within a burst, less than WakeupInterval", last-before)
	}
	drain(t, rd)
}

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		list string
		want string // '1' per CPU set, of 8
	}{
		{"0", "10000000"},
		{"0-3", "11110000"},
		{"0-1,4,6-7", "11001011"},
		{"2-11", "00111111"}, // beyond the possible CPUs: ignored
	} {
		set := make([]bool, 8)
		if err := parseCPUList(tc.list, set); err != nil {
			t.Fatalf("%q: %v", tc.list, err)
		}
		got := ""
		for _, on := range set {
			got += map[bool]string{true: "1", false: "0"}[on]
		}
		if got != tc.want {
			t.Errorf("%q: %s, want %s", tc.list, got, tc.want)
		}
	}
	for _, bad := range []string{"", "a", "1-b", "0,,1"} {
		if err := parseCPUList(bad, make([]bool, 8)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// A CPU offline at Open gets a one-page ring: the programs still run and
// write there when it comes online, and what the page cannot hold is
// counted as ringbuf_full, while online CPUs keep their full rings.
func TestOfflineCPUGetsOnePageRing(t *testing.T) {
	netnstest.RequireRoot(t)
	netnstest.RequireCPUs(t, 2)
	orig := onlineCPUs
	onlineCPUs = func(possible int) []bool {
		on := orig(possible)
		on[1] = false // pretend CPU 1 was offline at Open
		return on
	}
	defer func() { onlineCPUs = orig }()
	c, err := Open(Config{Ports: []uint16{6379}, RingSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rings := c.Rings()
	if got := rings[0].MaxEntries(); got != 1<<20 {
		t.Errorf("CPU 0 ring: %d bytes, want %d", got, 1<<20)
	}
	if got := int(rings[1].MaxEntries()); got != os.Getpagesize() {
		t.Errorf("CPU 1 ring: %d bytes, want one page (%d)", got, os.Getpagesize())
	}
	a, err := c.LoadDetached()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Detach()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all, cpu1 unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &all)
	cpu1.Set(1)
	if err := unix.SchedSetaffinity(0, &cpu1); err != nil {
		t.Fatal(err)
	}
	get := pkt{src: cli4, dst: srv4, flags: 0x18, seq: 1, payload: []byte("*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n")}
	const n = 200 // far more than a page holds
	if _, err := a.Program(HookXDP).Run(&ebpf.RunOptions{Data: get.bytes(), Repeat: n}); err != nil {
		t.Fatal(err)
	}
	st, err := a.Counters()
	if err != nil {
		t.Fatal(err)
	}
	// Past half the ring the programs sample flows out (this one flow is
	// either kept or skipped at the raised shift); a full ring drops.
	smp, err := c.Sampling()
	if err != nil {
		t.Fatal(err)
	}
	if st.Records == 0 || st.RingbufFull+smp.SampledOut == 0 || st.Records+st.RingbufFull+smp.SampledOut < n {
		t.Errorf("on the offline CPU's ring: %d records, %d ringbuf_full, %d sampled out; want records and the rest dropped or sampled out, %d in all",
			st.Records, st.RingbufFull, smp.SampledOut, n)
	}
}

// hookCounters returns hook's entries of every CPU from readCounters' out.
func hookCounters(all []hotsniffCounters, hook Hook) []hotsniffCounters {
	var out []hotsniffCounters
	for i := int(hook); i < len(all); i += int(numHooks) {
		out = append(out, all[i])
	}
	return out
}
