package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Outcomes of ParsePacket other than success. Every error ParsePacket returns
// is one of these pre-made values, so a rejected packet costs no allocation.
// Test them with errors.Is against ErrNotTCP (skipped: valid but of no use)
// or ErrMalformed (broken headers).
var (
	// ErrNotTCP: a valid packet that carries no TCP segment (ARP, UDP, ICMP,
	// LLC, ...). Callers skip it.
	ErrNotTCP = errors.New("not a TCP segment")
	// ErrMalformed: headers that do not parse (bad version, IHL or data
	// offset below the minimum, headers longer than the packet).
	ErrMalformed = errors.New("malformed packet")
	// ErrUnsupportedLink: ParsePacket does not know the link type.
	ErrUnsupportedLink = errors.New("unsupported link type")

	// ErrFragment: an IPv4 or IPv6 fragment. hotsniff does not reassemble IP
	// fragments: TCP to a cache server negotiates an MSS that fits the path
	// MTU and sets DF, so fragments practically never occur, and reassembly
	// would cost a bounded-but-real table per flow for nothing.
	ErrFragment = fmt.Errorf("%w: IP fragment (not reassembled)", ErrNotTCP)

	errNotIP       = fmt.Errorf("%w: not IPv4 or IPv6", ErrNotTCP)
	errNotTCPProto = fmt.Errorf("%w: other IP protocol", ErrNotTCP)
	errShortLink   = fmt.Errorf("%w: link header truncated", ErrMalformed)
	errIPVersion   = fmt.Errorf("%w: IP version does not match link type", ErrMalformed)
	errShortIP     = fmt.Errorf("%w: IP header truncated", ErrMalformed)
	errIHL         = fmt.Errorf("%w: IPv4 header length below 20", ErrMalformed)
	errIPLen       = fmt.Errorf("%w: IP length shorter than its header", ErrMalformed)
	errShortExt    = fmt.Errorf("%w: IPv6 extension header truncated", ErrMalformed)
	errShortTCP    = fmt.Errorf("%w: TCP header truncated", ErrMalformed)
	errDataOffset  = fmt.Errorf("%w: TCP data offset below 5", ErrMalformed)
	errTCPLen      = fmt.Errorf("%w: TCP header longer than IP payload", ErrMalformed)
)

// EtherTypes and IP protocol numbers the parser follows.
const (
	etherIPv4    = 0x0800
	etherIPv6    = 0x86DD
	etherVLAN    = 0x8100 // 802.1Q
	etherQinQ    = 0x88A8 // 802.1ad service tag
	etherQinQOld = 0x9100 // pre-standard QinQ, still emitted by some switches

	ipProtoHopByHop = 0
	ipProtoTCP      = 6
	ipProtoRouting  = 43
	ipProtoFragment = 44
	ipProtoAH       = 51
	ipProtoDestOpts = 60
	ipProtoIPIP     = 4
	ipProtoIPv6     = 41
	ipProtoUDP      = 17

	// Overlay tunnels decap follows.
	portVXLAN      = 4789 // IANA
	portVXLANLinux = 8472 // Linux's default, Flannel
	portGeneve     = 6081
	etherTEB       = 0x6558 // Geneve payload: an Ethernet frame

	// maxExtHeaders bounds the IPv6 extension header walk; real packets
	// carry two or three at most.
	maxExtHeaders = 8
)

// ParsePacket decodes one captured frame of the given link type into seg:
// addresses, ports, seq, ack, flags, payload and Missing. It never allocates
// and never panics. seg.Payload aliases data, so it is valid as long as data
// is; seg.TS is left for the caller to set.
//
// Lengths are taken from the IP header, not from the frame: when the IP
// length exceeds what was captured (snap length), the captured part is the
// payload and seg.Missing holds the rest; when the frame is longer (Ethernet
// padding, FCS) the excess is trimmed.
//
// It is hand-written rather than built on gopacket's DecodingLayerParser:
// gopacket v1.1.19 has no SLL2 layer, its parser decodes every layer into a
// struct with options and checksums we do not need, and it costs several
// times the per-packet budget (see BenchmarkParsePacketGopacket).
//
// ParsePacket follows the standard overlay tunnels (DecapStandard), as fits
// capture files; live captures use ParsePacketDecap with what the node
// really terminates.
func ParsePacket(link LinkType, data []byte, seg *Segment) error {
	return ParsePacketDecap(link, data, seg, DecapStandard)
}

