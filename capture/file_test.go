package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

var t0 = time.Unix(1795979806, 123456789)

// l3 is a network-layer packet and the EtherType naming it.
type l3 struct {
	etype uint16
	b     []byte
}

// frame wraps p in the link header of link.
func frame(link LinkType, p l3) []byte {
	switch link {
	case LinkEthernet:
		return cat(ethHdr(p.etype), p.b)
	case LinkLinuxSLL:
		return cat(sllHdr(p.etype), p.b)
	case LinkLinuxSLL2:
		return cat(sll2Hdr(p.etype), p.b)
	case LinkNull:
		fam := map[uint16]byte{0x0800: 2, 0x86DD: 10}[p.etype]
		return cat([]byte{fam, 0, 0, 0}, p.b)
	case LinkRaw:
		return p.b
	}
	panic("no frame for " + link.String())
}

// mixed is a packet sequence with its expected outcome: 4 segments, 2
// skipped, 1 malformed, the last segment cut by the snap length.
type mixed struct {
	recs     []rec
	payloads []string
	missing  []uint32
	ts       []time.Time
}

func mixedPackets(t testing.TB, link LinkType) mixed {
	arp := l3{0x0806, make([]byte, 28)}
	if link == LinkRaw || link == LinkNull {
		arp = l3{0x0800, serialize(t, &layers.IPv4{Version: 4, TTL: 1, Protocol: layers.IPProtocolUDP,
			SrcIP: v4a.AsSlice(), DstIP: v4b.AsSlice()}, &layers.UDP{SrcPort: 1, DstPort: 2})}
	}
	bad := withIP4(ip4TCP(t, "xx"), func(h []byte) { h[0] = 0x44 })
	udp := serialize(t, &layers.IPv4{Version: 4, TTL: 1, Protocol: layers.IPProtocolUDP,
		SrcIP: v4a.AsSlice(), DstIP: v4b.AsSlice()}, &layers.UDP{SrcPort: 1, DstPort: 2}, gopacket.Payload("u"))
	last := frame(link, l3{0x0800, ip4TCP(t, "p3")})
	pk := []struct {
		p l3
		n int // bytes to cut
	}{
		{l3{0x0800, ip4TCP(t, "p0")}, 0},
		{arp, 0},
		{l3{0x0800, ip4TCP(t, "p1")}, 0},
		{l3{0x0800, bad}, 0},
		{l3{0x86DD, ip6TCP(t, "p2")}, 0},
		{l3{0x0800, udp}, 0},
	}
	var m mixed
	for i, p := range pk {
		m.recs = append(m.recs, rec{ts: t0.Add(time.Duration(i) * 1001 * time.Microsecond), data: frame(link, p.p)})
	}
	m.recs = append(m.recs, rec{ts: t0.Add(7 * time.Millisecond), data: last[:len(last)-1], origLen: len(last)})
	m.payloads = []string{"p0", "p1", "p2", "p"}
	m.missing = []uint32{0, 0, 0, 1}
	m.ts = []time.Time{m.recs[0].ts, m.recs[2].ts, m.recs[4].ts, m.recs[6].ts}
	return m
}

// readAll drains a File, returning the segments' payloads, Missing, TS and
// the final error (nil at EOF).
func readAll(t testing.TB, f *File) (payloads []string, missing []uint32, ts []int64, err error) {
	t.Helper()
	var seg Segment
	for range 1_000_000 {
		if err = f.Next(&seg); err != nil {
			if err == io.EOF {
				err = nil
			}
			return
		}
		payloads = append(payloads, string(seg.Payload))
		missing = append(missing, seg.Missing)
		ts = append(ts, seg.TS)
	}
	t.Fatal("Next never ended")
	return
}

