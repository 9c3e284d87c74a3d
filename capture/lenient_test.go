package capture

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
)

// pcapVariant rewrites a little-endian standard pcap file (as pcapFile
// writes it): the header fields, and each record header through rec, which
// returns the bytes to write in its place.
func pcapVariant(t testing.TB, good []byte, header func(h []byte), rec func(h []byte) []byte) []byte {
	t.Helper()
	out := bytes.Clone(good[:24])
	if header != nil {
		header(out)
	}
	for b := good[24:]; len(b) > 0; {
		n := 16 + int(binary.LittleEndian.Uint32(b[8:12]))
		h := bytes.Clone(b[:16])
		if rec != nil {
			h = rec(h)
		}
		out = append(out, h...)
		out = append(out, b[16:n]...)
		b = b[n:]
	}
	return out
}

// TestPcapLenient checks the pcap files libpcap or Wireshark read, and
// whose bytes leave no doubt, read exactly like the standard file.
func TestPcapLenient(t *testing.T) {
	m := mixedPackets(t, LinkEthernet)
	good := pcapFile(binary.LittleEndian, false, 1, m.recs)
	swapLens := func(h []byte) []byte {
		c, l := binary.LittleEndian.Uint32(h[8:]), binary.LittleEndian.Uint32(h[12:])
		binary.LittleEndian.PutUint32(h[8:], l)
		binary.LittleEndian.PutUint32(h[12:], c)
		return h
	}
	version := func(major, minor uint16) func([]byte) {
		return func(h []byte) {
			binary.LittleEndian.PutUint16(h[4:], major)
			binary.LittleEndian.PutUint16(h[6:], minor)
		}
	}
	extra := func(n int) func([]byte) []byte {
		return func(h []byte) []byte { return append(h, bytes.Repeat([]byte{0xEE}, n)...) }
	}
	kuz := func(h []byte) { binary.LittleEndian.PutUint32(h, pcapMagicKuz) }
	// The same file written big-endian with its version bytes swapped.
	beSwapped := pcapFile(binary.BigEndian, false, 1, m.recs)
	copy(beSwapped[4:8], []byte{0x02, 0x00, 0x04, 0x00})

	tests := []struct {
		name string
		file []byte
	}{
		{"version bytes swapped (d4c3b2a1 00020004)", pcapVariant(t, good, func(h []byte) { copy(h[4:8], []byte{0, 2, 0, 4}) }, nil)},
		{"big-endian, version bytes swapped", beSwapped},
		{"snaplen 0", pcapVariant(t, good, func(h []byte) { binary.LittleEndian.PutUint32(h[16:], 0) }, nil)},
		{"snaplen 2^32-1", pcapVariant(t, good, func(h []byte) { binary.LittleEndian.PutUint32(h[16:], ^uint32(0)) }, nil)},
		{"snaplen below the records", pcapVariant(t, good, func(h []byte) { binary.LittleEndian.PutUint32(h[16:], 20) }, nil)},
		{"version 2.5", pcapVariant(t, good, version(2, 5), nil)},
		{"version 2.2, lengths swapped", pcapVariant(t, good, version(2, 2), swapLens)},
		{"version 2.3, lengths swapped", pcapVariant(t, good, version(2, 3), swapLens)},
		{"version 2.3, lengths in order", pcapVariant(t, good, version(2, 3), nil)},
		{"DG/UX 543.0, lengths swapped", pcapVariant(t, good, version(543, 0), swapLens)},
		{"Kuznetzov magic, 24-byte records", pcapVariant(t, good, kuz, extra(8))},
		{"Kuznetzov records, standard magic (RedHat 6.1)", pcapVariant(t, good, nil, extra(8))},
		{"Nokia, 20-byte records", pcapVariant(t, good, nil, extra(4))},
		{"SuSE 6.3, 28-byte records", pcapVariant(t, good, kuz, extra(12))},
		{"FCS length in the link type", pcapVariant(t, good, func(h []byte) { binary.LittleEndian.PutUint32(h[20:], 1|0x04000000|4<<28) }, nil)},
	}
	wantP, wantM, wantTS, err := readAll(t, mustOpen(t, good))
	if err != nil || len(wantP) != 4 {
		t.Fatalf("baseline: %d segments, %v", len(wantP), err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := OpenReader("x.pcap", bytes.NewReader(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			p, mi, ts, err := readAll(t, f)
			if err != nil || !slices.Equal(p, wantP) || !slices.Equal(mi, wantM) || !slices.Equal(ts, wantTS) {
				t.Errorf("got %q %v %v, %v\nwant %q %v %v", p, mi, ts, err, wantP, wantM, wantTS)
			}
			if st := f.Stats(); st.Packets != uint64(len(m.recs)) {
				t.Errorf("%d packets, want %d", st.Packets, len(m.recs))
			}
		})
	}

	// A record whose captured length exceeds its original length: libpcap
	// reads it, and so do we (the IP header says what is payload).
	capOverLen := pcapVariant(t, good, nil, func(h []byte) []byte {
		binary.LittleEndian.PutUint32(h[12:], 10)
		return h
	})
	if p, _, _, err := readAll(t, mustOpen(t, capOverLen)); err != nil || !slices.Equal(p, wantP) {
		t.Errorf("caplen > len: %q, %v; want %q", p, err, wantP)
	}

	// What is really not a pcap version we know stays an error, one line.
	for _, v := range []struct {
		major, minor uint16
		msg          string
	}{
		{1, 0, "open x.pcap: corrupt pcap header: version 1.0 predates 2.0 and is not supported"},
		{9, 4, "open x.pcap: corrupt pcap header: unknown version 9.4 (tcpdump writes 2.4)"},
		{0x0300, 0x0400, "open x.pcap: corrupt pcap header: unknown version 768.1024 (tcpdump writes 2.4)"},
	} {
		_, err := OpenReader("x.pcap", bytes.NewReader(pcapVariant(t, good, version(v.major, v.minor), nil)))
		if err == nil || err.Error() != v.msg {
			t.Errorf("version %d.%d: %v, want %q", v.major, v.minor, err, v.msg)
		}
	}
}

func mustOpen(t *testing.T, b []byte) *File {
	t.Helper()
	f, err := OpenReader("x.pcap", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestPcapLenientFirstRecordOnly checks the record-format guess on files
// with a single record, where only the end of file tells formats apart.
func TestPcapLenientFirstRecordOnly(t *testing.T) {
	m := mixedPackets(t, LinkEthernet)
	good := pcapFile(binary.LittleEndian, false, 1, m.recs[:1])
	for _, n := range []int{0, 4, 8} {
		t.Run(fmt.Sprintf("extra %d", n), func(t *testing.T) {
			b := pcapVariant(t, good, nil, func(h []byte) []byte { return append(h, make([]byte, n)...) })
			p, _, _, err := readAll(t, mustOpen(t, b))
			if err != nil || !slices.Equal(p, []string{"p0"}) {
				t.Errorf("got %q, %v", p, err)
			}
		})
	}
}
