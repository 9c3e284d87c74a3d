package bpf

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// In-kernel counting (kcount.h): the programs parse whole request segments,
// add each read's weight to a per-CPU bucket counter of its sub-window, and
// copy to the ring only what user space needs. This file loads the command
// table and reads the counts.

// Limits of the in-kernel parser, mirrored from kcount.h.
const (
	// KernelBuckets is how many buckets the programs count, whatever the
	// detector's bucket count (at most this many): finer buckets keep
	// random traffic from locating them (detect.Detector.KernelCounts).
	KernelBuckets = 131072
	// kernelPart is the buckets of one kc_counts entry (a per-CPU map
	// value is at most 32 KiB); kernelParts entries make one sub-window.
	kernelPart  = 16384
	kernelParts = KernelBuckets / kernelPart
	// kernelGroup is the buckets per bit of kc_located.any.
	kernelGroup = KernelBuckets / 512
	// KernelMaxBucketCount is the most reads a kernel bucket counts on one
	// CPU in one sub-window (16-bit counts, saturating): kernel counting
	// needs every threshold's reads in a sub-window below it.
	KernelMaxBucketCount = 65535
	// KernelSlots is how many sub-windows of counts the programs keep: a
	// sub-window's counts can be read until KernelSlots-1 sub-windows
	// after it ended.
	KernelSlots = 8
	// KernelMaxSegment is the most request payload parsed per segment.
	KernelMaxSegment = 4096
	// KernelMaxKey is the longest key counted in the kernel.
	KernelMaxKey = 250
	// KernelMaxKeys is the most read keys counted per segment.
	KernelMaxKeys = 128
	// KernelMaxSteps is the most RESP elements or memcached tokens parsed
	// per segment (a -P 64 pipeline of GETs is 192).
	KernelMaxSteps = 1024
)

// FallbackReason is why a request segment was not counted in the kernel
// and was copied for user space to decode and count (kcount.h enum
// kc_reason).
type FallbackReason int

// Fallback reasons, as numbered in kcount.h.
const (
	FallbackSplit FallbackReason = iota
	FallbackLongKey
	FallbackInline
	FallbackMidstream
	FallbackUnknown
	FallbackComplex
	FallbackKeys
	FallbackLarge
	FallbackProto
	FallbackMalformed
	FallbackLoad
	NumFallbackReasons
)

var fallbackNames = [...]string{"split", "long_key", "inline", "midstream", "unknown", "complex", "keys", "large", "proto", "malformed", "load"}

// String is the reason's metric label.
func (r FallbackReason) String() string {
	if r >= 0 && int(r) < len(fallbackNames) {
		return fallbackNames[r]
	}
	return "other"
}

// Record flags under kernel counting (rec_hdr.pad2, Segment.Kernel).
const (
	// RecCounted: the record's reads were counted in the kernel buckets;
	// user space must not count them into stage 1 again.
	RecCounted = 1
	// RecGap: segments of the flow before this record were counted in the
	// kernel and not copied; the record starts on a command boundary.
	RecGap = 2
	// RecAnchor: a reply's header copied without its payload although
	// replies are off, so that user space can confirm the requests of a
	// connection joined mid-stream (the server acknowledges them).
	RecAnchor = 4
	// RecFramed (on a request record, with reply bytes counted in the
	// kernel): the programs frame the connection's replies and copy
	// exactly those answering the requests they copy. RecFramedFrom adds
	// that no request copied before this one is answered by a copied
	// reply (pairing starts here); RecUnframed, that the programs lost the
	// framing and copy no reply until a RecFramedFrom.
	RecFramed     = 8
	RecFramedFrom = 16
	RecUnframed   = 32
)

// Reply framing of a request record (Record.Replies), as
// capture.ReplyFraming numbers it.
const (
	RepliesAsCaptured uint8 = iota
	RepliesFramed
	RepliesFramedFrom
	RepliesUnframed
)

// replyFraming is the reply framing kernel flags kf say.
func replyFraming(kf uint32) uint8 {
	switch {
	case kf&RecUnframed != 0:
		return RepliesUnframed
	case kf&RecFramedFrom != 0:
		return RepliesFramedFrom
	case kf&RecFramed != 0:
		return RepliesFramed
	}
	return RepliesAsCaptured
}