// ParsePacketDecap is ParsePacket following only the tunnels d names (nil:
// none).
func ParsePacketDecap(link LinkType, data []byte, seg *Segment, d *Decap) error {
	switch link {
	case LinkEthernet:
		if len(data) < 14 {
			return errShortLink
		}
		return parseEtherd(binary.BigEndian.Uint16(data[12:14]), data[14:], seg, d, 0)
	case LinkLinuxSLL:
		// packet type(2) ARPHRD(2) addr len(2) addr(8) protocol(2)
		if len(data) < 16 {
			return errShortLink
		}
		return parseEtherd(binary.BigEndian.Uint16(data[14:16]), data[16:], seg, d, 0)
	case LinkLinuxSLL2:
		// protocol(2) reserved(2) ifindex(4) ARPHRD(2) packet type(1) addr len(1) addr(8)
		if len(data) < 20 {
			return errShortLink
		}
		return parseEtherd(binary.BigEndian.Uint16(data[0:2]), data[20:], seg, d, 0)
	case LinkNull, LinkLoop:
		if len(data) < 4 {
			return errShortLink
		}
		// NULL stores the family in the capturing host's byte order, LOOP
		// in network order; families are small, so whichever half is
		// non-zero tells the order.
		fam := binary.LittleEndian.Uint32(data[0:4])
		if fam > 0xFFFF {
			fam = binary.BigEndian.Uint32(data[0:4])
		}
		switch fam {
		case 2: // AF_INET everywhere
			return parseIPv4d(data[4:], seg, d, 0)
		case 10, 23, 24, 28, 30: // AF_INET6: Linux, Windows, Net/OpenBSD, FreeBSD, Darwin
			return parseIPv6d(data[4:], seg, d, 0)
		}
		return errNotIP
	case LinkRaw, LinkRawDLT12, LinkRawDLT14:
		if len(data) < 1 {
			return errShortIP
		}
		switch data[0] >> 4 {
		case 4:
			return parseIPv4d(data, seg, d, 0)
		case 6:
			return parseIPv6d(data, seg, d, 0)
		}
		return errIPVersion
	case LinkIPv4:
		return parseIPv4d(data, seg, d, 0)
	case LinkIPv6:
		return parseIPv6d(data, seg, d, 0)
	}
	return ErrUnsupportedLink
}

// parseEtherd dispatches on an EtherType, stepping over any number of VLAN
// tags (each 4 bytes: TCI then the inner EtherType), for a frame depth
// tunnels deep.
func parseEtherd(etype uint16, data []byte, seg *Segment, d *Decap, depth int) error {
	for etype == etherVLAN || etype == etherQinQ || etype == etherQinQOld {
		if len(data) < 4 {
			return errShortLink
		}
		etype = binary.BigEndian.Uint16(data[2:4])
		data = data[4:]
	}
	switch etype {
	case etherIPv4:
		return parseIPv4d(data, seg, d, depth)
	case etherIPv6:
		return parseIPv6d(data, seg, d, depth)
	}
	return errNotIP
}

func parseIPv4d(data []byte, seg *Segment, d *Decap, depth int) error {
	if len(data) < 20 {
		return errShortIP
	}
	if data[0]>>4 != 4 {
		return errIPVersion
	}
	ihl := int(data[0]&0x0F) * 4
	if ihl < 20 {
		return errIHL
	}
	if len(data) < ihl {
		return errShortIP
	}
	total := int(binary.BigEndian.Uint16(data[2:4]))
	if total == 0 {
		// TSO/GSO and BIG TCP packets seen on the sending host carry a
		// zero total length; the captured length is all we know.
		total = len(data)
	}
	if total < ihl {
		return errIPLen
	}
	if frag := binary.BigEndian.Uint16(data[6:8]); frag&0x3FFF != 0 { // MF or offset
		return ErrFragment
	}
	if len(data) > total {
		data = data[:total] // Ethernet padding or trailer
	}
	src := netip.AddrFrom4([4]byte(data[12:16]))
	dst := netip.AddrFrom4([4]byte(data[16:20]))
	if data[9] != ipProtoTCP {
		return decap(data[9], data[ihl:], seg, d, depth, src, dst)
	}
	return parseTCP(src, dst, data[ihl:], total-ihl, seg)
}

