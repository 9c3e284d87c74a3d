package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the committed fuzz seed corpora under testdata/fuzz")

// fuzzLinks maps the first fuzz byte to a link type.
var fuzzLinks = []LinkType{LinkEthernet, LinkLinuxSLL, LinkLinuxSLL2, LinkNull, LinkLoop, LinkRaw,
	LinkRawDLT12, LinkRawDLT14, LinkIPv4, LinkIPv6, LinkType(105)}

func fuzzLink(b byte) LinkType { return fuzzLinks[int(b)%len(fuzzLinks)] }

func linkByte(l LinkType) byte {
	for i, x := range fuzzLinks {
		if x == l {
			return byte(i)
		}
	}
	panic(l)
}

// parseSeeds are frames of every kind the table tests use.
func parseSeeds(t testing.TB) [][]byte {
	get := "*2\r\n$3\r\nGET\r\n$4\r\nk:42\r\n"
	v4, v6 := ip4TCP(t, get), ip6TCP(t, get)
	tcpPart := serialize(t, tcpLayer(40000, 6379), gopacket.Payload(get))
	ext := v6WithExt(t, 0, cat([]byte{60, 0, 1, 4, 0, 0, 0, 0}, []byte{44, 0, 1, 4, 0, 0, 0, 0}, []byte{6, 0, 0, 0, 0, 0, 0, 1}), tcpPart)
	seeds := []struct {
		link LinkType
		b    []byte
	}{
		{LinkEthernet, cat(ethHdr(0x0800), v4)},
		{LinkEthernet, cat(mac2, mac1, vlanTag(0x88A8, 7, 0x8100), be16(42), be16(0x86DD), v6)},
		{LinkEthernet, cat(ethHdr(0x86DD), ext)},
		{LinkEthernet, cat(ethHdr(0x0800), ip4TCP(t, ""), []byte{0, 0, 0, 0, 0, 0})},
		{LinkEthernet, cat(ethHdr(0x0800), v4[:45])},
		{LinkEthernet, cat(ethHdr(0x0806), make([]byte, 28))},
		{LinkLinuxSLL, cat(sllHdr(0x0800), v4)},
		{LinkLinuxSLL2, cat(sll2Hdr(0x86DD), v6)},
		{LinkNull, cat([]byte{30, 0, 0, 0}, v6)},
		{LinkLoop, cat([]byte{0, 0, 0, 2}, v4)},
		{LinkRaw, withIP4(v4, func(h []byte) { h[6] |= 0x20 })},
		{LinkRaw, withIP4(v4, func(h []byte) { h[0] = 0x47 })},
		{LinkIPv6, v6},
		{LinkEthernet, tunnel("vxlan", cat(ethHdr(0x0800), v4))},
		{LinkEthernet, tunnel("geneve", cat(ethHdr(0x86DD), v6))},
		{LinkEthernet, tunnel("ipip", v4)},
		{LinkEthernet, tunnel("vxlan8472", cat(ethHdr(0x0800), v4[:40]))},
	}
	var out [][]byte
	for _, s := range seeds {
		out = append(out, append([]byte{linkByte(s.link)}, s.b...))
	}
	return out
}