func TestFileFormats(t *testing.T) {
	type variant struct {
		name string
		link LinkType
		nano bool
		file func(m mixed) []byte
	}
	var variants []variant
	for _, link := range []LinkType{LinkEthernet, LinkLinuxSLL, LinkLinuxSLL2, LinkNull} {
		for _, order := range []byteOrder{binary.LittleEndian, binary.BigEndian} {
			for _, nano := range []bool{false, true} {
				variants = append(variants, variant{
					fmt.Sprintf("pcap %s %s nano=%v", link, order, nano), link, nano,
					func(m mixed) []byte { return pcapFile(order, nano, uint32(link), m.recs) },
				})
			}
		}
	}
	variants = append(variants,
		variant{"pcapgo micro", LinkEthernet, false, func(m mixed) []byte { return pcapgoFile(t, layers.LinkTypeEthernet, false, m.recs) }},
		variant{"pcapgo nano", LinkEthernet, true, func(m mixed) []byte { return pcapgoFile(t, layers.LinkTypeEthernet, true, m.recs) }},
		variant{"pcapgo gzip", LinkEthernet, true, func(m mixed) []byte {
			return gzipped(t, pcapgoFile(t, layers.LinkTypeEthernet, true, m.recs))
		}},
		variant{"pcap with FCS bits in link type", LinkEthernet, false, func(m mixed) []byte {
			return pcapFile(binary.LittleEndian, false, 1|0x10000000|4<<29, m.recs)
		}},
		variant{"pcapng pcapgo", LinkEthernet, true, func(m mixed) []byte {
			var buf bytes.Buffer
			w, err := pcapgo.NewNgWriter(&buf, layers.LinkTypeEthernet)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range m.recs {
				if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: r.ts, CaptureLength: len(r.data), Length: r.orig()}, r.data); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes()
		}},
		variant{"pcapng big-endian sll2 default resolution", LinkLinuxSLL2, false, func(m mixed) []byte {
			w := (&ngFile{}).section(binary.BigEndian).iface(276, 0)
			for _, r := range m.recs {
				w.epb(0, uint64(r.ts.UnixMicro()), r.data, r.orig())
			}
			return w.b
		}},
		variant{"pcapng gzipped", LinkLinuxSLL, true, func(m mixed) []byte {
			w := (&ngFile{}).section(binary.LittleEndian)
			w.iface(113, 0, w.opt(9, []byte{9}))
			for _, r := range m.recs {
				w.epb(0, uint64(r.ts.UnixNano()), r.data, r.orig())
			}
			return gzipped(t, w.b)
		}},
	)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			m := mixedPackets(t, v.link)
			b := v.file(m)
			f, err := OpenReader("x.cap", bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			payloads, missing, ts, err := readAll(t, f)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(payloads) != fmt.Sprint(m.payloads) || fmt.Sprint(missing) != fmt.Sprint(m.missing) {
				t.Errorf("payloads %q missing %v, want %q %v", payloads, missing, m.payloads, m.missing)
			}
			for i := range min(len(ts), len(m.ts)) {
				want := m.ts[i]
				if !v.nano {
					want = want.Truncate(time.Microsecond)
				}
				if ts[i] != want.UnixNano() {
					t.Errorf("segment %d: TS %d, want %d", i, ts[i], want.UnixNano())
				}
			}
			want := Stats{Packets: 7, Segments: 4, Skipped: 2, Malformed: 1, Bytes: uint64(len(b))}
			if st := f.Stats(); st != want {
				t.Errorf("stats %+v, want %+v", st, want)
			}
			if f.Size() != -1 {
				t.Errorf("Size() = %d for a reader, want -1", f.Size())
			}
		})
	}
}

// TestPcapngInterfaces reads a file with several sections, interfaces of
// different link types and timestamp resolutions, and blocks to skip.
func TestPcapngInterfaces(t *testing.T) {
	w := (&ngFile{}).section(binary.BigEndian)
	w.iface(1, 0)                                                                          // 0: Ethernet, µs
	w.iface(276, 0, w.opt(9, []byte{0x80 | 20}), w.opt(2, []byte("any")))                  // 1: SLL2, 2^-20 s
	w.iface(0, 0, w.opt(9, []byte{3}), w.opt(14, binary.BigEndian.AppendUint64(nil, 100))) // 2: Null, ms, +100 s
	w.block(5, make([]byte, 12))                                                           // interface statistics: skipped
	w.epb(1, 1000<<20|1<<19, frame(LinkLinuxSLL2, l3{0x86DD, ip6TCP(t, "a")}), 0)
	w.epb(0, 2_000_000_123, frame(LinkEthernet, l3{0x0800, ip4TCP(t, "b")}), 0)
	w.block(0x0BAD, []byte("custom block"))
	w.epb(2, 3_000_004, frame(LinkNull, l3{0x0800, ip4TCP(t, "c")}), 0)
	w.spb(frame(LinkEthernet, l3{0x0800, ip4TCP(t, "d")})) // no timestamp: keeps the last
	// A new section in the other byte order forgets the interfaces.
	w.section(binary.LittleEndian)
	w.iface(101, 0, w.opt(9, []byte{9}))
	w.epb(0, 4_000_000_005, ip4TCP(t, "e"), 0)

	f, err := OpenReader("x.pcapng", bytes.NewReader(w.b))
	if err != nil {
		t.Fatal(err)
	}
	payloads, _, ts, err := readAll(t, f)
	if err != nil {
		t.Fatal(err)
	}
	wantTS := []int64{1000_500_000_000, 2_000_000_123_000, 3100_004_000_000, 3100_004_000_000, 4_000_000_005}
	if fmt.Sprint(payloads) != "[a b c d e]" || fmt.Sprint(ts) != fmt.Sprint(wantTS) {
		t.Errorf("payloads %q ts %v, want [a b c d e] %v", payloads, ts, wantTS)
	}
}