func parseIPv6d(data []byte, seg *Segment, d *Decap, depth int) error {
	if len(data) < 40 {
		return errShortIP
	}
	if data[0]>>4 != 6 {
		return errIPVersion
	}
	plen := int(binary.BigEndian.Uint16(data[4:6]))
	next := data[6]
	src := netip.AddrFrom16([16]byte(data[8:24]))
	dst := netip.AddrFrom16([16]byte(data[24:40]))
	data = data[40:]
	if plen == 0 {
		// A jumbogram or a BIG TCP/GSO packet: the length is in a
		// hop-by-hop option or nowhere; use what was captured.
		plen = len(data)
	}
	if len(data) > plen {
		data = data[:plen]
	}
	for range maxExtHeaders {
		var hlen int
		switch next {
		case ipProtoTCP:
			return parseTCP(src, dst, data, plen, seg)
		case ipProtoHopByHop, ipProtoRouting, ipProtoDestOpts:
			if len(data) < 2 {
				return errShortExt
			}
			hlen = (int(data[1]) + 1) * 8
		case ipProtoAH:
			if len(data) < 2 {
				return errShortExt
			}
			hlen = (int(data[1]) + 2) * 4
		case ipProtoIPIP, ipProtoIPv6, ipProtoUDP:
			return decap(next, data, seg, d, depth, src.Unmap(), dst.Unmap())
		case ipProtoFragment:
			if len(data) < 8 {
				return errShortExt
			}
			// An atomic fragment (offset 0, no more fragments) is a whole
			// packet; anything else is a real fragment.
			if binary.BigEndian.Uint16(data[2:4])&0xFFF9 != 0 {
				return ErrFragment
			}
			hlen = 8
		default:
			return errNotTCPProto
		}
		if len(data) < hlen || plen < hlen {
			return errShortExt
		}
		next = data[0]
		data = data[hlen:]
		plen -= hlen
	}
	return errNotTCPProto
}

// decap follows an overlay tunnel from an outer IP payload (src > dst) to
// the inner packet: IP-in-IP, IPv6-in-IP, VXLAN and Geneve, as far as d
// says the node terminates them (see Decap). The segment is the inner one:
// its addresses are the pods'. Only one level is followed.
func decap(proto uint8, data []byte, seg *Segment, d *Decap, depth int, src, dst netip.Addr) error {
	if depth > 0 || d == nil {
		return errNotTCPProto
	}
	switch proto {
	case ipProtoIPIP, ipProtoIPv6:
		if !d.ipip || !d.endpoint(src, dst) {
			return errNotTCPProto
		}
		if proto == ipProtoIPIP {
			return parseIPv4d(data, seg, d, depth+1)
		}
		return parseIPv6d(data, seg, d, depth+1)
	case ipProtoUDP:
	default:
		return errNotTCPProto
	}
	if len(data) < 8 {
		return errNotTCPProto
	}
	tun, ok := d.udpKind(binary.BigEndian.Uint16(data[2:4]))
	if !ok || !d.endpoint(src, dst) {
		return errNotTCPProto
	}
	data = data[8:]
	if len(data) < 8 {
		return errNotTCPProto
	}
	// Both headers carry the VNI in bytes 4-6.
	if !tun.carries(uint32(data[4])<<16 | uint32(data[5])<<8 | uint32(data[6])) {
		return errNotTCPProto
	}
	var inner uint16
	switch tun.kind {
	case TunnelVXLAN:
		if data[0]&0x08 == 0 { // no VNI flag: not VXLAN
			return errNotTCPProto
		}
		data, inner = data[8:], etherTEB
	case TunnelGeneve:
		if data[0]>>6 != 0 {
			return errNotTCPProto
		}
		hlen := 8 + int(data[0]&0x3f)*4
		if len(data) < hlen {
			return errShortLink
		}
		inner = binary.BigEndian.Uint16(data[2:4])
		data = data[hlen:]
	default:
		return errNotTCPProto
	}
	if inner == etherTEB {
		if len(data) < 14 {
			return errShortLink
		}
		inner, data = binary.BigEndian.Uint16(data[12:14]), data[14:]
	} else if inner != etherIPv4 && inner != etherIPv6 {
		return errNotTCPProto // VLAN tags only inside an Ethernet frame
	}
	if err := parseEtherd(inner, data, seg, d, depth+1); err != errNotIP {
		return err
	}
	return errNotTCPProto // an outer packet, counted as not TCP
}

// parseTCP fills seg from a TCP header at data. l4len is the TCP length the
// IP header claims; data holds the captured part of it (never more).
func parseTCP(src, dst netip.Addr, data []byte, l4len int, seg *Segment) error {
	if len(data) < 20 {
		if l4len < 20 {
			return errTCPLen
		}
		return errShortTCP
	}
	doff := int(data[12]>>4) * 4
	if doff < 20 {
		return errDataOffset
	}
	if doff > l4len {
		return errTCPLen
	}
	if doff > len(data) {
		return errShortTCP
	}
	seg.Src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(data[0:2]))
	seg.Dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(data[2:4]))
	seg.Seq = binary.BigEndian.Uint32(data[4:8])
	seg.Ack = binary.BigEndian.Uint32(data[8:12])
	seg.Flags = data[13]
	seg.Payload = data[doff:len(data):len(data)]
	seg.Missing = uint32(l4len - len(data))
	return nil
}
