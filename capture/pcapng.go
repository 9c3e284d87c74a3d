package capture

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// This is a small pcapng reader (https://www.ietf.org/archive/id/draft-ietf-opsawg-pcapng-02.html)
// written instead of using gopacket's pcapgo.NgReader, which v1.1.19 makes
// unfit for files we did not write ourselves:
//   - it stores interface link types as a uint8, so LINUX_SLL2 (276), what
//     "tcpdump -i any" writes, reads as 20;
//   - an if_tsresol exponent of 64 or more makes it divide by zero (panic);
//   - it allocates whatever capture length a packet block claims (4 GiB);
//   - with mixed link types it boxes the link type per packet (an allocation
//     for types >= 256), and it reports a truncated block as a clean io.EOF.
// Decoding each block in place in the bufio buffer (Peek, then Discard) also
// spares a copy per packet.

const (
	ngBlockSHB = 0x0A0D0D0A // section header; the same in both byte orders
	ngBlockIDB = 1          // interface description
	ngBlockPB  = 2          // packet (obsolete)
	ngBlockSPB = 3          // simple packet
	ngBlockEPB = 6          // enhanced packet

	ngByteOrderMagic = 0x1A2B3C4D

	ngOptEnd      = 0
	ngOptTSResol  = 9
	ngOptTSOffset = 14

	// maxInterfaces bounds the interface table of one section.
	maxInterfaces = 1024
)

// formatError describes what is wrong with a pcapng file; File adds the name
// and packet number.
type formatError struct {
	msg         string
	unsupported bool // msg is irrelevant: link on interface iface is not supported
	link        LinkType
	iface       int
}

func (e *formatError) Error() string { return e.msg }

func corruptf(format string, args ...any) error {
	return &formatError{msg: fmt.Sprintf(format, args...)}
}

// ngIface is what packets need from their interface description.
type ngIface struct {
	link  LinkType
	snap  uint32
	units uint64 // timestamp units per second (if_tsresol)
	off   int64  // seconds added to every timestamp (if_tsoffset)
}

type ngReader struct {
	r         *bufio.Reader
	maxPacket int
	maxBlock  int // largest block decoded in memory; <= r's buffer size
	be        bool
	ifaces    []ngIface
	lastTS    int64 // for simple packet blocks, which carry no timestamp
}

// newNgReader reads the first section header.
func newNgReader(r *bufio.Reader, maxPacket, maxBlock int) (*ngReader, error) {
	if r.Size() < maxBlock {
		maxBlock = r.Size()
	}
	ng := &ngReader{r: r, maxPacket: maxPacket, maxBlock: maxBlock}
	typ, blen, err := ng.blockHeader()
	if err != nil {
		return nil, err
	}
	if typ != ngBlockSHB {
		return nil, corruptf("first block is not a section header")
	}
	if err := ng.section(blen); err != nil {
		return nil, err
	}
	return ng, nil
}

func (ng *ngReader) u16(b []byte) uint16 {
	if ng.be {
		return binary.BigEndian.Uint16(b)
	}
	return binary.LittleEndian.Uint16(b)
}

func (ng *ngReader) u32(b []byte) uint32 {
	if ng.be {
		return binary.BigEndian.Uint32(b)
	}
	return binary.LittleEndian.Uint32(b)
}

// blockHeader peeks at the next block's type and total length. A section
// header sets the byte order first, since its length is written in it. It
// returns io.EOF only at a clean block boundary.
func (ng *ngReader) blockHeader() (typ, blen uint32, err error) {
	h, err := ng.r.Peek(12)
	if len(h) < 12 {
		if len(h) == 0 && errors.Is(err, io.EOF) {
			return 0, 0, io.EOF
		}
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		// Fewer than 12 bytes left may still be a valid tiny block
		// header plus EOF; either way the file ends mid-block.
		return 0, 0, err
	}
	typ = binary.LittleEndian.Uint32(h[0:4])
	if typ == ngBlockSHB {
		switch binary.LittleEndian.Uint32(h[8:12]) {
		case ngByteOrderMagic:
			ng.be = false
		case bits.ReverseBytes32(ngByteOrderMagic):
			ng.be = true
		default:
			return 0, 0, corruptf("section header with bad byte-order magic")
		}
	} else {
		typ = ng.u32(h[0:4])
	}
	blen = ng.u32(h[4:8])
	if blen < 12 || blen%4 != 0 {
		return 0, 0, corruptf("block type %#x has length %d", typ, blen)
	}
	return typ, blen, nil
}

