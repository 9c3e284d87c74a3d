package capture

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

// tunnel wraps inner in outer Ethernet + IPv4 (192.0.2.1 > 192.0.2.2) for
// kind: "vxlan" (UDP 4789), "vxlan8472", "geneve" (UDP 6081, 8 bytes of
// options; inner is an Ethernet frame), "geneve-ip" (inner is an IP packet),
// "ipip" or "ip6ip" (inner is an IP packet).
func tunnel(kind string, inner []byte) []byte {
	proto := byte(17)
	udp := func(port uint16, hdr []byte) []byte {
		b := binary.BigEndian.AppendUint16(nil, 50000)
		b = binary.BigEndian.AppendUint16(b, port)
		b = binary.BigEndian.AppendUint16(b, uint16(8+len(hdr)+len(inner)))
		b = append(b, 0, 0)
		return cat(b, hdr, inner)
	}
	var l4 []byte
	switch kind {
	case "vxlan":
		l4 = udp(4789, []byte{0x08, 0, 0, 0, 0, 0, 1, 0})
	case "vxlan8472":
		l4 = udp(8472, []byte{0x08, 0, 0, 0, 0, 0, 1, 0})
	case "geneve":
		l4 = udp(6081, []byte{2, 0, 0x65, 0x58, 0, 0, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8})
	case "geneve-ip":
		l4 = udp(6081, []byte{0, 0, 0x08, 0, 0, 0, 1, 0})
	case "ipip":
		proto, l4 = 4, inner
	case "ip6ip":
		proto, l4 = 41, inner
	}
	ip := make([]byte, 20)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
	ip[8], ip[9] = 64, proto
	copy(ip[12:], []byte{192, 0, 2, 1, 192, 0, 2, 2})
	return cat(ethHdr(0x0800), ip, l4)
}

