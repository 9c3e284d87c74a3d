package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

var (
	mac1 = net.HardwareAddr{0, 1, 2, 3, 4, 5}
	mac2 = net.HardwareAddr{6, 7, 8, 9, 10, 11}
	v4a  = netip.MustParseAddr("10.0.0.1")
	v4b  = netip.MustParseAddr("10.0.0.5")
	v6a  = netip.MustParseAddr("2001:db8::1")
	v6b  = netip.MustParseAddr("2001:db8::5")
)

// serialize builds packet bytes with gopacket, fixing lengths but leaving
// checksums alone (hotsniff never checks them).
func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, ls...); err != nil {
		t.Fatalf("serialize: %v", err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

func tcpLayer(sport, dport uint16) *layers.TCP {
	return &layers.TCP{
		SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport),
		Seq: 1000, Ack: 2000, PSH: true, ACK: true, Window: 512,
	}
}

func ip4Layer() *layers.IPv4 {
	return &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, Flags: layers.IPv4DontFragment,
		SrcIP: v4a.AsSlice(), DstIP: v4b.AsSlice()}
}

func ip6Layer(next layers.IPProtocol) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: next, SrcIP: v6a.AsSlice(), DstIP: v6b.AsSlice()}
}

func ethLayer(t layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: mac1, DstMAC: mac2, EthernetType: t}
}

// ip4TCP is an IPv4/TCP packet 10.0.0.1:40000 -> 10.0.0.5:6379 carrying payload.
func ip4TCP(t testing.TB, payload string) []byte {
	return serialize(t, ip4Layer(), tcpLayer(40000, 6379), gopacket.Payload(payload))
}

