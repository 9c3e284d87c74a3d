package capture

// LinkType is a pcap LINKTYPE_ value (https://www.tcpdump.org/linktypes.html):
// what header precedes the network layer in a frame.
//
// It is 16 bits wide on purpose: gopacket's layers.LinkType is a uint8, which
// silently turns LINKTYPE_LINUX_SLL2 (276) into 20.
type LinkType uint16

// Link types ParsePacket decodes, plus a few common ones named only so that
// "unsupported link type" errors can say what the file holds.
const (
	LinkNull      LinkType = 0   // BSD loopback: 4-byte address family, host byte order
	LinkEthernet  LinkType = 1   // DLT_EN10MB
	LinkRawDLT12  LinkType = 12  // DLT_RAW as numbered on most BSDs and Linux libpcap < 0.8
	LinkRawDLT14  LinkType = 14  // DLT_RAW as numbered on OpenBSD
	LinkRaw       LinkType = 101 // raw IPv4 or IPv6, version nibble first
	LinkLoop      LinkType = 108 // OpenBSD loopback: 4-byte address family, network byte order
	LinkLinuxSLL  LinkType = 113 // Linux "cooked" capture v1 (tcpdump -i any)
	LinkIPv4      LinkType = 228 // raw IPv4 only
	LinkIPv6      LinkType = 229 // raw IPv6 only
	LinkLinuxSLL2 LinkType = 276 // Linux "cooked" capture v2 (tcpdump 4.99 -i any)

	linkPPP          LinkType = 9
	linkFDDI         LinkType = 10
	linkPPPHDLC      LinkType = 50
	linkCHDLC        LinkType = 104
	linkIEEE80211    LinkType = 105
	linkPFLog        LinkType = 117
	linkRadiotap     LinkType = 127
	linkPPI          LinkType = 192
	linkUSBLinuxMmap LinkType = 220
	linkNFLog        LinkType = 239
	linkNetlink      LinkType = 253
)

var linkNames = map[LinkType]string{
	LinkNull:         "NULL",
	LinkEthernet:     "ETHERNET",
	LinkRawDLT12:     "RAW",
	LinkRawDLT14:     "RAW",
	LinkRaw:          "RAW",
	LinkLoop:         "LOOP",
	LinkLinuxSLL:     "LINUX_SLL",
	LinkIPv4:         "IPV4",
	LinkIPv6:         "IPV6",
	LinkLinuxSLL2:    "LINUX_SLL2",
	linkPPP:          "PPP",
	linkFDDI:         "FDDI",
	linkPPPHDLC:      "PPP_HDLC",
	linkCHDLC:        "C_HDLC",
	linkIEEE80211:    "IEEE802_11",
	linkPFLog:        "PFLOG",
	linkRadiotap:     "IEEE802_11_RADIOTAP",
	linkPPI:          "PPI",
	linkUSBLinuxMmap: "USB_LINUX_MMAPPED",
	linkNFLog:        "NFLOG",
	linkNetlink:      "NETLINK",
}

// String returns the LINKTYPE_ name without its prefix ("ETHERNET",
// "LINUX_SLL2"), or "unknown". It is meant for error messages.
func (l LinkType) String() string {
	if n, ok := linkNames[l]; ok {
		return n
	}
	return "unknown"
}

// Supported reports whether ParsePacket decodes frames of this link type.
func (l LinkType) Supported() bool {
	switch l {
	case LinkNull, LinkEthernet, LinkRawDLT12, LinkRawDLT14, LinkRaw, LinkLoop,
		LinkLinuxSLL, LinkIPv4, LinkIPv6, LinkLinuxSLL2:
		return true
	}
	return false
}