// KernelCountConfig turns on in-kernel counting.
type KernelCountConfig struct {
	// SubWindow is the length of one sub-window of counts (the detector's
	// window / 8).
	SubWindow time.Duration
	// Buckets is the detector's bucket count (a power of two, at most
	// KernelBuckets). The programs count KernelBuckets buckets whatever it
	// is: the detector's bucket of a key is its kernel bucket's prefix.
	Buckets int
	// Protos is the protocol of each server port (decode.Proto values:
	// 1 redis, 2 memcache); ports of other protocols are copied as before.
	Protos map[uint16]uint8
	// Commands is the Redis command table (RedisCommand).
	Commands []RedisCommand
	// ReplyBytes turns on stage 1 of "hot by bandwidth" in the kernel, for
	// Redis ports (kcount.h, "Reply bytes"): the programs pair replies
	// with the read keys of the requests they counted and add each
	// reply's bytes, in 64-byte units rounded up, to its keys' buckets
	// (ReadKernelByteCounts). A prototype: an upper bound of what user
	// space attributes (a multi-key reply counts whole for each key).
	ReplyBytes bool
	// ReplyFlows is how many connections keep a reply queue (about 2 KiB
	// each); 0: DefaultReplyFlows. The least recently used is dropped.
	ReplyFlows int
	// ConnSets is how many sets of four connection states the programs
	// keep (kc_conns in kcount.h; a power of two); 0: 16 384. Tests make
	// it small to fill a set.
	ConnSets int
}

// DefaultReplyFlows is KernelCountConfig.ReplyFlows' default.
const DefaultReplyFlows = 16384

func (k *KernelCountConfig) validate() error {
	if k.SubWindow <= 0 {
		return errors.New("configure kernel counting: sub-window must be positive")
	}
	if k.Buckets <= 0 || k.Buckets > KernelBuckets || k.Buckets&(k.Buckets-1) != 0 {
		return fmt.Errorf("configure kernel counting: %d buckets: want a power of two up to %d", k.Buckets, KernelBuckets)
	}
	if k.ConnSets < 0 || k.ConnSets&(k.ConnSets-1) != 0 {
		return fmt.Errorf("configure kernel counting: %d connection sets: want a power of two", k.ConnSets)
	}
	return nil
}

// setKernelVars sets the programs' kernel-counting constants, and sizes
// their per-CPU arrays (kc_cpu in kcount.h) for cpus possible CPUs.
func setKernelVars(spec *ebpf.CollectionSpec, k *KernelCountConfig, cpus int) error {
	var on, bytes uint8
	var sub uint64 = 1
	for _, name := range []string{hotsniffMapKcScratch, hotsniffMapKcCounts, hotsniffMapKcBcounts} {
		spec.Maps[name].MaxEntries *= uint32(cpus)
	}
	if k != nil {
		on, sub = 1, uint64(k.SubWindow.Nanoseconds())
		if k.ConnSets != 0 {
			spec.Maps[hotsniffMapKcConns].MaxEntries = uint32(k.ConnSets)
		}
	} else {
		// Off: the programs never count; no 2 MiB of counts per CPU, nor
		// of connection states.
		spec.Maps[hotsniffMapKcCounts].MaxEntries = 1
		spec.Maps[hotsniffMapKcConns].MaxEntries = 1
		spec.Maps[hotsniffMapKcFlows].MaxEntries = 1
	}
	var key [8]byte
	if _, err := rand.Read(key[:]); err != nil {
		return fmt.Errorf("draw connection hash key: %w", err)
	}
	if err := spec.Variables[hotsniffVarKcConnKey].Set(binary.LittleEndian.Uint64(key[:])); err != nil {
		return fmt.Errorf("set kc_conn_key: %w", err)
	}
	if err := spec.Variables[hotsniffVarKcCsets].Set(spec.Maps[hotsniffMapKcConns].MaxEntries - 1); err != nil {
		return fmt.Errorf("set kc_csets: %w", err)
	}
	if k != nil && k.ReplyBytes {
		bytes = 1
		spec.Maps[hotsniffMapKcRflows].MaxEntries = uint32(cmp.Or(k.ReplyFlows, DefaultReplyFlows))
	} else {
		// No reply bytes: neither queues nor 2 MiB of byte counts per CPU.
		spec.Maps[hotsniffMapKcBcounts].MaxEntries = 1
		spec.Maps[hotsniffMapKcRflows].MaxEntries = 1
	}
	if err := spec.Variables[hotsniffVarKcOn].Set(on); err != nil {
		return fmt.Errorf("set kc_on: %w", err)
	}
	if err := spec.Variables[hotsniffVarKcBytes].Set(bytes); err != nil {
		return fmt.Errorf("set kc_bytes: %w", err)
	}
	if err := spec.Variables[hotsniffVarKcSubNs].Set(sub); err != nil {
		return fmt.Errorf("set kc_sub_ns: %w", err)
	}
	return nil
}