// ip6TCP is an IPv6/TCP packet [2001:db8::1]:40000 -> [2001:db8::5]:6379.
func ip6TCP(t testing.TB, payload string) []byte {
	return serialize(t, ip6Layer(layers.IPProtocolTCP), tcpLayer(40000, 6379), gopacket.Payload(payload))
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

// Link headers written from the specs (linktypes.html), independent of the parser.
func ethHdr(etype uint16) []byte { return cat(mac2, mac1, be16(etype)) }

func sllHdr(proto uint16) []byte {
	// packet type 0 (to us), ARPHRD_ETHER, addr len 6, addr padded to 8, protocol
	return cat(be16(0), be16(1), be16(6), mac1, []byte{0, 0}, be16(proto))
}

func sll2Hdr(proto uint16) []byte {
	// protocol, reserved, ifindex 1, ARPHRD_LOOPBACK (772), packet type 4 (outgoing), addr len 6, addr
	return cat(be16(proto), be16(0), []byte{0, 0, 0, 1}, be16(772), []byte{4, 6}, mac1, []byte{0, 0})
}

func vlanTag(tpid, vid, inner uint16) []byte { return cat(be16(tpid), be16(vid), be16(inner)) }

type want struct {
	err     error // nil, or a target for errors.Is
	src     netip.AddrPort
	dst     netip.AddrPort
	payload string
	missing uint32
}

var (
	v4want = want{src: netip.AddrPortFrom(v4a, 40000), dst: netip.AddrPortFrom(v4b, 6379)}
	v6want = want{src: netip.AddrPortFrom(v6a, 40000), dst: netip.AddrPortFrom(v6b, 6379)}
)

func (w want) with(payload string, missing uint32) want {
	w.payload, w.missing = payload, missing
	return w
}

func errWant(err error) want { return want{err: err} }

func TestParsePacket(t *testing.T) {
	get := "*2\r\n$3\r\nGET\r\n$4\r\nk:42\r\n"
	v4 := ip4TCP(t, get)
	v6 := ip6TCP(t, get)

	// IPv4 with 8 bytes of options (NOP NOP + 6-byte record-route stub): IHL 7.
	ip4opts := ip4Layer()
	ip4opts.Options = []layers.IPv4Option{
		{OptionType: 1}, {OptionType: 1},
		{OptionType: 7, OptionLength: 6, OptionData: []byte{4, 0, 0, 0}},
	}
	v4opts := serialize(t, ip4opts, tcpLayer(40000, 6379), gopacket.Payload(get))
	if v4opts[0]&0x0F != 7 {
		t.Fatalf("IHL = %d, want 7", v4opts[0]&0x0F)
	}

	// TCP with options (MSS, SACK permitted, timestamps): data offset 10.
	tcpOpt := tcpLayer(40000, 6379)
	tcpOpt.Options = []layers.TCPOption{
		{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{0x05, 0xb4}},
		{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2},
		{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: make([]byte, 8)},
		{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindNop},
		{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{7}},
	}
	v4tcpopts := serialize(t, ip4Layer(), tcpOpt, gopacket.Payload(get))

	// IPv6 with hop-by-hop (PadN), destination options and a routing header.
	hbh := []byte{60, 0, 1, 4, 0, 0, 0, 0} // next: dest opts, PadN 4
	dst := []byte{43, 0, 1, 4, 0, 0, 0, 0} // next: routing
	rth := []byte{6, 2, 0, 0, 0, 0, 0, 0}  // next: TCP; type 0, 0 segments left, 8 more bytes
	rth = append(rth, make([]byte, 16)...) // hdr ext len 2 = 24 bytes total
	tcpPart := serialize(t, tcpLayer(40000, 6379), gopacket.Payload(get))
	v6ext := v6WithExt(t, 0, cat(hbh, dst, rth), tcpPart)
	v6frag := v6WithExt(t, 44, []byte{6, 0, 0x00, 0x08, 0, 0, 0, 1}, tcpPart)     // offset 1
	v6fragMF := v6WithExt(t, 44, []byte{6, 0, 0x00, 0x01, 0, 0, 0, 1}, tcpPart)   // offset 0, M
	v6atomic := v6WithExt(t, 44, []byte{6, 0, 0x00, 0x00, 0, 0, 0, 1}, tcpPart)   // atomic fragment
	v6ah := v6WithExt(t, 51, []byte{6, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1}, tcpPart) // AH: (1+2)*4 = 12 bytes
	v6esp := v6WithExt(t, 50, []byte{0, 0, 0, 1, 0, 0, 0, 1}, tcpPart)
	v6hbhShort := v6WithExt(t, 0, []byte{6, 9, 0, 0, 0, 0, 0, 0}, tcpPart) // claims 80 bytes

	// Fragments and non-TCP.
	fragMF := withIP4(v4, func(h []byte) { h[6] |= 0x20 })             // more fragments
	fragOff := withIP4(v4, func(h []byte) { h[6], h[7] = 0x40, 0x10 }) // DF + offset: impossible but a fragment
	udp := serialize(t, &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: v4a.AsSlice(), DstIP: v4b.AsSlice()},
		&layers.UDP{SrcPort: 53, DstPort: 53}, gopacket.Payload("x"))
	icmp := withIP4(ip4TCP(t, ""), func(h []byte) { h[9] = 1 })
	arp := serialize(t, ethLayer(layers.EthernetTypeARP), &layers.ARP{AddrType: 1, Protocol: 0x0800, HwAddressSize: 6, ProtAddressSize: 4,
		Operation: 1, SourceHwAddress: mac1, SourceProtAddress: v4a.AsSlice(), DstHwAddress: mac2, DstProtAddress: v4b.AsSlice()})

	// Lying lengths.
	ack := ip4TCP(t, "") // 40 bytes: Ethernet pads it to 46
	padded := cat(ethHdr(0x0800), ack, []byte{0xde, 0xad, 0xbe, 0xef, 0xde, 0xad})
	paddedData := cat(ethHdr(0x0800), ip4TCP(t, "ab"), []byte{1, 2, 3, 4})
	cut := cat(ethHdr(0x0800), v4[:20+20+5]) // snaplen cut inside the payload
	cut6 := cat(sll2Hdr(0x86DD), v6[:40+20+3])
	cutHdr := cat(ethHdr(0x0800), v4[:20+12]) // cut inside the TCP header
	tso := withIP4(v4, func(h []byte) { h[2], h[3] = 0, 0 })
	ihl4 := withIP4(v4, func(h []byte) { h[0] = 0x44 })
	ihlLong := withIP4(ip4TCP(t, ""), func(h []byte) { h[0] = 0x4F }) // 60-byte header in a 40-byte packet
	totShort := withIP4(v4, func(h []byte) { h[2], h[3] = 0, 19 })
	doff4 := withTCP(v4, 20, func(h []byte) { h[12] = 0x40 })
	doffLong := withTCP(ip4TCP(t, ""), 20, func(h []byte) { h[12] = 0xF0 }) // 60-byte TCP header, 20 on the wire
	v6doff := withTCP(v6, 40, func(h []byte) { h[12] = 0x30 })

	tests := []struct {
		name  string
		link  LinkType
		frame []byte
		want  want
	}{
		{"ethernet ipv4", LinkEthernet, cat(ethHdr(0x0800), v4), v4want.with(get, 0)},
		{"ethernet ipv6", LinkEthernet, cat(ethHdr(0x86DD), v6), v6want.with(get, 0)},
		{"ipv4 options", LinkEthernet, cat(ethHdr(0x0800), v4opts), v4want.with(get, 0)},
		{"tcp options", LinkEthernet, cat(ethHdr(0x0800), v4tcpopts), v4want.with(get, 0)},
		{"vlan 802.1Q", LinkEthernet, cat(mac2, mac1, vlanTag(0x8100, 42, 0x0800), v4), v4want.with(get, 0)},
		{"qinq 802.1ad", LinkEthernet, cat(mac2, mac1, vlanTag(0x88A8, 7, 0x8100), be16(42), be16(0x86DD), v6), v6want.with(get, 0)},
		{"triple tag 0x9100", LinkEthernet, cat(mac2, mac1, vlanTag(0x9100, 1, 0x88A8), be16(2), be16(0x8100), be16(3), be16(0x0800), v4), v4want.with(get, 0)},
		{"vlan truncated", LinkEthernet, cat(mac2, mac1, be16(0x8100), []byte{0}), errWant(ErrMalformed)},
		{"sll ipv4", LinkLinuxSLL, cat(sllHdr(0x0800), v4), v4want.with(get, 0)},
		{"sll ipv6", LinkLinuxSLL, cat(sllHdr(0x86DD), v6), v6want.with(get, 0)},
		{"sll vlan", LinkLinuxSLL, cat(sllHdr(0x8100), be16(5), be16(0x0800), v4), v4want.with(get, 0)},
		{"sll2 ipv4", LinkLinuxSLL2, cat(sll2Hdr(0x0800), v4), v4want.with(get, 0)},
		{"sll2 ipv6", LinkLinuxSLL2, cat(sll2Hdr(0x86DD), v6), v6want.with(get, 0)},
		{"sll2 arp", LinkLinuxSLL2, cat(sll2Hdr(0x0806), make([]byte, 28)), errWant(ErrNotTCP)},
		{"null ipv4 little-endian", LinkNull, cat([]byte{2, 0, 0, 0}, v4), v4want.with(get, 0)},
		{"null ipv6 darwin big-endian", LinkNull, cat([]byte{0, 0, 0, 30}, v6), v6want.with(get, 0)},
		{"null ipv6 linux", LinkNull, cat([]byte{10, 0, 0, 0}, v6), v6want.with(get, 0)},
		{"null other family", LinkNull, cat([]byte{7, 0, 0, 0}, v4), errWant(ErrNotTCP)},
		{"loop ipv4", LinkLoop, cat([]byte{0, 0, 0, 2}, v4), v4want.with(get, 0)},
		{"loop ipv6 openbsd", LinkLoop, cat([]byte{0, 0, 0, 24}, v6), v6want.with(get, 0)},
		{"raw 101 ipv4", LinkRaw, v4, v4want.with(get, 0)},
		{"raw 101 ipv6", LinkRaw, v6, v6want.with(get, 0)},
		{"raw 12", LinkRawDLT12, v4, v4want.with(get, 0)},
		{"raw 14", LinkRawDLT14, v6, v6want.with(get, 0)},
		{"ipv4 228", LinkIPv4, v4, v4want.with(get, 0)},
		{"ipv6 229", LinkIPv6, v6, v6want.with(get, 0)},
		{"raw bad version", LinkRaw, cat([]byte{0x50}, v4[1:]), errWant(ErrMalformed)},
		{"ipv6 extension headers", LinkEthernet, cat(ethHdr(0x86DD), v6ext), v6want.with(get, 0)},
		{"ipv6 atomic fragment", LinkEthernet, cat(ethHdr(0x86DD), v6atomic), v6want.with(get, 0)},
		{"ipv6 AH", LinkRaw, v6ah, v6want.with(get, 0)},
		{"ipv6 fragment", LinkEthernet, cat(ethHdr(0x86DD), v6frag), errWant(ErrFragment)},
		{"ipv6 first fragment", LinkEthernet, cat(ethHdr(0x86DD), v6fragMF), errWant(ErrFragment)},
		{"ipv6 ESP", LinkRaw, v6esp, errWant(ErrNotTCP)},
		{"ipv6 extension overruns", LinkRaw, v6hbhShort, errWant(ErrMalformed)},
		{"ipv4 more fragments", LinkEthernet, cat(ethHdr(0x0800), fragMF), errWant(ErrFragment)},
		{"ipv4 fragment offset", LinkEthernet, cat(ethHdr(0x0800), fragOff), errWant(ErrFragment)},
		{"udp", LinkEthernet, cat(ethHdr(0x0800), udp), errWant(ErrNotTCP)},
		{"icmp", LinkRaw, icmp, errWant(ErrNotTCP)},
		{"arp", LinkEthernet, arp, errWant(ErrNotTCP)},
		{"802.3 llc", LinkEthernet, cat(mac2, mac1, be16(46), make([]byte, 46)), errWant(ErrNotTCP)},
		{"ethernet padding, no payload", LinkEthernet, padded, v4want.with("", 0)},
		{"ethernet padding after data", LinkEthernet, paddedData, v4want.with("ab", 0)},
		{"snaplen cut ipv4", LinkEthernet, cut, v4want.with(get[:5], uint32(len(get)-5))},
		{"snaplen cut ipv6", LinkLinuxSLL2, cut6, v6want.with(get[:3], uint32(len(get)-3))},
		{"snaplen cut in tcp header", LinkEthernet, cutHdr, errWant(ErrMalformed)},
		{"tso zero total length", LinkEthernet, cat(ethHdr(0x0800), tso), v4want.with(get, 0)},
		{"ihl 4", LinkEthernet, cat(ethHdr(0x0800), ihl4), errWant(ErrMalformed)},
		{"ihl past end", LinkEthernet, cat(ethHdr(0x0800), ihlLong), errWant(ErrMalformed)},
		{"total length below header", LinkEthernet, cat(ethHdr(0x0800), totShort), errWant(ErrMalformed)},
		{"ipv4 version 6 header", LinkEthernet, cat(ethHdr(0x0800), v6), errWant(ErrMalformed)},
		{"tcp data offset 4", LinkEthernet, cat(ethHdr(0x0800), doff4), errWant(ErrMalformed)},
		{"tcp data offset past ip length", LinkEthernet, cat(ethHdr(0x0800), doffLong), errWant(ErrMalformed)},
		{"ipv6 tcp data offset 3", LinkLinuxSLL2, cat(sll2Hdr(0x86DD), v6doff), errWant(ErrMalformed)},
		{"ipv6 short", LinkRaw, v6[:39], errWant(ErrMalformed)},
		{"empty ethernet", LinkEthernet, nil, errWant(ErrMalformed)},
		{"short ethernet", LinkEthernet, ethHdr(0x0800)[:13], errWant(ErrMalformed)},
		{"short sll", LinkLinuxSLL, sllHdr(0x0800)[:15], errWant(ErrMalformed)},
		{"short sll2", LinkLinuxSLL2, sll2Hdr(0x0800)[:19], errWant(ErrMalformed)},
		{"short null", LinkNull, []byte{2, 0}, errWant(ErrMalformed)},
		{"empty raw", LinkRaw, nil, errWant(ErrMalformed)},
		{"unsupported link", LinkType(105), cat(ethHdr(0x0800), v4), errWant(ErrUnsupportedLink)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var seg Segment
			err := ParsePacket(tc.link, tc.frame, &seg)
			if tc.want.err != nil {
				if !errors.Is(err, tc.want.err) {
					t.Fatalf("err = %v, want %v", err, tc.want.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if seg.Src != tc.want.src || seg.Dst != tc.want.dst {
				t.Errorf("flow %v -> %v, want %v -> %v", seg.Src, seg.Dst, tc.want.src, tc.want.dst)
			}
			if seg.Seq != 1000 || seg.Ack != 2000 || seg.Flags != FlagPSH|FlagACK {
				t.Errorf("seq %d ack %d flags %#x, want 1000 2000 %#x", seg.Seq, seg.Ack, seg.Flags, FlagPSH|FlagACK)
			}
			if string(seg.Payload) != tc.want.payload || seg.Missing != tc.want.missing {
				t.Errorf("payload %q missing %d, want %q missing %d", seg.Payload, seg.Missing, tc.want.payload, tc.want.missing)
			}
			if len(seg.Payload) > 0 && !aliases(seg.Payload, tc.frame) {
				t.Errorf("payload does not alias the frame")
			}
		})
	}
}

// aliases reports whether sub lies inside b's memory.
func aliases(sub, b []byte) bool {
	if len(sub) == 0 || len(b) == 0 {
		return false
	}
	for i := range b {
		if &b[i] == &sub[0] {
			return i+len(sub) <= len(b)
		}
	}
	return false
}

// withIP4 returns a copy of an IPv4 packet with its header edited.
func withIP4(p []byte, edit func(h []byte)) []byte {
	p = append([]byte(nil), p...)
	edit(p)
	return p
}

// withTCP returns a copy of a packet with the TCP header at off edited.
func withTCP(p []byte, off int, edit func(h []byte)) []byte {
	p = append([]byte(nil), p...)
	edit(p[off:])
	return p
}

// v6WithExt builds an IPv6 packet whose next header is first, followed by
// the raw extension bytes and the TCP bytes.
func v6WithExt(t testing.TB, first uint8, ext, tcp []byte) []byte {
	h := serialize(t, ip6Layer(layers.IPProtocol(first)))
	body := cat(ext, tcp)
	binary.BigEndian.PutUint16(h[4:6], uint16(len(body)))
	h[6] = first
	return cat(h, body)
}

func TestParsePacketSetsFlags(t *testing.T) {
	l := tcpLayer(40000, 6379)
	l.PSH, l.ACK, l.SYN, l.FIN, l.RST = false, false, true, true, true
	var seg Segment
	if err := ParsePacket(LinkRaw, serialize(t, ip4Layer(), l), &seg); err != nil {
		t.Fatal(err)
	}
	if seg.Flags != FlagSYN|FlagFIN|FlagRST {
		t.Errorf("flags %#x, want %#x", seg.Flags, FlagSYN|FlagFIN|FlagRST)
	}
}

func TestParsePacketAllocs(t *testing.T) {
	frames := []struct {
		link LinkType
		b    []byte
	}{
		{LinkEthernet, cat(ethHdr(0x0800), ip4TCP(t, "hello"))},
		{LinkLinuxSLL2, cat(sll2Hdr(0x86DD), ip6TCP(t, "hello"))},
		{LinkEthernet, cat(ethHdr(0x0806), make([]byte, 28))},               // ErrNotTCP
		{LinkEthernet, cat(ethHdr(0x0800), []byte{0x44}, make([]byte, 30))}, // ErrMalformed
		{LinkType(999), nil},
	}
	var seg Segment
	for _, f := range frames {
		if n := testing.AllocsPerRun(100, func() { _ = ParsePacket(f.link, f.b, &seg) }); n != 0 {
			t.Errorf("link %v: %v allocs per packet", f.link, n)
		}
	}
}

func TestLinkTypeString(t *testing.T) {
	for l, s := range map[LinkType]string{1: "ETHERNET", 276: "LINUX_SLL2", 105: "IEEE802_11", 4242: "unknown"} {
		if l.String() != s {
			t.Errorf("%d.String() = %q, want %q", uint16(l), l.String(), s)
		}
	}
}
