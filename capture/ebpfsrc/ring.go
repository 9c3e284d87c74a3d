package ebpfsrc

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring reads one BPF_MAP_TYPE_RINGBUF map (one CPU's) through its memory
// mapping.
//
// cilium/ebpf's ringbuf.Reader does the same, but it stores the consumer
// position after every record. The programs read that position on every
// reserve, so under load each record cost them a cache line pulled from the
// reader's CPU; this reader publishes it every batch bytes and whenever the
// ring runs empty. (Its blocking epoll wait was the other
// reason: see internal/fdpoll.)
//
// Layout (kernel/bpf/ringbuf.c): page 0 holds the consumer position and is
// mapped read-write; page 1 holds the producer position, followed by the
// data pages mapped twice back to back so that a record never wraps. Each
// record is an 8-byte header (length with busy and discard bits, page
// offset) and its data, padded to 8 bytes.
type ring struct {
	consMem, prodMem []byte
	cons, prod       *uintptr // into the mappings; accessed atomically
	data             []byte   // 2 × size
	mask             uintptr

	pos       uintptr // next record
	published uintptr // last value stored at *cons
	prodSeen  uintptr // last value loaded from *prod
	batch     uintptr
}

const (
	rbHdrSize    = 8
	rbBusyBit    = 1 << 31
	rbDiscardBit = 1 << 30
)

var (
	errEmpty = errors.New("ring empty")
	// errBusy: the next record is reserved but not yet submitted.
	errBusy = errors.New("record not committed yet")
)

func openRing(fd, size int) (*ring, error) {
	if size <= 0 || size&(size-1) != 0 {
		return nil, fmt.Errorf("map ring buffer: size %d is not a power of two", size)
	}
	page := os.Getpagesize()
	cons, err := unix.Mmap(fd, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map ring buffer consumer page: %w", err)
	}
	prod, err := unix.Mmap(fd, int64(page), page+2*size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		_ = unix.Munmap(cons)
		return nil, fmt.Errorf("map ring buffer data: %w", err)
	}
	r := &ring{
		consMem: cons,
		prodMem: prod,
		cons:    (*uintptr)(unsafe.Pointer(&cons[0])),
		prod:    (*uintptr)(unsafe.Pointer(&prod[0])),
		data:    prod[page:],
		mask:    uintptr(size - 1),
	}
	r.pos = atomic.LoadUintptr(r.cons)
	r.published = r.pos
	r.prodSeen = r.pos
	// Far below the programs' wakeup threshold (size/16), so the space the
	// reader holds back never delays a wakeup much; large enough that the
	// store happens once per hundreds of records.
	r.batch = uintptr(min(size/64, 256<<10))
	return r, nil
}

// next copies the next record's data into buf (grown as needed) and returns
// it. It reads only up to the producer position loaded last (see refresh):
// it returns errEmpty there, and errBusy when the next record is still
// being written; both publish the consumer position first.
func (r *ring) next(buf []byte) ([]byte, error) {
	off, n, err := r.head()
	if err != nil {
		return nil, err
	}
	r.pos += (rbHdrSize + n + 7) &^ 7
	start := off + rbHdrSize
	return append(buf[:0], r.data[start:start+n]...), nil
}

// peek returns the timestamp of the next record without consuming it, or
// the errors of next.
func (r *ring) peek() (uint64, error) {
	off, n, err := r.head()
	if err != nil {
		return 0, err
	}
	if n < 8 {
		return 0, nil // too short to be a record: next hands it on to be counted as malformed
	}
	// Records start 8-byte aligned, and the timestamp leads the record.
	return *(*uint64)(unsafe.Pointer(&r.data[off+rbHdrSize])), nil
}

// head finds the next committed record before prodSeen, stepping over
// discarded ones, and returns the offset of its header in data and its
// length.
func (r *ring) head() (off, n uintptr, err error) {
	for {
		if r.pos-r.published >= r.batch {
			r.publish()
		}
		if r.pos == r.prodSeen {
			r.publish()
			return 0, 0, errEmpty
		}
		off = r.pos & r.mask
		// The atomic load orders the data reads after the kernel's xchg
		// that clears the busy bit.
		hdr := atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.data[off])))
		if hdr&rbBusyBit != 0 {
			r.publish()
			return 0, 0, errBusy
		}
		n = uintptr(hdr &^ (rbBusyBit | rbDiscardBit))
		total := (rbHdrSize + n + 7) &^ 7
		if total > r.prodSeen-r.pos {
			return 0, 0, fmt.Errorf("read ring buffer: record of %d bytes at %d runs past the producer at %d", n, r.pos, r.prodSeen)
		}
		if hdr&rbDiscardBit == 0 {
			return off, n, nil
		}
		r.pos += total
	}
}

// refresh loads the producer position, so the window peek sees grows to
// what the programs have committed by now, and reports whether it holds
// anything.
func (r *ring) refresh() bool {
	r.prodSeen = atomic.LoadUintptr(r.prod)
	return r.pos != r.prodSeen
}

// available is the number of bytes written and not yet read.
func (r *ring) available() uint64 {
	return uint64(atomic.LoadUintptr(r.prod) - r.pos)
}

func (r *ring) publish() {
	if r.published != r.pos {
		atomic.StoreUintptr(r.cons, r.pos)
		r.published = r.pos
	}
}

func (r *ring) close() error {
	return errors.Join(unix.Munmap(r.prodMem), unix.Munmap(r.consMem))
}