// Command kinds and session commands, as in kcount.h.
const (
	kcRead    = 1
	kcWrite   = 2
	kcNoKey   = 3
	kcSession = 4
	kcEcho    = 5
	kcComplex = 6

	kcPerElem = 1 // KC_CF_PERELEM
	kcDead    = 2 // KC_CF_DEAD

	kcSelect  = 1
	kcMulti   = 2
	kcExec    = 3
	kcDiscard = 4
	kcReset   = 5
)

// sessionCmds are copied whole: the stream's later commands depend on them
// (DB, transactions, RESP version, pub/sub mode).
var sessionCmds = map[string]uint8{
	"SELECT": kcSelect, "MULTI": kcMulti, "EXEC": kcExec, "DISCARD": kcDiscard, "RESET": kcReset,
	"SWAPDB": 0, "HELLO": 0, "SUBSCRIBE": 0, "PSUBSCRIBE": 0, "SSUBSCRIBE": 0, "MONITOR": 0,
}

// RedisCommand is one Redis command as the programs' table needs it: the
// decoder's key positions (decode/redis, from the server's COMMAND output)
// in the loader's terms. The caller derives them, so the loader stays below
// the decoders.
type RedisCommand struct {
	Name  string
	Arity int
	// Complex: the keys are not one index range (several key specs,
	// keywords, numkeys, SORT): copied and decoded in user space.
	Complex bool
	// HasKeys: the keys are args First..Last (negative: from the end) by
	// Step; Write marks writes; FieldWeighted reads count their fields.
	HasKeys           bool
	Write             bool
	First, Last, Step int
	FieldWeighted     bool
}

// kernelCommands builds the programs' command table.
func kernelCommands(cmds []RedisCommand) map[hotsniffKcName]hotsniffKcCmd {
	out := make(map[hotsniffKcName]hotsniffKcCmd)
	for _, c := range cmds {
		if strings.Contains(c.Name, "|") || len(c.Name) >= 16 {
			continue
		}
		cmd := hotsniffKcCmd{Arity: int16(c.Arity), Kind: kcNoKey, Step: 1}
		switch s, session := sessionCmds[c.Name]; {
		case session:
			cmd.Kind, cmd.Session = kcSession, s
		case c.Name == "ECHO":
			cmd.Kind = kcEcho
		case c.Complex:
			cmd.Kind = kcComplex
		case c.HasKeys:
			cmd.Kind = kcRead
			if c.Write {
				cmd.Kind = kcWrite
			}
			cmd.First, cmd.Last, cmd.Step = int16(c.First), int16(c.Last), int16(max(c.Step, 1))
			if c.FieldWeighted {
				cmd.Fieldw = 1
			}
		}
		switch c.Name {
		case "MGET":
			cmd.Flags = kcPerElem
		case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "MONITOR":
			cmd.Flags = kcDead
		}
		var n hotsniffKcName
		copy(n.N[:], c.Name)
		out[n] = cmd
	}
	return out
}