// openSeeds are whole capture files, good and damaged.
func openSeeds(t testing.TB) [][]byte {
	m := mixedPackets(t, LinkEthernet)
	pcap := pcapFile(binary.LittleEndian, false, 1, m.recs)
	ms := mixedPackets(t, LinkLinuxSLL2)
	w := (&ngFile{}).section(binary.BigEndian)
	w.iface(276, 0, w.opt(9, []byte{0x80 | 20}), w.opt(14, binary.BigEndian.AppendUint64(nil, 5)))
	w.iface(1, 0)
	for i, r := range ms.recs {
		w.epb(0, uint64(i)<<20, r.data, r.orig())
	}
	w.epb(1, 7, m.recs[0].data, 0)
	w.spb(ms.recs[2].data)
	w.block(5, make([]byte, 12))
	ng := w.b
	return [][]byte{
		pcap,
		pcapFile(binary.BigEndian, true, 113, mixedPackets(t, LinkLinuxSLL).recs),
		ng,
		gzipped(t, pcap),
		pcap[:len(pcap)-3],
		ng[:len(ng)-5],
		[]byte("not a capture"),
		// Headers and record formats other writers use (lenient_test.go).
		pcapVariant(t, pcap, func(h []byte) { copy(h[4:8], []byte{0, 2, 0, 4}) }, nil),
		pcapVariant(t, pcap, func(h []byte) { binary.LittleEndian.PutUint32(h, pcapMagicKuz) },
			func(h []byte) []byte { return append(h, 1, 2, 3, 4, 5, 6, 7, 8) }),
		pcapVariant(t, pcap, func(h []byte) { binary.LittleEndian.PutUint16(h[6:], 2) }, func(h []byte) []byte {
			c, l := binary.LittleEndian.Uint32(h[8:]), binary.LittleEndian.Uint32(h[12:])
			binary.LittleEndian.PutUint32(h[8:], l)
			binary.LittleEndian.PutUint32(h[12:], c)
			return h
		}),
		pcapVariant(t, pcap, nil, func(h []byte) []byte { return append(h, 0, 0, 0, 0) }),
	}
}

func writeCorpus(t *testing.T, name string, seeds [][]byte) {
	dir := filepath.Join("testdata", "fuzz", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range seeds {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFuzzSeeds rewrites the committed corpora with -update-seeds.
func TestFuzzSeeds(t *testing.T) {
	if !*updateSeeds {
		t.Skip("run with -update-seeds to rewrite testdata/fuzz")
	}
	writeCorpus(t, "FuzzParsePacket", parseSeeds(t))
	writeCorpus(t, "FuzzOpenReader", openSeeds(t))
}

// FuzzParsePacket: the first byte picks the link type, the rest is the
// frame. ParsePacket must not panic, must keep its outputs inside the frame,
// and must agree with gopacket on Ethernet frames both decode.
func FuzzParsePacket(f *testing.F) {
	for _, s := range parseSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		link, frame := fuzzLink(in[0]), in[1:]
		var seg Segment
		err := ParsePacket(link, frame, &seg)
		if err != nil {
			if !errors.Is(err, ErrNotTCP) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupportedLink) {
				t.Fatalf("unexpected error kind: %v", err)
			}
		} else {
			if len(seg.Payload) > 0 && !aliases(seg.Payload, frame) {
				t.Fatalf("payload outside the frame")
			}
			if len(seg.Payload)+int(seg.Missing) > 65535+65535 {
				t.Fatalf("payload %d + missing %d beyond any IP length", len(seg.Payload), seg.Missing)
			}
		}
		if link == LinkEthernet {
			compareGopacket(t, frame, &seg, err)
		}
		// A live policy never yields a segment the standard one does
		// not, and none at all through a tunnel it does not name.
		for _, d := range fuzzDecaps {
			var got Segment
			if e := ParsePacketDecap(link, frame, &got, d); e == nil && (err != nil || !sameSegment(got, seg)) {
				t.Fatalf("policy %v gave %v>%v where the standard parse gave %v (%v>%v)", d.Local(), got.Src, got.Dst, err, seg.Src, seg.Dst)
			}
		}
	})
}

// fuzzDecaps are live policies FuzzParsePacket checks against the
// standard one: none, and VXLAN 4789 VNI 1 to 192.0.2.2.
var fuzzDecaps = []*Decap{nil, NewDecap([]Tunnel{{Kind: TunnelVXLAN, Port: 4789, VNIs: []uint32{1}}},
	[]netip.Addr{netip.MustParseAddr("192.0.2.2")})}

func sameSegment(a, b Segment) bool {
	return a.Src == b.Src && a.Dst == b.Dst && a.Seq == b.Seq && a.Ack == b.Ack && a.Flags == b.Flags &&
		a.Missing == b.Missing && string(a.Payload) == string(b.Payload)
}