// block peeks at the whole block, which must fit in maxBlock.
func (ng *ngReader) block(typ, blen uint32) ([]byte, error) {
	if int64(blen) > int64(ng.maxBlock) {
		return nil, corruptf("block type %#x of %d bytes exceeds limit %d", typ, blen, ng.maxBlock)
	}
	b, err := ng.r.Peek(int(blen))
	if len(b) < int(blen) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if ng.u32(b[blen-4:]) != blen {
		return nil, corruptf("block type %#x: trailing length does not match %d", typ, blen)
	}
	return b, nil
}

// skip consumes n bytes, reading through blocks too big to peek.
func (ng *ngReader) skip(n uint32) error {
	d, err := ng.r.Discard(int(n))
	if d < int(n) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// section reads a section header block of length blen and resets the
// interface table.
func (ng *ngReader) section(blen uint32) error {
	if blen < 28 {
		return corruptf("section header of %d bytes", blen)
	}
	// Only the fixed part matters; its options may be large, so do not
	// require the block to fit in memory.
	h, err := ng.r.Peek(16)
	if len(h) < 16 {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if major := ng.u16(h[12:14]); major != 1 {
		return corruptf("unsupported pcapng version %d.%d", major, ng.u16(h[14:16]))
	}
	ng.ifaces = ng.ifaces[:0]
	return ng.skip(blen)
}

// iface reads an interface description block.
func (ng *ngReader) iface(blen uint32) error {
	b, err := ng.block(ngBlockIDB, blen)
	if err != nil {
		return err
	}
	if blen < 20 {
		return corruptf("interface description of %d bytes", blen)
	}
	if len(ng.ifaces) >= maxInterfaces {
		return corruptf("more than %d interfaces in a section", maxInterfaces)
	}
	ifc := ngIface{
		link:  LinkType(ng.u16(b[8:10])),
		snap:  ng.u32(b[12:16]),
		units: 1e6, // microseconds unless if_tsresol says otherwise
	}
	if !ifc.link.Supported() {
		return &formatError{unsupported: true, link: ifc.link, iface: len(ng.ifaces)}
	}
	opts := b[16 : blen-4]
	for len(opts) >= 4 {
		code, olen := ng.u16(opts[0:2]), int(ng.u16(opts[2:4]))
		if code == ngOptEnd {
			break
		}
		padded := (olen + 3) &^ 3
		if 4+padded > len(opts) {
			return corruptf("interface %d: option %d overruns its block", len(ng.ifaces), code)
		}
		v := opts[4 : 4+olen]
		switch {
		case code == ngOptTSResol && olen >= 1:
			e := uint(v[0] & 0x7F)
			if v[0]&0x80 != 0 {
				if e > 63 {
					return corruptf("interface %d: if_tsresol 2^-%d out of range", len(ng.ifaces), e)
				}
				ifc.units = 1 << e
			} else {
				if e > 19 {
					return corruptf("interface %d: if_tsresol 10^-%d out of range", len(ng.ifaces), e)
				}
				ifc.units = 1
				for range e {
					ifc.units *= 10
				}
			}
		case code == ngOptTSOffset && olen >= 8:
			if ng.be {
				ifc.off = int64(binary.BigEndian.Uint64(v))
			} else {
				ifc.off = int64(binary.LittleEndian.Uint64(v))
			}
		}
		opts = opts[4+padded:]
	}
	ng.ifaces = append(ng.ifaces, ifc)
	return ng.skip(blen)
}

// ts converts a 64-bit pcapng timestamp of interface i to Unix nanoseconds.
func (ifc *ngIface) ts(hi, lo uint32) int64 {
	t := uint64(hi)<<32 | uint64(lo)
	sec, frac := t/ifc.units, t%ifc.units
	var ns uint64
	switch ifc.units {
	case 1e9:
		ns = frac
	case 1e6:
		ns = frac * 1e3
	default:
		// frac < units, so the quotient is below 1e9 and Div64 cannot
		// overflow.
		h, l := bits.Mul64(frac, 1e9)
		ns, _ = bits.Div64(h, l, ifc.units)
	}
	return (int64(sec)+ifc.off)*1e9 + int64(ns)
}

// next returns the next packet's captured bytes (aliasing the read buffer,
// valid until the next call), its interface's link type and its time.
func (ng *ngReader) next() ([]byte, LinkType, int64, error) {
	for {
		typ, blen, err := ng.blockHeader()
		if err != nil {
			return nil, 0, 0, err
		}
		switch typ {
		case ngBlockEPB, ngBlockPB:
			b, err := ng.block(typ, blen)
			if err != nil {
				return nil, 0, 0, err
			}
			if blen < 32 {
				return nil, 0, 0, corruptf("packet block of %d bytes", blen)
			}
			var id uint32
			if typ == ngBlockEPB {
				id = ng.u32(b[8:12])
			} else {
				id = uint32(ng.u16(b[8:10]))
			}
			caplen := ng.u32(b[20:24])
			if caplen > uint32(ng.maxPacket) {
				return nil, 0, 0, corruptf("capture length %d exceeds limit %d", caplen, ng.maxPacket)
			}
			if caplen > blen-32 {
				return nil, 0, 0, corruptf("capture length %d overruns its %d-byte block", caplen, blen)
			}
			if id >= uint32(len(ng.ifaces)) {
				return nil, 0, 0, corruptf("packet on undeclared interface %d", id)
			}
			ifc := &ng.ifaces[id]
			ts := ifc.ts(ng.u32(b[12:16]), ng.u32(b[16:20]))
			ng.lastTS = ts
			data := b[28 : 28+caplen]
			if err := ng.skip(blen); err != nil { // all buffered: data stays valid
				return nil, 0, 0, err
			}
			return data, ifc.link, ts, nil
		case ngBlockSPB:
			b, err := ng.block(typ, blen)
			if err != nil {
				return nil, 0, 0, err
			}
			if blen < 16 {
				return nil, 0, 0, corruptf("simple packet block of %d bytes", blen)
			}
			if len(ng.ifaces) == 0 {
				return nil, 0, 0, corruptf("simple packet before any interface")
			}
			ifc := &ng.ifaces[0]
			caplen := ng.u32(b[8:12]) // original length; captured is what fits
			if ifc.snap != 0 && caplen > ifc.snap {
				caplen = ifc.snap
			}
			if caplen > blen-16 {
				caplen = blen - 16
			}
			if caplen > uint32(ng.maxPacket) {
				return nil, 0, 0, corruptf("capture length %d exceeds limit %d", caplen, ng.maxPacket)
			}
			data := b[12 : 12+caplen]
			if err := ng.skip(blen); err != nil {
				return nil, 0, 0, err
			}
			// No timestamp in this block: reuse the last one so the
			// replay clock never goes back.
			return data, ifc.link, ng.lastTS, nil
		case ngBlockIDB:
			if err := ng.iface(blen); err != nil {
				return nil, 0, 0, err
			}
		case ngBlockSHB:
			if err := ng.section(blen); err != nil {
				return nil, 0, 0, err
			}
		default:
			// Statistics, name resolution, decryption secrets, custom:
			// nothing hotsniff uses.
			if err := ng.skip(blen); err != nil {
				return nil, 0, 0, err
			}
		}
	}
}
