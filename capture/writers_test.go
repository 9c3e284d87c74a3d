package capture

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// Capture file writers for tests. pcapgo writes little-endian pcap and
// pcapng; the hand-written ones below follow the file format specs and cover
// what pcapgo cannot write (big-endian, link types >= 256, if_tsresol in
// powers of two, simple packet blocks, several sections).

// byteOrder is what binary.LittleEndian and binary.BigEndian both are.
type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

type rec struct {
	ts      time.Time
	data    []byte
	origLen int // 0: len(data)
}

func (r rec) orig() int {
	if r.origLen > 0 {
		return r.origLen
	}
	return len(r.data)
}

// pcapgoFile writes recs with pcapgo.
func pcapgoFile(t testing.TB, link layers.LinkType, nano bool, recs []rec) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if nano {
		w = pcapgo.NewWriterNanos(&buf)
	}
	if err := w.WriteFileHeader(65535, link); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		ci := gopacket.CaptureInfo{Timestamp: r.ts, CaptureLength: len(r.data), Length: r.orig()}
		if err := w.WritePacket(ci, r.data); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// pcapFile writes a classic pcap file in the given byte order.
func pcapFile(order byteOrder, nano bool, link uint32, recs []rec) []byte {
	magic := uint32(0xA1B2C3D4)
	if nano {
		magic = 0xA1B23C4D
	}
	b := order.AppendUint32(nil, magic)
	b = order.AppendUint16(b, 2)
	b = order.AppendUint16(b, 4)
	b = order.AppendUint32(b, 0)
	b = order.AppendUint32(b, 0)
	b = order.AppendUint32(b, 65535)
	b = order.AppendUint32(b, link)
	for _, r := range recs {
		frac := uint32(r.ts.Nanosecond() / 1000)
		if nano {
			frac = uint32(r.ts.Nanosecond())
		}
		b = order.AppendUint32(b, uint32(r.ts.Unix()))
		b = order.AppendUint32(b, frac)
		b = order.AppendUint32(b, uint32(len(r.data)))
		b = order.AppendUint32(b, uint32(r.orig()))
		b = append(b, r.data...)
	}
	return b
}

// ngFile builds a pcapng file block by block.
type ngFile struct {
	order byteOrder
	b     []byte
}

func (w *ngFile) block(typ uint32, body []byte) *ngFile {
	for len(body)%4 != 0 {
		body = append(body, 0)
	}
	n := uint32(12 + len(body))
	w.b = w.order.AppendUint32(w.b, typ)
	w.b = w.order.AppendUint32(w.b, n)
	w.b = append(w.b, body...)
	w.b = w.order.AppendUint32(w.b, n)
	return w
}

// section starts a section in the given byte order.
func (w *ngFile) section(order byteOrder) *ngFile {
	w.order = order
	body := order.AppendUint32(nil, 0x1A2B3C4D)
	body = order.AppendUint16(body, 1)
	body = order.AppendUint16(body, 0)
	body = append(body, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF) // length unknown
	return w.block(0x0A0D0D0A, body)
}

func (w *ngFile) opt(code uint16, val []byte) []byte {
	b := w.order.AppendUint16(nil, code)
	b = w.order.AppendUint16(b, uint16(len(val)))
	b = append(b, val...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func (w *ngFile) iface(link uint16, snap uint32, opts ...[]byte) *ngFile {
	body := w.order.AppendUint16(nil, link)
	body = w.order.AppendUint16(body, 0)
	body = w.order.AppendUint32(body, snap)
	for _, o := range opts {
		body = append(body, o...)
	}
	if len(opts) > 0 {
		body = append(body, 0, 0, 0, 0) // opt_endofopt
	}
	return w.block(1, body)
}

func (w *ngFile) epb(iface uint32, ts uint64, data []byte, origLen int) *ngFile {
	if origLen == 0 {
		origLen = len(data)
	}
	body := w.order.AppendUint32(nil, iface)
	body = w.order.AppendUint32(body, uint32(ts>>32))
	body = w.order.AppendUint32(body, uint32(ts))
	body = w.order.AppendUint32(body, uint32(len(data)))
	body = w.order.AppendUint32(body, uint32(origLen))
	body = append(body, data...)
	return w.block(6, body)
}

func (w *ngFile) spb(data []byte) *ngFile {
	body := w.order.AppendUint32(nil, uint32(len(data)))
	return w.block(3, append(body, data...))
}

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
