package bpf

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
)

// encap wraps an Ethernet frame (inner) in an outer Ethernet + IPv4 header
// from 192.0.2.1 to 192.0.2.2 carrying kind: "vxlan" (UDP 4789), "vxlan8472",
// "geneve" (UDP 6081 with 8 bytes of options), "geneve-ip" (Geneve carrying
// IP directly), "ipip" or "ip6ip" (the inner IP packet alone).
func encap(kind string, inner []byte) []byte {
	var l4 []byte
	proto := byte(17)
	udp := func(port uint16, hdr []byte, payload []byte) []byte {
		b := make([]byte, 8)
		binary.BigEndian.PutUint16(b[0:], 50000)
		binary.BigEndian.PutUint16(b[2:], port)
		binary.BigEndian.PutUint16(b[4:], uint16(8+len(hdr)+len(payload)))
		return append(append(b, hdr...), payload...)
	}
	vx := []byte{0x08, 0, 0, 0, 0, 0, 42, 0}
	switch kind {
	case "vxlan":
		l4 = udp(4789, vx, inner)
	case "vxlan8472":
		l4 = udp(8472, vx, inner)
	case "geneve":
		gn := []byte{2, 0, 0x65, 0x58, 0, 0, 42, 0, 1, 2, 3, 4, 5, 6, 7, 8} // optlen 2 words
		l4 = udp(6081, gn, inner)
	case "geneve-ip":
		gn := []byte{0, 0, 0x08, 0x00, 0, 0, 42, 0}
		l4 = udp(6081, gn, inner[14:])
	case "ipip":
		proto, l4 = 4, inner[14:]
	case "ip6ip":
		proto, l4 = 41, inner[14:]
	}
	b := []byte{0x02, 0, 0, 0, 0, 3, 0x02, 0, 0, 0, 0, 4, 0x08, 0x00}
	ip := make([]byte, 20)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
	ip[8] = 64
	ip[9] = proto
	copy(ip[12:], []byte{192, 0, 2, 1})
	copy(ip[16:], []byte{192, 0, 2, 2})
	return append(append(b, ip...), l4...)
}