func TestOpenFile(t *testing.T) {
	m := mixedPackets(t, LinkEthernet)
	b := gzipped(t, pcapgoFile(t, layers.LinkTypeEthernet, false, m.recs))
	path := filepath.Join(t.TempDir(), "capture.pcap") // gzip despite the name
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Size() != int64(len(b)) {
		t.Errorf("Size() = %d, want %d", f.Size(), len(b))
	}
	payloads, _, _, err := readAll(t, f)
	if err != nil || len(payloads) != 4 {
		t.Errorf("read %d segments, err %v; want 4, nil", len(payloads), err)
	}
	if got := f.Stats().Bytes; got != uint64(len(b)) {
		t.Errorf("Stats().Bytes = %d, want %d", got, len(b))
	}
	if err := f.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if _, err := OpenFile(filepath.Join(t.TempDir(), "nope.pcap")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
}

// TestFileErrors checks corrupt input ends with one clear line naming the
// file, after every complete packet before the damage was delivered.
func TestFileErrors(t *testing.T) {
	m := mixedPackets(t, LinkEthernet)
	good := pcapFile(binary.LittleEndian, false, 1, m.recs[:3]) // 2 segments, then EOF
	recEnd := func(i int) int {                                 // offset just past record i
		n := 24
		for _, r := range m.recs[:i+1] {
			n += 16 + len(r.data)
		}
		return n
	}
	absurd := bytes.Clone(good)
	binary.LittleEndian.PutUint32(absurd[recEnd(0)+8:], 0xFFFFFFFF)
	binary.LittleEndian.PutUint32(absurd[recEnd(0)+12:], 0xFFFFFFFF)
	wifi := bytes.Clone(good)
	binary.LittleEndian.PutUint32(wifi[20:], 105)
	gz := gzipped(t, good)
	gzBadCRC := bytes.Clone(gz)
	gzBadCRC[len(gzBadCRC)-8] ^= 0xFF

	ng := func(edit func(w *ngFile)) []byte {
		w := (&ngFile{}).section(binary.LittleEndian)
		edit(w)
		return w.b
	}
	pkt := frame(LinkEthernet, l3{0x0800, ip4TCP(t, "p0")})
	ngGood := ng(func(w *ngFile) { w.iface(1, 0).epb(0, 1, pkt, 0).epb(0, 2, pkt, 0) })
	ngAbsurd := ng(func(w *ngFile) { w.iface(1, 0).epb(0, 1, pkt, 0).epb(0, 2, pkt, 0) })
	padded := (len(pkt) + 3) &^ 3
	caplenAt := len(ngGood) - 4 - padded - 8 // the 2nd EPB's caplen: before origlen, data, trailer
	binary.LittleEndian.PutUint32(ngAbsurd[caplenAt:], 0xFFFFFFF0)
	ngOverrun := bytes.Clone(ngAbsurd)
	binary.LittleEndian.PutUint32(ngOverrun[caplenAt:], uint32(len(pkt)+3))
	ngBadBOM := bytes.Clone(ngGood)
	ngBadBOM[8] = 0
	ngV2 := bytes.Clone(ngGood)
	ngV2[12] = 2
	ngOddLen := bytes.Clone(ngGood)
	binary.LittleEndian.PutUint32(ngOddLen[28+4:], 21) // the IDB's length
	ngTrailer := bytes.Clone(ngGood)
	ngTrailer[len(ngTrailer)-4]++

	tests := []struct {
		name   string
		file   []byte
		n      int    // segments delivered before the error
		err    string // the whole message
		target error
	}{
		{"empty", nil, 0, "open x.pcap: not a pcap or pcapng file", ErrNotCapture},
		{"three bytes", []byte{0xd4, 0xc3, 0xb2}, 0, "open x.pcap: not a pcap or pcapng file", ErrNotCapture},
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: example\r\n\r\n"), 0, "open x.pcap: not a pcap or pcapng file", ErrNotCapture},
		{"truncated file header", good[:10], 0, "open x.pcap: truncated pcap file header", ErrTruncated},
		{"unsupported link", wifi, 0, "x.pcap: unsupported link type 105 (IEEE802_11)", ErrUnsupportedLink},
		{"bad pcap version", append([]byte{0xd4, 0xc3, 0xb2, 0xa1, 9, 0}, good[6:]...), 0,
			"open x.pcap: corrupt pcap header: unknown version 9.4 (tcpdump writes 2.4)", ErrCorrupt},
		{"truncated in record header", good[:recEnd(1)+5], 1, "x.pcap: truncated at packet 3", ErrTruncated},
		{"truncated after record header", good[:recEnd(1)+16], 1, "x.pcap: truncated at packet 3", ErrTruncated},
		{"truncated in record data", good[:len(good)-1], 1, "x.pcap: truncated at packet 3", ErrTruncated},
		{"absurd caplen", absurd, 1, "x.pcap: corrupt at packet 2: capture length 4294967295 exceeds limit 262144", ErrCorrupt},
		{"gzip of garbage", gzipped(t, []byte("this is not a capture at all")), 0, "open x.pcap: not a pcap or pcapng file", ErrNotCapture},
		// Cutting the gzip trailer and the end of the deflate stream leaves
		// every packet readable; the next read finds the stream cut.
		{"gzip truncated", gz[:len(gz)-12], 2, "x.pcap: truncated at packet 4", ErrTruncated},
		{"gzip truncated mid-stream", gz[:len(gz)/2], 0, "x.pcap: truncated at packet 1", ErrTruncated},
		{"gzip bad checksum", gzBadCRC, 2, "read x.pcap: packet 4: gzip: invalid checksum", nil},
		{"gzip bad header", []byte{0x1f, 0x8b, 0, 0, 0}, 0, "open x.pcap: read gzip header: unexpected EOF", io.ErrUnexpectedEOF},
		{"pcapng truncated section header", ngGood[:20], 0, "open x.pcap: truncated pcapng section header", ErrTruncated},
		{"pcapng bad byte order", ngBadBOM, 0, "open x.pcap: corrupt pcapng: section header with bad byte-order magic", ErrCorrupt},
		{"pcapng version 2", ngV2, 0, "open x.pcap: corrupt pcapng: unsupported pcapng version 2.0", ErrCorrupt},
		{"pcapng absurd caplen", ngAbsurd, 1, "x.pcap: corrupt at packet 2: capture length 4294967280 exceeds limit 262144", ErrCorrupt},
		{"pcapng caplen overruns block", ngOverrun, 1, fmt.Sprintf("x.pcap: corrupt at packet 2: capture length %d overruns its %d-byte block", len(pkt)+3, 32+padded), ErrCorrupt},
		{"pcapng truncated packet", ngGood[:len(ngGood)-1], 1, "x.pcap: truncated at packet 2", ErrTruncated},
		{"pcapng truncated block header", ngGood[:len(ngGood)-len(pkt)-30], 1, "x.pcap: truncated at packet 2", ErrTruncated},
		{"pcapng block length not multiple of 4", ngOddLen, 0, "x.pcap: corrupt at packet 1: block type 0x1 has length 21", ErrCorrupt},
		{"pcapng trailing length", ngTrailer, 1, fmt.Sprintf("x.pcap: corrupt at packet 2: block type 0x6: trailing length does not match %d", 32+padded), ErrCorrupt},
		{"pcapng tsresol 2^-64", ng(func(w *ngFile) { w.iface(1, 0, w.opt(9, []byte{0x80 | 64})).epb(0, 1, pkt, 0) }), 0,
			"x.pcap: corrupt at packet 1: interface 0: if_tsresol 2^-64 out of range", ErrCorrupt},
		{"pcapng tsresol 10^-20", ng(func(w *ngFile) { w.iface(1, 0, w.opt(9, []byte{20})).epb(0, 1, pkt, 0) }), 0,
			"x.pcap: corrupt at packet 1: interface 0: if_tsresol 10^-20 out of range", ErrCorrupt},
		{"pcapng option overrun", ng(func(w *ngFile) { w.iface(1, 0, []byte{2, 0, 100, 0}).epb(0, 1, pkt, 0) }), 0,
			"x.pcap: corrupt at packet 1: interface 0: option 2 overruns its block", ErrCorrupt},
		{"pcapng undeclared interface", ng(func(w *ngFile) { w.iface(1, 0).epb(0, 1, pkt, 0).epb(3, 1, pkt, 0) }), 1,
			"x.pcap: corrupt at packet 2: packet on undeclared interface 3", ErrCorrupt},
		{"pcapng packet before interface", ng(func(w *ngFile) { w.epb(0, 1, pkt, 0) }), 0,
			"x.pcap: corrupt at packet 1: packet on undeclared interface 0", ErrCorrupt},
		{"pcapng unsupported link", ng(func(w *ngFile) { w.iface(1, 0).epb(0, 1, pkt, 0).iface(105, 0).epb(1, 1, pkt, 0) }), 1,
			"x.pcap: unsupported link type 105 (IEEE802_11) on interface 1", ErrUnsupportedLink},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := OpenReader("x.pcap", bytes.NewReader(tc.file))
			n := 0
			if err == nil {
				var payloads []string
				payloads, _, _, err = readAll(t, f)
				n = len(payloads)
				if err != nil {
					// Sticky: asking again gives the same answer.
					var seg Segment
					if err2 := f.Next(&seg); err2 != err {
						t.Errorf("second Next: %v, want %v", err2, err)
					}
				}
			}
			if err == nil {
				t.Fatalf("no error after %d segments", n)
			}
			if err.Error() != tc.err || n != tc.n {
				t.Errorf("after %d segments: %q\nwant after %d: %q", n, err, tc.n, tc.err)
			}
			if tc.target != nil && !errors.Is(err, tc.target) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.target)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

// TestMaxPacketOption checks the bound is configurable.
func TestMaxPacketOption(t *testing.T) {
	m := mixedPackets(t, LinkEthernet)
	for name, b := range map[string][]byte{
		"pcap":   pcapFile(binary.LittleEndian, false, 1, m.recs),
		"pcapng": (&ngFile{}).section(binary.LittleEndian).iface(1, 0).epb(0, 1, m.recs[0].data, 0).b,
	} {
		f, err := OpenReaderOptions("x", bytes.NewReader(b), Options{MaxPacket: 40})
		if err != nil {
			t.Fatal(err)
		}
		_, _, _, err = readAll(t, f)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "exceeds limit 40") {
			t.Errorf("%s: err = %v, want capture length over limit 40", name, err)
		}
	}
}

// manyPackets is an Ethernet pcap or pcapng of n small GET requests.
func manyPackets(t testing.TB, n int, ng bool) []byte {
	get := "*2\r\n$3\r\nGET\r\n$8\r\nkey:0042\r\n"
	fr := frame(LinkEthernet, l3{0x0800, ip4TCP(t, get)})
	if ng {
		w := (&ngFile{}).section(binary.LittleEndian)
		w.iface(1, 0, w.opt(9, []byte{9}))
		for i := range n {
			w.epb(0, uint64(t0.UnixNano())+uint64(i), fr, 0)
		}
		return w.b
	}
	recs := make([]rec, n)
	for i := range recs {
		recs[i] = rec{ts: t0.Add(time.Duration(i) * time.Microsecond), data: fr}
	}
	return pcapFile(binary.LittleEndian, true, 1, recs)
}

func TestFileNextAllocs(t *testing.T) {
	for _, ng := range []bool{false, true} {
		b := manyPackets(t, 2000, ng)
		f, err := OpenReader("x", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var seg Segment
		_ = f.Next(&seg) // first read sizes the buffers
		if n := testing.AllocsPerRun(1000, func() {
			if err := f.Next(&seg); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("pcapng=%v: %v allocs per Next", ng, n)
		}
	}
}