// initKernelMaps fills the command table and the port protocols.
func (c *Capture) initKernelMaps() error {
	var cmds []RedisCommand // counting off: the programs never read the table
	if c.cfg.KernelCount != nil {
		cmds = c.cfg.KernelCount.Commands
	}
	for n, cmd := range kernelCommands(cmds) {
		if err := c.kcCmds.Put(n, cmd); err != nil {
			return fmt.Errorf("load command table: %w", err)
		}
	}
	k := c.cfg.KernelCount
	if k == nil {
		return nil
	}
	for port, p := range k.Protos {
		if err := c.kcProto.Put(uint32(port), p); err != nil {
			return fmt.Errorf("set protocol of port %d: %w", port, err)
		}
	}
	return nil
}

// KernelCounting reports whether the programs count in the kernel.
func (c *Capture) KernelCounting() bool { return c.cfg.KernelCount != nil }

// KernelReplyBytes reports whether the programs count reply bytes too
// (KernelCountConfig.ReplyBytes).
func (c *Capture) KernelReplyBytes() bool {
	return c.cfg.KernelCount != nil && c.cfg.KernelCount.ReplyBytes
}

// KernelEpoch is the index of the current sub-window of kernel counts
// (CLOCK_MONOTONIC_COARSE / SubWindow). The programs read the same coarse
// clock (bpf_ktime_get_coarse_ns: the tick's time, no clock-source read,
// which on a virtual machine's kvm-clock cost as much as a key's count):
// a sub-window has ended for the reader exactly when it has for them.
func (c *Capture) KernelEpoch() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts) // cannot fail for this clock
	return ts.Nano() / c.cfg.KernelCount.SubWindow.Nanoseconds()
}

// KernelEpochBounds brackets KernelEpoch from the fine clock, without a
// system call: lo ≤ KernelEpoch ≤ hi. The coarse clock is the fine one as
// of the last tick, never ahead of it and at most KernelClockLag behind
// (ticks delayed past that only make lo wrong, and lo only says when to
// look again). When hi is an epoch whose counts were all read, no
// sub-window can have ended since.
func (c *Capture) KernelEpochBounds() (lo, hi int64) {
	mono, sub := monotonicNow(), c.cfg.KernelCount.SubWindow.Nanoseconds()
	return (mono - KernelClockLag.Nanoseconds()) / sub, mono / sub
}

// KernelClockLag is how far the programs' sub-window clock (the coarse
// clock, KernelEpoch) may run behind CLOCK_MONOTONIC: its resolution, a
// scheduler tick. A sub-window ended by the fine clock has ended for the
// programs and KernelEpoch only this much later.
var KernelClockLag = func() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil || ts.Nano() <= 0 {
		return 10 * time.Millisecond // HZ 100, the coarsest tick
	}
	return time.Duration(ts.Nano())
}()

// KernelEpochStart is the Unix time (ns) at which sub-window ep began.
func (c *Capture) KernelEpochStart(ep int64) int64 {
	return ep*c.cfg.KernelCount.SubWindow.Nanoseconds() + MonotonicOffset()
}

// ReadKernelCounts adds every CPU's bucket counts of sub-window ep into dst:
// len(dst) is KernelBuckets, or a smaller power of two to which the counts
// are folded (bucket b of KernelBuckets goes to b >> (16 - log2 len)).
// complete is false when ep has not ended yet or when it is too old to be
// read whole (the programs reuse its slot KernelSlots sub-windows later):
// the counts are then a lower bound, not evidence of low demand. Only the
// parts of the slot the programs wrote in ep are read. It does not
// allocate after the first call.
func (c *Capture) ReadKernelCounts(ep int64, dst []uint32) (complete bool, err error) {
	_, complete, err = c.ReadKernelCountsAt(ep, dst, nil)
	return complete, err
}

// ReadKernelCountsAt is ReadKernelCounts that also appends to idx the
// buckets of dst it made non-zero (zero before, counts added), so a caller
// that keeps dst zero between calls can clear and read just those.
func (c *Capture) ReadKernelCountsAt(ep int64, dst []uint32, idx []uint32) (_ []uint32, complete bool, err error) {
	if c.cfg.KernelCount == nil {
		return idx, false, errors.New("read kernel counts: kernel counting is off")
	}
	return c.ReadEndedKernelCountsAt(ep, c.KernelEpoch(), dst, idx)
}

