package bpf

import (
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The record header layout must match struct rec_hdr in hotsniff.c; the
// generated type pins its size at compile time.
var _ [RecHdrSize]byte = [unsafe.Sizeof(hotsniffRecHdr{})]byte{}

// Field offsets in a record, taken from the generated type so they follow
// the C struct.
const (
	offTS      = unsafe.Offsetof(hotsniffRecHdr{}.Ts)
	offSaddr   = unsafe.Offsetof(hotsniffRecHdr{}.Saddr)
	offDaddr   = unsafe.Offsetof(hotsniffRecHdr{}.Daddr)
	offSport   = unsafe.Offsetof(hotsniffRecHdr{}.Sport)
	offDport   = unsafe.Offsetof(hotsniffRecHdr{}.Dport)
	offSeq     = unsafe.Offsetof(hotsniffRecHdr{}.Seq)
	offAck     = unsafe.Offsetof(hotsniffRecHdr{}.Ack)
	offLen     = unsafe.Offsetof(hotsniffRecHdr{}.Len)
	offMissing = unsafe.Offsetof(hotsniffRecHdr{}.Missing)
	offFlags   = unsafe.Offsetof(hotsniffRecHdr{}.Flags)
	offFamily  = unsafe.Offsetof(hotsniffRecHdr{}.Family)
	offHook    = unsafe.Offsetof(hotsniffRecHdr{}.Hook)
	offSample  = unsafe.Offsetof(hotsniffRecHdr{}.Sample)
)

// Bits of the record's sample byte (struct rec_hdr.sample).
const (
	sampleLevelMask = 0x7f
	sampleResumed   = 0x80
)

// ErrShortRecord is returned for a ring record shorter than its header says.
var ErrShortRecord = errors.New("short ring record")

// Record is one ring record: a TCP segment as the programs copied it. The
// capture layer above turns it into its Segment; the loader does not know
// that type, so it stays below the layer it serves.
type Record struct {
	TS          int64 // Unix ns
	Src, Dst    netip.AddrPort
	Seq, Ack    uint32
	Flags       uint8
	Payload     []byte
	Missing     uint32
	Resumed     bool
	SampleLevel uint8
	// KernelCounted: the programs counted this segment's reads already
	// (in-kernel counting).
	KernelCounted bool
	// Replies: what the programs do with the replies of this request
	// record's connection (Replies* constants).
	Replies uint8
	Hook    Hook
}

// ParseRecord fills seg from one ring record. monoOffset converts the
// record's CLOCK_MONOTONIC timestamp to Unix time (MonotonicOffset).
// seg.Payload aliases raw. It does not allocate.
func ParseRecord(raw []byte, monoOffset int64, seg *Record) (Hook, error) {
	if len(raw) < RecHdrSize {
		return 0, ErrShortRecord
	}
	le := binary.LittleEndian // the programs are built for bpfel hosts only
	n := le.Uint32(raw[offLen : offLen+4])
	if uint64(len(raw)-RecHdrSize) < uint64(n) {
		return 0, ErrShortRecord
	}
	seg.TS = int64(le.Uint64(raw[offTS:offTS+8])) + monoOffset
	var src, dst netip.Addr
	if raw[offFamily] == 6 {
		src = netip.AddrFrom16([16]byte(raw[offSaddr : offSaddr+16]))
		dst = netip.AddrFrom16([16]byte(raw[offDaddr : offDaddr+16]))
	} else {
		src = netip.AddrFrom4([4]byte(raw[offSaddr : offSaddr+4]))
		dst = netip.AddrFrom4([4]byte(raw[offDaddr : offDaddr+4]))
	}
	seg.Src = netip.AddrPortFrom(src, le.Uint16(raw[offSport:offSport+2]))
	seg.Dst = netip.AddrPortFrom(dst, le.Uint16(raw[offDport:offDport+2]))
	seg.Seq = le.Uint32(raw[offSeq : offSeq+4])
	seg.Ack = le.Uint32(raw[offAck : offAck+4])
	seg.Missing = le.Uint32(raw[offMissing : offMissing+4])
	seg.Flags = raw[offFlags]
	sm := raw[offSample]
	seg.SampleLevel = sm & sampleLevelMask
	seg.Resumed = sm&sampleResumed != 0
	// In-kernel counting: segments before a RecGap record were counted and
	// not copied on purpose, and it starts on a command boundary.
	kf := le.Uint32(raw[offKernel : offKernel+4])
	seg.Resumed = seg.Resumed || kf&RecGap != 0
	seg.KernelCounted = kf&RecCounted != 0
	seg.Replies = replyFraming(kf)
	end := RecHdrSize + int(n)
	seg.Payload = raw[RecHdrSize:end:end]
	seg.Hook = Hook(raw[offHook])
	return seg.Hook, nil
}

// monotonicNow is CLOCK_MONOTONIC (bpf_ktime_get_ns's clock) in ns. Go's
// own monotonic clock is the same clock, read through the vDSO; the
// system call unix.ClockGettime makes (the x/sys package has no vDSO path)
// is taken once, for the offset between them: the daemon reads the clock
// several times a sub-window, and on a guest where a system call costs
// tens of microseconds those calls were a visible part of an idle
// daemon's CPU.
func monotonicNow() int64 { return monoBase + int64(time.Since(monoT0)) }

var monoBase, monoT0 = func() (int64, time.Time) {
	// The pair read closest together of a few, so that the offset is off
	// by at most the time between two reads (about a microsecond).
	var base int64
	var t0 time.Time
	gap := time.Duration(math.MaxInt64)
	for range 5 {
		a := time.Now()
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail for this clock
		if d := time.Since(a); d < gap {
			gap, base, t0 = d, ts.Nano(), a.Add(d/2)
		}
	}
	return base, t0
}()

var offKernel = unsafe.Offsetof(hotsniffRecHdr{}.Pad2)

// RecordKernelFlags returns a record's kernel-counting flags (RecCounted,
// RecGap); 0 for a record shorter than its header or without kernel
// counting.
func RecordKernelFlags(raw []byte) uint32 {
	if len(raw) < RecHdrSize {
		return 0
	}
	return binary.LittleEndian.Uint32(raw[offKernel : offKernel+4])
}
