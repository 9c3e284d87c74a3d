package capture

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// A small classic-pcap reader, written instead of gopacket's pcapgo.Reader
// because pcapgo accepts only version 2.4 exactly, while the files users
// bring are read by tcpdump and Wireshark whatever their writer did. It
// accepts what libpcap's sf-pcap.c and Wireshark's wiretap accept wherever
// the bytes leave no doubt about where each record starts and ends:
//   - magic a1b2c3d4 (µs), a1b23c4d (ns) and a1b2cd34 (Kuznetzov's patched
//     libpcap, 24-byte record headers), in either byte order;
//   - version 2.0 to 2.4 and any later 2.x, with caplen and len swapped
//     below 2.3 and, when caplen > len, at 2.3 (libpcap's rule); 543.0
//     (DG/UX, lengths swapped);
//   - version fields written in the other byte order than the magic
//     (00 02 00 04 after a little-endian magic): Wireshark reads these, and
//     swapped back they are a known version, so nothing is guessed;
//   - any snap length, 0 included: records are bounded by Options.MaxPacket,
//     not by the header;
//   - FCS information in the upper bits of the link type;
//   - a record whose captured length exceeds its original length (libpcap
//     does not check this either; IP lengths decide what is payload);
//   - the record-header variants of old patched tcpdumps that editcap still
//     writes (RedHat 6.1 and Nokia with the standard magic, SuSE 6.3 with
//     Kuznetzov's): as Wireshark does, the first two records are tried with
//     each header length and the first that reads as plausible records is
//     kept. The look-ahead stays in the read buffer, so pipes work.
// Records are decoded in place in the bufio buffer (Peek, then Discard).

const (
	pcapMagicMicro = 0xA1B2C3D4
	pcapMagicNano  = 0xA1B23C4D
	pcapMagicKuz   = 0xA1B2CD34 // Alexey Kuznetzov's patched libpcap

	// pcapLinkMask keeps the link type proper; libpcap's LT_LINKTYPE.
	pcapLinkMask = 0x03FFFFFF
)

// pcapMagic reports whether m (the file's first four bytes) is a classic
// pcap magic, and the byte order it says the file is written in.
func pcapMagic(m []byte) (binary.ByteOrder, bool) {
	switch binary.LittleEndian.Uint32(m) {
	case pcapMagicMicro, pcapMagicNano, pcapMagicKuz:
		return binary.LittleEndian, true
	case bits.ReverseBytes32(pcapMagicMicro), bits.ReverseBytes32(pcapMagicNano), bits.ReverseBytes32(pcapMagicKuz):
		return binary.BigEndian, true
	}
	return nil, false
}

type lengthOrder uint8

const (
	lengthsNormal lengthOrder = iota
	lengthsSwapped
	lengthsMaybeSwapped // version 2.3: swapped when caplen > len
)

type pcapReader struct {
	r         *bufio.Reader
	order     binary.ByteOrder
	link      LinkType
	nsPerTick int64 // 1000 for µs timestamps, 1 for ns
	hdrLen    int   // record header length: 16, or 24 for Kuznetzov's format
	lengths   lengthOrder
	maxPacket int

	// Of the last record, for error messages.
	caplen, origlen uint32
}

// pcapHeaderError is a file-header problem; File adds the name.
type pcapHeaderError struct{ msg string }

func (e *pcapHeaderError) Error() string { return e.msg }

// newPcapReader reads the 24-byte file header.
func newPcapReader(r *bufio.Reader, maxPacket int) (*pcapReader, error) {
	h, _ := r.Peek(24)
	if len(h) < 24 {
		return nil, io.ErrUnexpectedEOF
	}
	order, _ := pcapMagic(h)
	p := &pcapReader{r: r, order: order, nsPerTick: 1000, hdrLen: 16, maxPacket: maxPacket}
	switch order.Uint32(h[0:4]) {
	case pcapMagicNano:
		p.nsPerTick = 1
	case pcapMagicKuz:
		p.hdrLen = 24
	}
	major, minor := order.Uint16(h[4:6]), order.Uint16(h[6:8])
	if major != 2 && major != 543 && bits.ReverseBytes16(major) == 2 {
		// Version written in the other byte order than the magic.
		major, minor = 2, bits.ReverseBytes16(minor)
	}
	switch {
	case major == 2 && minor < 3, major == 543 && minor == 0:
		p.lengths = lengthsSwapped
	case major == 2 && minor == 3:
		p.lengths = lengthsMaybeSwapped
	case major == 2:
	case major < 2:
		return nil, &pcapHeaderError{fmt.Sprintf("version %d.%d predates 2.0 and is not supported", major, minor)}
	default:
		return nil, &pcapHeaderError{fmt.Sprintf("unknown version %d.%d (tcpdump writes 2.4)", major, minor)}
	}
	p.hdrLen = p.guessHeaderLen(order.Uint32(h[0:4]) == pcapMagicKuz)
	lt := order.Uint32(h[20:24]) & pcapLinkMask
	if lt > 0xFFFF {
		return nil, &pcapHeaderError{fmt.Sprintf("link type %d out of range", lt)}
	}
	p.link = LinkType(lt)
	if _, err := r.Discard(24); err != nil {
		return nil, err
	}
	return p, nil
}