// ReadEndedKernelCountsAt is ReadKernelCountsAt for a caller that has just
// read KernelEpoch (now): it takes no other reading of the coarse clock,
// which costs a system call. Whether the programs reused ep's slot before
// or while it is read is judged by KernelEpochBounds' upper bound, which
// can only take a slot for reused a little early.
func (c *Capture) ReadEndedKernelCountsAt(ep, now int64, dst []uint32, idx []uint32) (_ []uint32, complete bool, err error) {
	if c.cfg.KernelCount == nil {
		return idx, false, errors.New("read kernel counts: kernel counting is off")
	}
	if _, hi := c.KernelEpochBounds(); ep >= now || hi-ep >= KernelSlots-1 {
		return idx, false, nil
	}
	if idx, err = c.readKernelSlot(ep, dst, idx, c.kcReads()); err != nil {
		return idx, false, err
	}
	if _, hi := c.KernelEpochBounds(); hi-ep >= KernelSlots-1 {
		return idx, false, nil
	}
	return idx, true, nil
}

// kcCountSet is one set of per-CPU bucket counts the programs keep: its
// slots' offset in each CPU's kc_scratch entry, the memory of its parts,
// and the buffer its slots are read into. Read counts (kc_counts, slots)
// and reply bytes (kc_bcounts, bslots) share the layout and the reader.
type kcCountSet struct {
	slotsOff int
	parts    *ebpf.Memory
	raw      []byte
}

func (c *Capture) kcReads() kcCountSet {
	return kcCountSet{slotsOff: kcSlotsOff, parts: c.kcCountsMem, raw: c.kcRawSlots}
}

func (c *Capture) kcBytes() kcCountSet {
	return kcCountSet{slotsOff: kcBSlotsOff, parts: c.kcBCountsMem, raw: c.kcRawBSlots}
}

// ReadKernelByteCountsAt is ReadEndedKernelCountsAt for reply bytes
// (KernelCountConfig.ReplyBytes): it adds every CPU's byte counts of
// sub-window ep into dst, in 64-byte units (each reply's bytes rounded up
// for each of its read keys: an upper bound of user space's attribution),
// folded as ReadKernelCounts folds, and appends the buckets it made
// non-zero to idx. complete as for ReadEndedKernelCountsAt.
func (c *Capture) ReadKernelByteCountsAt(ep, now int64, dst []uint32, idx []uint32) (_ []uint32, complete bool, err error) {
	if c.cfg.KernelCount == nil || !c.cfg.KernelCount.ReplyBytes {
		return idx, false, errors.New("read kernel byte counts: reply bytes are not counted in the kernel")
	}
	if _, hi := c.KernelEpochBounds(); ep >= now || hi-ep >= KernelSlots-1 {
		return idx, false, nil
	}
	if idx, err = c.readKernelSlot(ep, dst, idx, c.kcBytes()); err != nil {
		return idx, false, err
	}
	if _, hi := c.KernelEpochBounds(); hi-ep >= KernelSlots-1 {
		return idx, false, nil
	}
	return idx, true, nil
}

// KernelByteUnit is the unit of the kernel's reply byte counts.
const KernelByteUnit = 64

// kernelSlots reads every CPU's slots (KernelSlots each, CPU by CPU) from
// the scratch map's memory into c.kcRawSlots.
func (c *Capture) kernelSlots() ([]hotsniffKcSlot, error) {
	return c.kernelSlotsOf(c.kcReads())
}

func (c *Capture) kernelSlotsOf(set kcCountSet) ([]hotsniffKcSlot, error) {
	cpus := len(set.raw) / (KernelSlots * kcSlotSize)
	for i := range cpus {
		b := set.raw[i*KernelSlots*kcSlotSize : (i+1)*KernelSlots*kcSlotSize]
		if _, err := c.kcScratchMem.ReadAt(b, int64(i*kcScratchSize+set.slotsOff)); err != nil {
			return nil, err
		}
	}
	return unsafe.Slice((*hotsniffKcSlot)(unsafe.Pointer(&set.raw[0])), len(set.raw)/kcSlotSize), nil
}