// TestDecap: encapsulated segments (as captured on a node's uplink under an
// overlay CNI) parse to the inner segment with the pods' addresses, from an
// Ethernet capture and from a cooked one.
func TestDecap(t *testing.T) {
	get := "*2\r\n$3\r\nGET\r\n$4\r\nk:42\r\n"
	v4, v6 := ip4TCP(t, get), ip6TCP(t, get)
	want4 := Segment{Src: netip.AddrPortFrom(v4a, 40000), Dst: netip.AddrPortFrom(v4b, 6379)}
	want6 := Segment{Src: netip.AddrPortFrom(v6a, 40000), Dst: netip.AddrPortFrom(v6b, 6379)}
	for _, tc := range []struct {
		name  string
		frame []byte
		want  Segment
		err   error
	}{
		{"vxlan v4", tunnel("vxlan", cat(ethHdr(0x0800), v4)), want4, nil},
		{"vxlan v6", tunnel("vxlan", cat(ethHdr(0x86DD), v6)), want6, nil},
		{"vxlan 8472", tunnel("vxlan8472", cat(ethHdr(0x0800), v4)), want4, nil},
		{"vxlan inner vlan", tunnel("vxlan", cat(mac2, mac1, vlanTag(0x8100, 5, 0x0800), v4)), want4, nil},
		{"geneve", tunnel("geneve", cat(ethHdr(0x0800), v4)), want4, nil},
		{"geneve ip", tunnel("geneve-ip", v4), want4, nil},
		{"ipip", tunnel("ipip", v4), want4, nil},
		{"ip6ip", tunnel("ip6ip", v6), want6, nil},
		{"nested is not followed", tunnel("ipip", tunnel("ipip", v4)[14:]), Segment{}, ErrNotTCP},
		{"vxlan without VNI flag", func() []byte {
			b := tunnel("vxlan", cat(ethHdr(0x0800), v4))
			b[14+20+8] = 0
			return b
		}(), Segment{}, ErrNotTCP},
		{"geneve truncated options", tunnel("geneve", nil)[:14+20+8+10], Segment{}, ErrMalformed},
		{"udp elsewhere", func() []byte {
			b := tunnel("vxlan", cat(ethHdr(0x0800), v4))
			b[14+20+3] = 53
			return b
		}(), Segment{}, ErrNotTCP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, link := range []LinkType{LinkEthernet, LinkRaw} {
				frame := tc.frame
				if link == LinkRaw {
					frame = frame[14:]
				}
				var seg Segment
				err := ParsePacket(link, frame, &seg)
				if tc.err != nil {
					if !errors.Is(err, tc.err) {
						t.Errorf("%s: err %v, want %v", link, err, tc.err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", link, err)
				}
				if seg.Src != tc.want.Src || seg.Dst != tc.want.Dst || string(seg.Payload) != get || seg.Missing != 0 || seg.Seq != 1000 {
					t.Errorf("%s: got %v>%v seq %d %q missing %d, want the inner %v>%v", link, seg.Src, seg.Dst, seg.Seq, seg.Payload, seg.Missing, tc.want.Src, tc.want.Dst)
				}
				if !aliases(seg.Payload, frame) {
					t.Error("payload does not alias the frame")
				}
			}
		})
	}
	// Decapsulation allocates nothing either.
	frame := tunnel("geneve", cat(ethHdr(0x0800), v4))
	var seg Segment
	if n := testing.AllocsPerRun(100, func() { _ = ParsePacket(LinkEthernet, frame, &seg) }); n != 0 {
		t.Errorf("%v allocations per decapsulated packet", n)
	}
}

// TestDecapPolicy: live captures follow only the tunnels the node
// terminates. The frames of tunnel() go from 192.0.2.1 to 192.0.2.2 with
// VNI 1 (VXLAN) or 1 (Geneve); a forged datagram to a port, VNI or address
// the node does not terminate is "not TCP", never the inner segment.
func TestDecapPolicy(t *testing.T) {
	get := "*2\r\n$3\r\nGET\r\n$4\r\nk:42\r\n"
	v4 := ip4TCP(t, get)
	vx := tunnel("vxlan", cat(ethHdr(0x0800), v4))
	vx8472 := tunnel("vxlan8472", cat(ethHdr(0x0800), v4))
	gn := tunnel("geneve", cat(ethHdr(0x0800), v4))
	ipip := tunnel("ipip", v4)
	node, peer, other := netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.7")
	vxlan4789 := Tunnel{Kind: TunnelVXLAN, Port: 4789}
	for _, tc := range []struct {
		name  string
		d     *Decap
		frame []byte
		ok    bool
	}{
		{"nil follows nothing", nil, vx, false},
		{"nil: ipip", nil, ipip, false},
		{"vxlan to the endpoint", NewDecap([]Tunnel{vxlan4789}, []netip.Addr{node}), vx, true},
		{"vxlan from the endpoint", NewDecap([]Tunnel{vxlan4789}, []netip.Addr{peer}), vx, true},
		{"vxlan neither end local", NewDecap([]Tunnel{vxlan4789}, []netip.Addr{other}), vx, false},
		{"vxlan no address", NewDecap([]Tunnel{vxlan4789}, nil), vx, false},
		{"vxlan other port", NewDecap([]Tunnel{vxlan4789}, []netip.Addr{node}), vx8472, false},
		{"vxlan VNI carried", NewDecap([]Tunnel{{Kind: TunnelVXLAN, Port: 4789, VNIs: []uint32{7, 1}}}, []netip.Addr{node}), vx, true},
		{"vxlan VNI not carried", NewDecap([]Tunnel{{Kind: TunnelVXLAN, Port: 4789, VNIs: []uint32{42}}}, []netip.Addr{node}), vx, false},
		{"geneve on a vxlan port", NewDecap([]Tunnel{{Kind: TunnelVXLAN, Port: 6081}}, []netip.Addr{node}), gn, false},
		{"geneve", NewDecap([]Tunnel{{Kind: TunnelGeneve, Port: 6081}}, []netip.Addr{node}), gn, true},
		{"ipip not named", NewDecap([]Tunnel{vxlan4789}, []netip.Addr{node}), ipip, false},
		{"ipip", NewDecap([]Tunnel{{Kind: TunnelIPIP}}, []netip.Addr{node}), ipip, true},
		{"ipip elsewhere", NewDecap([]Tunnel{{Kind: TunnelIPIP}}, []netip.Addr{other}), ipip, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seg Segment
			err := ParsePacketDecap(LinkEthernet, tc.frame, &seg, tc.d)
			if tc.ok && (err != nil || string(seg.Payload) != get) {
				t.Fatalf("err %v payload %q, want the inner GET", err, seg.Payload)
			}
			if !tc.ok && !errors.Is(err, ErrNotTCP) {
				t.Fatalf("err %v (seg %v>%v), want not TCP", err, seg.Src, seg.Dst)
			}
		})
	}
	d := NewDecap([]Tunnel{{Kind: TunnelVXLAN, Port: 4789, VNIs: []uint32{1}}}, []netip.Addr{node})
	var seg Segment
	if n := testing.AllocsPerRun(100, func() { _ = ParsePacketDecap(LinkEthernet, vx, &seg, d) }); n != 0 {
		t.Errorf("%v allocations per checked packet", n)
	}
}