// Record header lengths of the pcap variants: the standard one; Kuznetzov's
// patch (ifindex, protocol, packet type, padding), written with his magic
// (editcap's "modpcap") or with the standard one (RedHat 6.1); SuSE 6.3's,
// which adds CPU numbers; Nokia's, which adds four bytes.
const (
	pcapHdrStandard = 16
	pcapHdrKuz      = 24
	pcapHdrSuSE     = 28
	pcapHdrNokia    = 20
)

// guessHeaderLen picks the record header length under which the first two
// records are plausible, trying the usual one for the magic first; when
// none is, the usual one is kept and reading reports what is wrong.
func (p *pcapReader) guessHeaderLen(kuzMagic bool) int {
	cands := []int{pcapHdrStandard, pcapHdrKuz, pcapHdrNokia}
	if kuzMagic {
		cands = []int{pcapHdrKuz, pcapHdrSuSE}
	}
	for _, n := range cands {
		if p.plausible(n) {
			return n
		}
	}
	return cands[0]
}

// plausible reports whether the first two records (after the 24-byte file
// header) read sensibly with record headers of hdrLen bytes: lengths within
// bounds, captured no longer than original, a sub-second fraction below one
// second, and the data ending at a record boundary or at the end of the
// file. It only peeks.
func (p *pcapReader) plausible(hdrLen int) bool {
	off := 24
	maxFrac := uint32(1e6)
	if p.nsPerTick == 1 {
		maxFrac = 1e9
	}
	for range 2 {
		h, err := p.r.Peek(off + hdrLen)
		if len(h) < off+hdrLen {
			if errors.Is(err, bufio.ErrBufferFull) {
				return true // cannot look further: what was seen is fine
			}
			// The end of the file: fine only at a record boundary.
			return len(h) == off
		}
		h = h[off:]
		frac := p.order.Uint32(h[4:8])
		caplen, origlen := p.order.Uint32(h[8:12]), p.order.Uint32(h[12:16])
		if p.lengths == lengthsSwapped || (p.lengths == lengthsMaybeSwapped && caplen > origlen) {
			caplen, origlen = origlen, caplen
		}
		if frac >= maxFrac || caplen > origlen || uint64(caplen) > uint64(p.maxPacket) || origlen > 128<<20 {
			return false
		}
		off += hdrLen + int(caplen)
	}
	if _, err := p.r.Peek(off); errors.Is(err, bufio.ErrBufferFull) {
		return true
	}
	h, _ := p.r.Peek(off + 1)
	return len(h) >= off // the second record is complete
}

// errRecordTooLong and errRecordUnexpectedEOF are what next returns for
// File to turn into its messages.
var errRecordTooLong = errors.New("record too long")

// next returns the next record's captured bytes, aliasing the read buffer
// (valid until the next call), and its time in Unix nanoseconds. It returns
// io.EOF only at a clean record boundary, io.ErrUnexpectedEOF within a record.
func (p *pcapReader) next() ([]byte, int64, error) {
	h, err := p.r.Peek(p.hdrLen)
	if len(h) < p.hdrLen {
		if len(h) == 0 && (err == nil || errors.Is(err, io.EOF)) {
			return nil, 0, io.EOF
		}
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, 0, err
	}
	sec, frac := p.order.Uint32(h[0:4]), p.order.Uint32(h[4:8])
	caplen, origlen := p.order.Uint32(h[8:12]), p.order.Uint32(h[12:16])
	switch p.lengths {
	case lengthsSwapped:
		caplen, origlen = origlen, caplen
	case lengthsMaybeSwapped:
		if caplen > origlen {
			caplen, origlen = origlen, caplen
		}
	}
	p.caplen, p.origlen = caplen, origlen
	if uint64(caplen) > uint64(p.maxPacket) {
		return nil, 0, errRecordTooLong
	}
	n := p.hdrLen + int(caplen)
	b, err := p.r.Peek(n)
	if len(b) < n {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, 0, err
	}
	data := b[p.hdrLen:n]
	if _, err := p.r.Discard(n); err != nil { // all buffered: data stays valid
		return nil, 0, err
	}
	return data, int64(sec)*1e9 + int64(frac)*p.nsPerTick, nil
}