// KernelEpochSeen is the latest sub-window in which any CPU's programs
// counted a read, from their own slots (no system call): the programs take
// it from the coarse clock, which is one for all CPUs and never goes back,
// so KernelEpochSeen ≤ KernelEpoch. Under traffic it is the current
// sub-window from the first read counted after the clock's tick that began
// it, and stands in for the clock's system call; with no reads since, it is
// older (-1 before the first).
func (c *Capture) KernelEpochSeen() (int64, error) {
	if c.cfg.KernelCount == nil {
		return -1, errors.New("read kernel epoch: kernel counting is off")
	}
	all, err := c.kernelSlots()
	if err != nil {
		return -1, fmt.Errorf("read kernel epoch: %w", err)
	}
	seen := int64(-1)
	for i := range all {
		if s := &all[i]; s.Dirty != 0 {
			seen = max(seen, int64(s.Epoch))
		}
	}
	return seen, nil
}

// readKernelSlot adds the counts of ep's slot of set, as the programs left
// it, into dst (ReadKernelCountsAt, ReadKernelByteCountsAt).
func (c *Capture) readKernelSlot(ep int64, dst []uint32, idx []uint32, set kcCountSet) ([]uint32, error) {
	shift := 0
	for n := len(dst); n < KernelBuckets; n <<= 1 {
		if n == 0 {
			return idx, errors.New("read kernel counts: no buckets")
		}
		shift++
	}
	si := int(ep % KernelSlots)
	// The arrays as the programs lay them out: a CPU's slots in its
	// kc_scratch entry, and its parts at (cpu × KernelSlots + slot) ×
	// kernelParts + part; little-endian on every host that runs the
	// programs (bpfel). Read through the maps' memory: no system call, and
	// no copy of parts that had no reads.
	all, err := c.kernelSlotsOf(set)
	if err != nil {
		return idx, fmt.Errorf("read kernel counts: %w", err)
	}
	cpus := len(all) / KernelSlots
	var dirty uint64
	for i := range cpus {
		if s := &all[i*KernelSlots+si]; s.Epoch == uint64(ep) {
			dirty |= s.Dirty // other CPUs: no reads in ep (or reused: caught by the caller)
		}
	}
	part := (*hotsniffKcPart)(unsafe.Pointer(&c.kcRawParts[0]))
	for p := range kernelParts {
		if dirty&(1<<p) == 0 {
			continue
		}
		for i := range cpus {
			if s := &all[i*KernelSlots+si]; s.Epoch != uint64(ep) || s.Dirty&(1<<p) == 0 {
				continue
			}
			off := int64(((i*KernelSlots+si)*kernelParts + p) * kcPartSize)
			if _, err := set.parts.ReadAt(c.kcRawParts, off); err != nil {
				return idx, fmt.Errorf("read kernel counts: %w", err)
			}
			// Four counts a word: most words of a part are zero.
			base := p * kernelPart
			words := unsafe.Slice((*uint64)(unsafe.Pointer(&part.C[0])), kernelPart/4)
			for w, x := range words {
				for j := 0; x != 0; j, x = j+1, x>>16 {
					v := uint32(x & 0xffff)
					if v == 0 {
						continue
					}
					d := (base + 4*w + j) >> shift
					if dst[d] == 0 {
						idx = append(idx, uint32(d))
					}
					dst[d] = satAdd32(dst[d], v)
				}
			}
		}
	}
	return idx, nil
}

// Sizes of the per-CPU values (multiples of 8: no padding between CPUs).
const (
	kcSlotSize    = int(unsafe.Sizeof(hotsniffKcSlot{}))
	kcPartSize    = int(unsafe.Sizeof(hotsniffKcPart{}))
	kcScratchSize = int(unsafe.Sizeof(hotsniffKcState{}))
	kcSlotsOff    = int(unsafe.Offsetof(hotsniffKcState{}.Slots))
	kcBSlotsOff   = int(unsafe.Offsetof(hotsniffKcState{}.Bslots))
	kcStatsOff    = int(unsafe.Offsetof(hotsniffKcState{}.Stats))
	kcStatsSize   = int(unsafe.Sizeof(hotsniffKcStats{}))
)

