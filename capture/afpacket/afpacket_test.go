package afpacket

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/bpf"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

func TestFilterAssembles(t *testing.T) {
	prog, err := Filter([]uint16{6379, 11211}, 65535)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(mustDisasm(t, prog))
	if err != nil {
		t.Fatal(err)
	}
	eth := func(etype uint16, vlan bool) []byte {
		b := []byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2}
		if vlan {
			b = append(b, 0x81, 0x00, 0, 42)
		}
		return append(b, byte(etype>>8), byte(etype))
	}
	tcp := func(sport, dport uint16) []byte {
		return append([]byte{byte(sport >> 8), byte(sport), byte(dport >> 8), byte(dport)}, make([]byte, 16)...)
	}
	ip4 := func(proto byte, frag uint16) []byte {
		h := make([]byte, 20)
		h[0], h[9] = 0x45, proto
		h[6], h[7] = byte(frag>>8), byte(frag)
		return h
	}
	udp := func(dport uint16) []byte { return []byte{0xc3, 0x50, byte(dport >> 8), byte(dport), 0, 0, 0, 0} }
	vxlan := func(flags byte) []byte { return []byte{flags, 0, 0, 0, 0, 0, 1, 0} }
	ip6 := func(next byte) []byte { h := make([]byte, 40); h[0], h[6] = 0x60, next; return h }
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	cases := []struct {
		name string
		pkt  []byte
		want bool
	}{
		{"v4 to server", cat(eth(0x0800, false), ip4(6, 0), tcp(40000, 6379)), true},
		{"v4 from server", cat(eth(0x0800, false), ip4(6, 0), tcp(11211, 40000)), true},
		{"v4 other port", cat(eth(0x0800, false), ip4(6, 0), tcp(40000, 80)), false},
		{"v4 udp", cat(eth(0x0800, false), ip4(17, 0), tcp(40000, 6379)), false},
		{"v4 fragment", cat(eth(0x0800, false), ip4(6, 100), tcp(40000, 6379)), false},
		{"v6", cat(eth(0x86dd, false), ip6(6), tcp(40000, 6379)), true},
		{"v6 other", cat(eth(0x86dd, false), ip6(6), tcp(40000, 6380)), false},
		{"vlan v4", cat(eth(0x0800, true), ip4(6, 0), tcp(40000, 6379)), true},
		{"vlan v6", cat(eth(0x86dd, true), ip6(6), tcp(6379, 40000)), true},
		{"arp", cat(eth(0x0806, false), make([]byte, 28)), false},
		{"vxlan v4", cat(eth(0x0800, false), ip4(17, 0), udp(4789), vxlan(0x08), eth(0x0800, false), ip4(6, 0), tcp(40000, 6379)), true},
		{"vxlan 8472 v6", cat(eth(0x0800, false), ip4(17, 0), udp(8472), vxlan(0x08), eth(0x86dd, false), ip6(6), tcp(6379, 40000)), true},
		{"vxlan other port", cat(eth(0x0800, false), ip4(17, 0), udp(4789), vxlan(0x08), eth(0x0800, false), ip4(6, 0), tcp(40000, 80)), false},
		{"vxlan no VNI flag", cat(eth(0x0800, false), ip4(17, 0), udp(4789), vxlan(0), eth(0x0800, false), ip4(6, 0), tcp(40000, 6379)), false},
		{"vxlan over v6 vlan", cat(eth(0x86dd, true), ip6(17), udp(4789), vxlan(0x08), eth(0x0800, false), ip4(6, 0), tcp(40000, 11211)), true},
		{"geneve", cat(eth(0x0800, false), ip4(17, 0), udp(6081), []byte{2, 0, 0x65, 0x58, 0, 0, 1, 0}, make([]byte, 8), eth(0x0800, false), ip4(6, 0), tcp(40000, 6379)), true},
		{"geneve ip", cat(eth(0x0800, false), ip4(17, 0), udp(6081), []byte{0, 0, 0x86, 0xdd, 0, 0, 1, 0}, ip6(6), tcp(40000, 6379)), true},
		{"geneve other", cat(eth(0x0800, false), ip4(17, 0), udp(6081), []byte{0, 0, 0x65, 0x58, 0, 0, 1, 0}, eth(0x0800, false), ip4(6, 0), tcp(40000, 6380)), false},
		{"ipip", cat(eth(0x0800, false), ip4(4, 0), ip4(6, 0), tcp(40000, 6379)), true},
		{"ip6ip", cat(eth(0x0800, false), ip4(41, 0), ip6(6), tcp(40000, 6379)), true},
		{"ipip inner fragment", cat(eth(0x0800, false), ip4(4, 0), ip4(6, 100), tcp(40000, 6379)), false},
		{"udp dns", cat(eth(0x0800, false), ip4(17, 0), udp(53), make([]byte, 40)), false},
		{"vxlan 4790", cat(eth(0x0800, false), ip4(17, 0), udp(4790), vxlan(0x08), eth(0x0800, false), ip4(6, 0), tcp(40000, 6379)), false},
	}
	for _, tc := range cases {
		n, err := vm.Run(tc.pkt)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := n > 0; got != tc.want {
			t.Errorf("%s: accepted %v, want %v", tc.name, got, tc.want)
		}
	}
	// A live capture passes only the tunnels it follows: none, or VXLAN
	// on 4790 alone.
	tunneled := func(name string) bool {
		return strings.Contains(name, "vxlan") || strings.Contains(name, "geneve") || strings.Contains(name, "ip") && !strings.HasPrefix(name, "v")
	}
	for _, d := range []*capture.Decap{nil, capture.NewDecap([]capture.Tunnel{{Kind: capture.TunnelVXLAN, Port: 4790}}, nil)} {
		prog, err := FilterDecap([]uint16{6379, 11211}, d, 65535)
		if err != nil {
			t.Fatal(err)
		}
		vm, err := bpf.NewVM(mustDisasm(t, prog))
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range cases {
			want := tc.want && !tunneled(tc.name)
			if tc.name == "vxlan 4790" && d != nil {
				want = true
			}
			if n, err := vm.Run(tc.pkt); err != nil || (n > 0) != want {
				t.Errorf("decap %v: %s: accepted %v (%v), want %v", d.Ports(capture.TunnelVXLAN), tc.name, n > 0, err, want)
			}
		}
	}
}

