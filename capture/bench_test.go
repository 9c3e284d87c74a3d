package capture

import (
	"bytes"
	"io"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

func benchFrames(b *testing.B) map[string]struct {
	link LinkType
	b    []byte
} {
	get := "*2\r\n$3\r\nGET\r\n$8\r\nkey:0042\r\n"
	return map[string]struct {
		link LinkType
		b    []byte
	}{
		"eth-ipv4":  {LinkEthernet, frame(LinkEthernet, l3{0x0800, ip4TCP(b, get)})},
		"sll2-ipv6": {LinkLinuxSLL2, frame(LinkLinuxSLL2, l3{0x86DD, ip6TCP(b, get)})},
		"qinq-ipv4": {LinkEthernet, cat(mac2, mac1, vlanTag(0x88A8, 7, 0x8100), be16(42), be16(0x0800), ip4TCP(b, get))},
	}
}

func BenchmarkParsePacket(b *testing.B) {
	for name, f := range benchFrames(b) {
		b.Run(name, func(b *testing.B) {
			var seg Segment
			b.ReportAllocs()
			b.SetBytes(int64(len(f.b)))
			for b.Loop() {
				if err := ParsePacket(f.link, f.b, &seg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParsePacketGopacket is the alternative ParsePacket was measured
// against: gopacket's DecodingLayerParser on the same Ethernet/IPv4/TCP frame.
func BenchmarkParsePacketGopacket(b *testing.B) {
	f := benchFrames(b)["eth-ipv4"]
	var (
		eth     layers.Ethernet
		ip4     layers.IPv4
		ip6     layers.IPv6
		tcp     layers.TCP
		payload gopacket.Payload
	)
	p := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &ip6, &tcp, &payload)
	decoded := make([]gopacket.LayerType, 0, 8)
	b.ReportAllocs()
	b.SetBytes(int64(len(f.b)))
	for b.Loop() {
		if err := p.DecodeLayers(f.b, &decoded); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFileNext reads ~100k small GET packets from memory: one op is
// one Next, so ns/op is the per-packet cost of file reading plus parsing.
func BenchmarkFileNext(b *testing.B) {
	for _, kind := range []struct {
		name string
		ng   bool
	}{{"pcap", false}, {"pcapng", true}} {
		b.Run(kind.name, func(b *testing.B) {
			const n = 100_000
			file := manyPackets(b, n, kind.ng)
			open := func() *File {
				f, err := OpenReader("bench", bytes.NewReader(file))
				if err != nil {
					b.Fatal(err)
				}
				return f
			}
			f := open()
			var seg Segment
			if err := f.Next(&seg); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(file) / n))
			for b.Loop() {
				err := f.Next(&seg)
				if err == io.EOF {
					// Reopening, and the first read that sizes the
					// buffers, are per-file work, not per-packet.
					b.StopTimer()
					f = open()
					err = f.Next(&seg)
					b.StartTimer()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "packets/s")
		})
	}
}