// TestOverlayDecap: on an uplink the programs follow VXLAN, Geneve and
// IP-in-IP to the inner segment and report the inner (pod) addresses, for
// the tunnels the node terminates (here 192.0.2.2, VNI 42).
func TestOverlayDecap(t *testing.T) {
	c, objs, rd := openTestConfig(t, Config{Ports: []uint16{6379}, RingSize: 1 << 20, Replies: true,
		Decap: &DecapTable{UDP: []DecapPort{{Port: 4789, VNIs: []uint32{42}}, {Port: 8472, VNIs: []uint32{42}}, {Port: 6081, Geneve: true, AnyVNI: true}},
			IPIP: true, Local: []netip.Addr{netip.MustParseAddr("192.0.2.2")}}})
	get := []byte("*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n")
	in4 := pkt{src: cli4, dst: srv4, flags: 0x18, seq: 1000, ack: 7, payload: get}
	in6 := pkt{src: cli6, dst: srv6, flags: 0x18, seq: 2000, ack: 8, payload: get}
	other := pkt{src: cli4, dst: oth4, flags: 0x18, seq: 1, payload: get}
	cases := []struct {
		kind  string
		inner pkt
		want  bool
	}{
		{"vxlan", in4, true}, {"vxlan", in6, true}, {"vxlan8472", in4, true},
		{"geneve", in4, true}, {"geneve", in6, true}, {"geneve-ip", in4, true},
		{"ipip", in4, true}, {"ip6ip", in6, true},
		{"vxlan", other, false}, {"geneve", other, false}, {"ipip", other, false},
	}
	for pname, prog := range map[string]*ebpf.Program{"xdp": objs.HotsniffXdp, "tc": objs.HotsniffTcIngress} {
		for _, tc := range cases {
			t.Run(pname+"/"+tc.kind+"/"+tc.inner.dst.String(), func(t *testing.T) {
				ret, err := prog.Run(&ebpf.RunOptions{Data: encap(tc.kind, tc.inner.bytes())})
				if err != nil {
					t.Fatal(err)
				}
				if pass := map[string]uint32{"xdp": 2, "tc": 0xffffffff}[pname]; ret != pass {
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
				if s.Src != tc.inner.src || s.Dst != tc.inner.dst || s.Seq != tc.inner.seq || !bytes.Equal(s.Payload, get) || s.Missing != 0 {
					t.Errorf("got %v>%v seq %d payload %q missing %d, want the inner %v>%v seq %d",
						s.Src, s.Dst, s.Seq, s.Payload, s.Missing, tc.inner.src, tc.inner.dst, tc.inner.seq)
				}
			})
		}
	}
	// A UDP datagram to an overlay port that is not a tunnel (no VNI
	// flag, Geneve version 1) and plain UDP are passed over.
	bad := encap("vxlan", in4.bytes())
	bad[14+20+8] = 0
	badGeneve := encap("geneve", in4.bytes())
	badGeneve[14+20+8] = 0x40
	for _, d := range [][]byte{bad, badGeneve} {
		if _, err := objs.HotsniffTcIngress.Run(&ebpf.RunOptions{Data: d}); err != nil {
			t.Fatal(err)
		}
		if segs := drain(t, rd); len(segs) != 0 {
			t.Errorf("not a tunnel: got %d records", len(segs))
		}
	}
	run := func(name string, frame []byte, want int) {
		t.Helper()
		for pname, prog := range map[string]*ebpf.Program{"xdp": objs.HotsniffXdp, "tc": objs.HotsniffTcIngress} {
			if _, err := prog.Run(&ebpf.RunOptions{Data: frame}); err != nil {
				t.Fatal(err)
			}
			if segs := drain(t, rd); len(segs) != want {
				t.Errorf("%s: %s: got %d records, want %d", pname, name, len(segs), want)
			}
		}
	}
	// Forged tunnel packets: a VNI the node does not carry, an outer
	// address that is not a local endpoint, a port it does not terminate.
	wrongVNI := encap("vxlan", in4.bytes())
	wrongVNI[14+20+8+6] = 43
	run("wrong VNI", wrongVNI, 0)
	elsewhere := encap("vxlan", in4.bytes())
	copy(elsewhere[14+16:], []byte{198, 51, 100, 7}) // destination
	run("not a local endpoint", elsewhere, 0)
	otherPort := encap("vxlan", in4.bytes())
	otherPort[14+20+3] = 0xb6 // 4790
	run("other port", otherPort, 0)
	ipipElsewhere := encap("ipip", in4.bytes())
	copy(ipipElsewhere[14+16:], []byte{198, 51, 100, 7})
	run("ipip not a local endpoint", ipipElsewhere, 0)
	// From the endpoint (egress direction) is followed; then the setting
	// changes live: nothing, then VXLAN 4789 with any VNI.
	fromNode := encap("vxlan", in4.bytes())
	copy(fromNode[14+12:], []byte{192, 0, 2, 2})
	copy(fromNode[14+16:], []byte{192, 0, 2, 9})
	run("from the endpoint", fromNode, 1)
	if err := c.SetDecap(nil); err != nil {
		t.Fatal(err)
	}
	run("decap off: vxlan", encap("vxlan", in4.bytes()), 0)
	run("decap off: ipip", encap("ipip", in4.bytes()), 0)
	if err := c.SetDecap(&DecapTable{UDP: []DecapPort{{Port: 4789, AnyVNI: true}}, Local: []netip.Addr{netip.MustParseAddr("192.0.2.2")}}); err != nil {
		t.Fatal(err)
	}
	run("any VNI", wrongVNI, 1)
	run("8472 no longer", encap("vxlan8472", in4.bytes()), 0)
}

// TestCgroupPrograms runs the cgroup_skb programs on crafted packets: they
// see the packet from the IP header, copy requests like the TC programs and
// always return 1 (allow), also for packets they do not follow.
func TestCgroupPrograms(t *testing.T) {
	_, objs, rd := openTest(t, 0)
	get := []byte("*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n")
	for name, prog := range map[string]*ebpf.Program{"ingress": objs.HotsniffCgroupIngress, "egress": objs.HotsniffCgroupEgress} {
		for _, p := range []pkt{
			{src: cli4, dst: srv4, flags: 0x18, seq: 1000, ack: 7, payload: get},
			{src: cli6, dst: srv6, flags: 0x18, seq: 2000, ack: 8, payload: get},
			{src: cli4, dst: oth4, flags: 0x18, seq: 1, payload: get},
		} {
			ret, err := prog.Run(&ebpf.RunOptions{Data: p.bytes()})
			if err != nil {
				t.Fatal(err)
			}
			if ret != 1 {
				t.Errorf("%s returned %d, want 1 (allow)", name, ret)
			}
			segs := drain(t, rd)
			if p.dst == oth4 {
				if len(segs) != 0 {
					t.Errorf("%s: other port: %d records", name, len(segs))
				}
				continue
			}
			if len(segs) != 1 || segs[0].Src != p.src || segs[0].Dst != p.dst || segs[0].Seq != p.seq || !bytes.Equal(segs[0].Payload, get) {
				t.Errorf("%s: got %+v, want %v>%v seq %d", name, segs, p.src, p.dst, p.seq)
			}
		}
	}
	// Packets that are not IP, and truncated ones, are allowed too.
	if ret, err := objs.HotsniffCgroupEgress.Run(&ebpf.RunOptions{Data: encap("vxlan", pkt{src: cli4, dst: srv4, flags: 0x18, payload: get}.bytes())}); err != nil || ret != 1 {
		t.Errorf("tunnel packet at a socket: ret %d err %v", ret, err)
	}
}