// compareGopacket decodes an Ethernet frame with gopacket, an independent
// implementation, and checks the two agree where both find a TCP segment.
func compareGopacket(t *testing.T, frame []byte, seg *Segment, err error) {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.DecodeOptions{NoCopy: true, Lazy: false})
	tl, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if tl == nil || p.ErrorLayer() != nil {
		return
	}
	nets := 0
	for _, l := range p.Layers() {
		if _, ok := l.(gopacket.NetworkLayer); ok {
			nets++
		}
	}
	if nets > 1 {
		return // a tunnel: gopacket follows some we do not (GRE, nesting); table tests cover ours
	}
	var src, dst []byte
	ipLen, ipHdr := 0, 0
	switch ip := p.NetworkLayer().(type) {
	case *layers.IPv4:
		if ip.Version != 4 || ip.Flags&layers.IPv4MoreFragments != 0 || ip.FragOffset != 0 {
			return // we also check the version; fragments are skipped on purpose
		}
		src, dst, ipLen, ipHdr = ip.SrcIP, ip.DstIP, int(ip.Length), int(ip.IHL)*4
	case *layers.IPv6:
		if ip.Version != 6 || ip.NextHeader != layers.IPProtocolTCP || ip.Length == 0 {
			return // extension headers and jumbograms: covered by table tests
		}
		src, dst, ipLen, ipHdr = ip.SrcIP, ip.DstIP, int(ip.Length)+40, 40
	default:
		return
	}
	if err != nil {
		t.Fatalf("gopacket decodes TCP %v>%v, ParsePacket says %v", tl.SrcPort, tl.DstPort, err)
	}
	s, _ := netip.AddrFromSlice(src)
	d, _ := netip.AddrFromSlice(dst)
	want := Segment{
		Src: netip.AddrPortFrom(s, uint16(tl.SrcPort)), Dst: netip.AddrPortFrom(d, uint16(tl.DstPort)),
		Seq: tl.Seq, Ack: tl.Ack, Payload: tl.Payload,
		Missing: uint32(ipLen - ipHdr - len(tl.Contents) - len(tl.Payload)),
	}
	if seg.Src != want.Src || seg.Dst != want.Dst || seg.Seq != want.Seq || seg.Ack != want.Ack ||
		!bytes.Equal(seg.Payload, want.Payload) || seg.Missing != want.Missing || seg.Flags != tl.Contents[13] {
		t.Fatalf("ParsePacket %v>%v seq %d ack %d %q missing %d\ngopacket    %v>%v seq %d ack %d %q missing %d",
			seg.Src, seg.Dst, seg.Seq, seg.Ack, seg.Payload, seg.Missing,
			want.Src, want.Dst, want.Seq, want.Ack, want.Payload, want.Missing)
	}
}

// FuzzOpenReader: any file bytes give segments then io.EOF or one error
// line, without panicking, allocating beyond the bounds, or looping.
func FuzzOpenReader(f *testing.F) {
	for _, s := range openSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		opt := Options{MaxPacket: 4096, ReadBuffer: 8192}
		fl, err := OpenReaderOptions("fuzz", bytes.NewReader(in), opt)
		if err != nil {
			return
		}
		defer fl.Close()
		var seg Segment
		for i := 0; ; i++ {
			err := fl.Next(&seg)
			if err == io.EOF {
				break
			}
			if err != nil {
				if fl.Next(&seg) != err {
					t.Fatalf("error not sticky")
				}
				break
			}
			if len(seg.Payload) > opt.MaxPacket {
				t.Fatalf("payload of %d bytes over the %d bound", len(seg.Payload), opt.MaxPacket)
			}
			if i > len(in) {
				t.Fatalf("more segments than input bytes")
			}
		}
		st := fl.Stats()
		if st.Packets != st.Segments+st.Skipped+st.Malformed || st.Bytes > uint64(len(in)) {
			t.Fatalf("inconsistent stats %+v for %d bytes", st, len(in))
		}
	})
}