func satAdd32(a, b uint32) uint32 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint32(0)
}

// SetLocated writes the located buckets (a bitmap of KernelBuckets bits,
// the kernel's buckets): reads whose bucket is located are copied to user
// space.
func (c *Capture) SetLocated(bits []uint64) error {
	last := c.kcLocatedLast.Bits[:]
	if len(bits) <= len(last) && slices.Equal(bits, last[:len(bits)]) && !slices.ContainsFunc(last[len(bits):], func(w uint64) bool { return w != 0 }) {
		return nil // unchanged, as in most sub-windows
	}
	var l hotsniffKcLocated
	copy(l.Bits[:], bits)
	l.Any = locatedSummary(&l.Bits)
	// Through the map's memory, only the words that changed (almost
	// always none: a Put copied all 16 KiB each sub-window, with a system
	// call). Buckets first, then the summary: a program that finds a
	// summary bit finds its bucket bits already set, and one that finds
	// a bucket cleared before its summary bit only reads a line more.
	if err := c.writeLocated(l.Bits[:], c.kcLocatedLast.Bits[:], kcLocatedBitsOff); err != nil {
		return err
	}
	if err := c.writeLocated(l.Any[:], c.kcLocatedLast.Any[:], 0); err != nil {
		return err
	}
	return nil
}

// locatedSummary is the summary the programs look at first: a bit per
// group of kernelGroup buckets that holds a located one.
func locatedSummary(bits *[KernelBuckets / 64]uint64) (sum [8]uint64) {
	for i, w := range bits {
		if w != 0 {
			g := i * 64 / kernelGroup
			sum[g/64] |= 1 << (g % 64)
		}
	}
	return sum
}

// kcLocatedBitsOff is where kc_located's bucket bits start, after the
// summary.
const kcLocatedBitsOff = int64(unsafe.Offsetof(hotsniffKcLocated{}.Bits))

// writeLocated writes the words of now that differ from was (what the map
// holds) at off, and updates was.
func (c *Capture) writeLocated(now, was []uint64, off int64) error {
	for i, w := range now {
		if w == was[i] {
			continue
		}
		if _, err := c.kcLocatedMem.WriteAt(unsafe.Slice((*byte)(unsafe.Pointer(&now[i])), 8), off+int64(i)*8); err != nil {
			return fmt.Errorf("set located buckets: %w", err)
		}
		was[i] = w
	}
	return nil
}

// SetHot adds (on) or removes an identity hash of a hot key: writes to it
// are copied to user space (when its bucket is located too).
func (c *Capture) SetHot(h uint64, on bool) error {
	var err error
	if on {
		err = c.kcHot.Put(h, uint8(1))
	} else if err = c.kcHot.Delete(h); errors.Is(err, ebpf.ErrKeyNotExist) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("set hot key: %w", err)
	}
	return nil
}