func mustDisasm(t *testing.T, raw []bpf.RawInstruction) []bpf.Instruction {
	ins, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("disassemble filter")
	}
	return ins
}

func TestLiveAFPacket(t *testing.T) {
	p := netnstest.NewPair(t)
	srv := p.StartRedis(t, 6379)
	var src *Source
	err := p.Do(func() error {
		var err error
		src, err = Open(Config{Ifaces: []string{p.NSIface}, Ports: []uint16{srv.Port()}, Blocks: 16})
		return err
	})
	if err != nil {
		t.Fatalf("open as root: %v", err)
	}
	col := netnstest.Collect(t, src)

	// A connection opened before and used after, with exact bytes.
	conn, err := net.Dial("tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	var want []byte
	for i := range 50 {
		cmd := netnstest.RESP("GET", "k:"+strconv.Itoa(i))
		want = append(want, cmd...)
		fmt.Fprintf(conn, "%s", cmd)
		if _, err := rd.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	key := netnstest.FlowKey{Src: netip.MustParseAddrPort(conn.LocalAddr().String()), Dst: srv}
	col.WaitStream(t, key, len(want), 5*time.Second)
	if got, gap := col.Stream(key); string(got) != string(want) || gap != 0 {
		t.Errorf("exact stream: got %d bytes gap %d, want %d", len(got), gap, len(want))
	}

	const n = 20000
	for _, pipe := range []int{1, 16} {
		out := netnstest.RedisBenchmark(t, srv, n, pipe, 1000)
		t.Log(strings.TrimSpace(out[strings.LastIndex(out, "\r")+1:]))
	}
	col.WaitIdle(200*time.Millisecond, 5*time.Second)
	cnt, err := src.Counters()
	if err != nil {
		t.Fatal(err)
	}
	st := src.Stats()
	t.Logf("kernel %+v, source %+v", cnt, st)
	if cnt[0].KernelDrops != 0 {
		t.Errorf("kernel dropped %d packets", cnt[0].KernelDrops)
	}
	data, gap := col.ToServer(srv)
	if got := netnstest.CountGets(data); got != 2*n+50 || gap != 0 {
		t.Errorf("reassembled %d GETs with gap %d, want %d and 0", got, gap, 2*n+50)
	}
	if err := col.Stop(); err != nil {
		t.Fatal(err)
	}
}