// KernelStats are the kernel-counting counters, summed over CPUs.
type KernelStats struct {
	Fallback    [NumFallbackReasons]uint64 // request segments copied uncounted, by reason
	Segments    uint64                     // request segments looked at
	Counted     uint64                     // parsed whole and counted
	Skipped     uint64                     // of those, not copied
	Requests    uint64                     // commands counted
	Keys        uint64                     // keys counted (reads and writes)
	Reads       uint64                     // weighted reads added to buckets
	CopyLocated uint64                     // counted segments copied for a read in a located bucket
	CopyHot     uint64                     // ...for a write to a hot key
	CopySession uint64                     // ...for a session command
	CopyReport  uint64                     // ...for an ECHO (absorbed-demand report)
	Duplicate   uint64                     // request segments seen again after they were counted (cgroup's second view, retransmissions), not copied

	// Reply bytes (KernelCountConfig.ReplyBytes).
	QueuedCommands uint64                   // commands pushed on reply queues
	QueueLost      uint64                   // request segments not counted whole: replies unpaired until a quiet point
	QueueFull      uint64                   // request segments whose commands did not fit the queue
	QueueWait      uint64                   // counted segments not pushed, waiting for a quiet point
	QueueResync    uint64                   // fresh starts after a quiet point
	ReplySegments  uint64                   // reply segments with payload looked at
	ReplyBytes     uint64                   // their payload bytes
	ReplyDuplicate uint64                   // reply bytes seen again, not counted again
	ReplyReplies   uint64                   // replies attributed to read keys
	ReplyAttr      uint64                   // their bytes, each reply once
	ReplyUnits     uint64                   // KernelByteUnit units added to byte buckets
	Unattributed   [NumUnattrReasons]uint64 // reply bytes attributed to no key, by reason

	// Reply records: the replies of the requests copied, copied too.
	ReplyRecords     uint64 // reply records emitted
	ReplyRecordBytes uint64 // their payload bytes
	ReplyElided      uint64 // bulk payload bytes of copied replies left out (in user space's skip)
	ReplyCopyFailed  uint64 // copied replies not delivered whole: the connection unpaired until the next RecFramedFrom
	RequestsUnsent   uint64 // copied request records of framed connections not delivered (sampling, ring)
}

// UnattrReason is why reply bytes were attributed to no key (kcount.h
// enum kc_unattr).
type UnattrReason int

// Reasons, as numbered in kcount.h.
const (
	UnattrNoKey UnattrReason = iota
	UnattrPush
	UnattrUnsynced
	UnattrDead
	UnattrBad
	UnattrDepth
	UnattrUnpaired
	UnattrGap
	UnattrSteps
	UnattrNoFlow
	UnattrLoad
	UnattrRace
	NumUnattrReasons
)

var unattrNames = [...]string{"nokey", "push", "unsynced", "dead", "bad", "depth", "unpaired", "gap", "steps", "noflow", "load", "race"}

// String is the reason's metric label.
func (r UnattrReason) String() string {
	if r >= 0 && int(r) < len(unattrNames) {
		return unattrNames[r]
	}
	return "other"
}

// KernelStats reads the kernel-counting counters.
func (c *Capture) KernelStats() (KernelStats, error) {
	var st KernelStats
	per := make([]hotsniffKcStats, c.kcScratch.MaxEntries()) // one per CPU, in its kc_scratch entry
	mm, err := c.kcScratch.Memory()
	for i := 0; err == nil && i < len(per); i++ {
		_, err = mm.ReadAt(unsafe.Slice((*byte)(unsafe.Pointer(&per[i])), kcStatsSize), int64(i*kcScratchSize+kcStatsOff))
	}
	if err != nil {
		return st, fmt.Errorf("read kernel counting stats: %w", err)
	}
	for i := range per {
		p := &per[i]
		for r := range st.Fallback {
			st.Fallback[r] += p.Fallback[r]
		}
		st.Segments += p.Segments
		st.Counted += p.Counted
		st.Skipped += p.Skipped
		st.Requests += p.Requests
		st.Keys += p.Keys
		st.Reads += p.Reads
		st.CopyLocated += p.CopyLocated
		st.CopyHot += p.CopyHot
		st.CopySession += p.CopySession
		st.CopyReport += p.CopyReport
		st.Duplicate += p.Duplicate
		st.QueuedCommands += p.RqCmds
		st.QueueLost += p.RqLost
		st.QueueFull += p.RqFull
		st.QueueWait += p.RqWait
		st.QueueResync += p.RqResync
		st.ReplySegments += p.Rsegments
		st.ReplyBytes += p.Rbytes
		st.ReplyDuplicate += p.Rdup
		st.ReplyReplies += p.Rreplies
		st.ReplyAttr += p.Rattr
		st.ReplyUnits += p.Runits
		for r := range st.Unattributed {
			st.Unattributed[r] += p.Unattr[r]
		}
		st.ReplyRecords += p.RcRecords
		st.ReplyRecordBytes += p.RcBytes
		st.ReplyElided += p.RcElided
		st.ReplyCopyFailed += p.RcFail
		st.RequestsUnsent += p.RcUnsent
	}
	return st, nil
}
