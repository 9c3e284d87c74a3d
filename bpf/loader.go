// Package bpf holds hotsniff's in-kernel capture programs (hotsniff.c, built
// with bpf2go into hotsniff_bpfel.go and hotsniff_bpfel.o) and the loader that
// attaches them to interfaces.
//
// One Capture owns a ring buffer per CPU and one port map, shared by every
// interface; each attached interface gets its own copy of the programs and of
// the per-CPU counters, so packets and drops are reported per interface.
package bpf

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
)

// Mode is how an interface is captured.
type Mode string

// Modes. ModeAuto resolves to ModeXDP on physical NICs and ModeTC elsewhere
// (veth, loopback, tunnels), where generic XDP is slow and misses cloned skbs.
const (
	ModeAuto     Mode = "auto"
	ModeXDP      Mode = "xdp"
	ModeTC       Mode = "tc"
	ModeAFPacket Mode = "afpacket"
	// ModeCgroup attaches cgroup_skb programs to the cgroup v2 root
	// instead of interfaces (cgroup.go).
	ModeCgroup Mode = "cgroup"
)

// ParseMode validates a --mode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeAuto, ModeXDP, ModeTC, ModeAFPacket, ModeCgroup:
		return m, nil
	}
	return "", fmt.Errorf("parse mode %q: want auto, cgroup, xdp, tc or afpacket", s)
}

// Hook is the program a record or counter comes from.
type Hook uint8

// Hooks, as numbered in hotsniff.c (enum hook).
const (
	HookXDP Hook = iota
	HookTCIngress
	HookTCEgress
	HookCgroupIngress
	HookCgroupEgress
	numHooks
)

var hookNames = [...]string{"xdp", "tc_ingress", "tc_egress", "cgroup_ingress", "cgroup_egress"}

func (h Hook) String() string {
	if int(h) < len(hookNames) {
		return hookNames[h]
	}
	return "unknown"
}

// Limits of the copy, mirrored from hotsniff.c.
const (
	// Chunk is the most payload one ring record carries.
	Chunk = 4096
	// MaxCopyLimit is the largest MaxCopy the programs honour.
	MaxCopyLimit = Chunk * 64
	// RecHdrSize is the size of the header preceding each record's payload.
	RecHdrSize = 72
)

// WakeupInterval is the least time between two wakeups of the reader by the
// programs: under load the reader is woken about this often and finds a
// batch; a record after a quiet spell wakes it at once.
const WakeupInterval = 10 * time.Millisecond

// PollInterval is how often a reader looks at the ring when the programs
// did not wake it. Only the records of the last WakeupInterval before
// traffic stops wait for it.
const PollInterval = 100 * time.Millisecond

// Config configures a Capture. Zero values take the defaults.
type Config struct {
	// Ports are the TCP server ports to capture (either direction).
	Ports []uint16
	// RingSize is the size in bytes of each online CPU's ring buffer,
	// rounded up to a power of two; by default 2 MiB, lowered on hosts
	// with many CPUs so that all rings together stay within 64 MiB (at
	// least 512 KiB each). CPUs offline at Open get a ring of one page.
	// It bounds the kernel memory used and how long a burst on one CPU
	// user space can fall behind before records are dropped.
	RingSize int
	// MaxCopy is the most payload bytes copied from one packet (a GRO/GSO
	// super-packet may be 64 KiB or more); the rest is reported as
	// Segment.Missing and counted as truncated. Default and maximum
	// MaxCopyLimit (256 KiB).
	MaxCopy uint32
	// Replies copies the payload of server-to-client segments too. Off by
	// default: hot-key detection reads requests only and replies carry most
	// of the bytes (every value), so the programs then emit a reply only
	// when it carries SYN, FIN or RST, and count its payload (ReplyBytes).
	Replies bool
	// ReplyHeads, when Replies is off, copies only what reply parsing needs
	// instead of nothing: from each reply segment at most ReplyCopy bytes,
	// taken after the part of a value user space said it will skip
	// (SetReplySkip); the rest is reported as Missing and counted in
	// ReplyBytes. User space reads reply headers and sizes from that and
	// skips values by sequence arithmetic.
	ReplyHeads bool
	// ReplyCopy is the most bytes a reply segment yields with ReplyHeads
	// (default DefaultReplyCopy).
	ReplyCopy uint32
	// Decap names the overlay tunnels followed to their inner segment on
	// interfaces (nil: none; see DecapTable); SetDecap changes it.
	Decap *DecapTable
	// Logger receives one line per attachment; default slog.Default().
	Logger *slog.Logger
	// KernelCount, when set, counts reads in the kernel and copies only
	// what user space needs (kcount.go); nil copies every request.
	KernelCount *KernelCountConfig
}

// Ring sizes are small on purpose. The programs' cost is mostly the record
// write, and a record's cache lines cost what the CPU pays to own them: in a
// 32 MiB ring they were last touched a lap (seconds) earlier and come from
// DRAM; in a small ring, from the cache where the reader left them. On the
// development VM (AMD EPYC guest) a 16-GET segment cost 1341–1754 ns per
// run with one shared 32 MiB ring, 946 with 8, 672–745 with 1–4 MiB. 2 MiB
// holds ~60 ms of one CPU's requests at 600k GETs/s pipelined; the programs
// wake the reader at a sixteenth of that.
const (
	defaultRingSize = 2 << 20
	minRingSize     = 512 << 10
	maxRingsTotal   = 64 << 20
)

// perCPURingSize is the default ring size for a host with cpus CPUs.
func perCPURingSize(cpus int) int {
	size := defaultRingSize
	for size > minRingSize && size*cpus > maxRingsTotal {
		size /= 2
	}
	return size
}

// Capture is a loaded set of capture programs with its attachments.
type Capture struct {
	cfg   Config
	log   *slog.Logger
	spec  *ebpf.CollectionSpec
	rings *ebpf.Map   // per CPU: the ring buffer of that CPU
	ring  []*ebpf.Map // rings' values, by CPU
	// fullRings counts the rings of RingSize bytes (CPUs online at Open).
	fullRings int
	ports     *ebpf.Map
	wake      *ebpf.Map // shared wakeup state, so attachments do not each wake the reader
	sampling  *ebpf.Map // shared flow sampling state (sampling.go)
	sampled   *ebpf.Map // per CPU: segments of sampled-out flows
	samp      samplingReads
	skips     *ebpf.Map // reply ranges user space skips (ReplyHeads)
	// Kernel counting (kcount.go), shared by every attachment.
	kcMaps                                      map[string]*ebpf.Map
	kcCounts, kcLocated, kcHot, kcCmds, kcProto *ebpf.Map
	kcScratch                                   *ebpf.Map
	kcRawSlots, kcRawParts                      []byte // every CPU's slots; one part (readKernelSlot)
	kcScratchMem, kcCountsMem, kcLocatedMem     *ebpf.Memory
	kcRawBSlots                                 []byte            // every CPU's byte-count slots (ReplyBytes)
	kcBCountsMem                                *ebpf.Memory      // kc_bcounts (ReplyBytes)
	kcLocatedLast                               hotsniffKcLocated // what kcLocatedMem holds
	decap                                       *ebpf.Map         // tunnels followed (decap.go)

	mu     sync.Mutex
	ifaces []*Attachment
}

// Attachment is one interface captured by a Capture.
type Attachment struct {
	Iface string
	Mode  Mode // ModeXDP or ModeTC, never ModeAuto
	// XDPFlags says how XDP was attached (driver or generic); empty for TC.
	XDPMode string
	// TCX is true when TC programs are bpf_link (TCX) attachments, false
	// for the legacy clsact filters.
	TCX bool

	objs    hotsniffObjects
	links   []link.Link
	filters []netlink.Filter // legacy clsact filters, removed on Close
}

// Open loads the shared maps and checks that the programs load, so a missing
// capability or an old kernel shows here (the caller then falls back to
// AF_PACKET) rather than at the first Attach.
func Open(cfg Config) (*Capture, error) {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("count possible CPUs: %w", err)
	}
	online := onlineCPUs(cpus)
	nOnline := 0
	for _, on := range online {
		if on {
			nOnline++
		}
	}
	if cfg.RingSize <= 0 {
		cfg.RingSize = perCPURingSize(max(nOnline, 1))
	}
	cfg.RingSize = roundPow2(max(cfg.RingSize, os.Getpagesize()))
	if cfg.MaxCopy == 0 || cfg.MaxCopy > MaxCopyLimit {
		cfg.MaxCopy = MaxCopyLimit
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	spec, err := loadHotsniff()
	if err != nil {
		return nil, fmt.Errorf("load bpf spec: %w", err)
	}
	spec.Maps[hotsniffMapRings].MaxEntries = uint32(cpus)
	spec.Maps[hotsniffMapStats].MaxEntries = uint32(cpus * int(numHooks)) // CPU × hook
	spec.Maps[hotsniffMapRings].InnerMap.MaxEntries = uint32(cfg.RingSize)
	if err := spec.Variables[hotsniffVarMaxCopy].Set(cfg.MaxCopy); err != nil {
		return nil, fmt.Errorf("set max_copy: %w", err)
	}
	// Also wake the reader when a sixteenth of a ring is used, in case
	// a burst fills it faster than WakeupInterval.
	if err := spec.Variables[hotsniffVarWakeupBytes].Set(uint64(cfg.RingSize / 16)); err != nil {
		return nil, fmt.Errorf("set wakeup_bytes: %w", err)
	}
	if err := spec.Variables[hotsniffVarWakeupNs].Set(uint64(WakeupInterval.Nanoseconds())); err != nil {
		return nil, fmt.Errorf("set wakeup_ns: %w", err)
	}
	var replies uint8
	switch {
	case cfg.Replies:
		replies = 1
	case cfg.ReplyHeads:
		replies = 2
	}
	if err := spec.Variables[hotsniffVarReplies].Set(replies); err != nil {
		return nil, fmt.Errorf("set replies: %w", err)
	}
	if cfg.ReplyCopy == 0 {
		cfg.ReplyCopy = DefaultReplyCopy
	}
	cfg.ReplyCopy = min(cfg.ReplyCopy, cfg.MaxCopy)
	if err := spec.Variables[hotsniffVarReplyCopy].Set(cfg.ReplyCopy); err != nil {
		return nil, fmt.Errorf("set reply_copy: %w", err)
	}
	if cfg.KernelCount != nil {
		if err := cfg.KernelCount.validate(); err != nil {
			return nil, err
		}
	}
	if err := setKernelVars(spec, cfg.KernelCount, cpus); err != nil {
		return nil, err
	}
	c := &Capture{cfg: cfg, log: cfg.Logger.With("component", "bpf"), spec: spec, fullRings: nOnline}
	if err := c.createMaps(online); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.SetPorts(cfg.Ports); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.SetDecap(cfg.Decap); err != nil {
		c.Close()
		return nil, err
	}
	// Load once to surface verifier or permission errors now.
	var probe hotsniffObjects
	if err := c.load(&probe, false); err != nil {
		c.Close()
		return nil, err
	}
	probe.Close()
	return c, nil
}

// createMaps creates the maps every attachment shares: a ring buffer per
// possible CPU and the map of them, the ports and the wakeup state. CPUs
// that are offline now get a ring of one page: many VMs declare far more
// possible CPUs than they run (for hot-add), and full rings for all of them
// would hold memory for nothing. A CPU brought online later still has a
// ring to write to; what it cannot hold is counted as ringbuf_full.
func (c *Capture) createMaps(online []bool) error {
	outer := c.spec.Maps[hotsniffMapRings]
	for cpu, on := range online {
		inner := outer.InnerMap.Copy()
		if !on {
			inner.MaxEntries = uint32(os.Getpagesize())
		}
		m, err := ebpf.NewMap(inner)
		if err != nil {
			return fmt.Errorf("create ring buffer of CPU %d: %w", cpu, err)
		}
		c.ring = append(c.ring, m)
	}
	outer = outer.Copy()
	for cpu, m := range c.ring {
		outer.Contents = append(outer.Contents, ebpf.MapKV{Key: uint32(cpu), Value: m})
	}
	var err error
	if c.rings, err = ebpf.NewMap(outer); err != nil {
		return fmt.Errorf("create map of ring buffers: %w", err)
	}
	if c.ports, err = ebpf.NewMap(c.spec.Maps[hotsniffMapPorts]); err != nil {
		return fmt.Errorf("create ports map: %w", err)
	}
	if c.wake, err = ebpf.NewMap(c.spec.Maps[hotsniffMapWake]); err != nil {
		return fmt.Errorf("create wakeup map: %w", err)
	}
	if c.sampling, err = ebpf.NewMap(c.spec.Maps[hotsniffMapSampling]); err != nil {
		return fmt.Errorf("create sampling map: %w", err)
	}
	if err := initSampling(c.sampling); err != nil {
		return err
	}
	if c.samp.mem, err = c.sampling.Memory(); err != nil {
		return fmt.Errorf("map sampling state: %w", err)
	}
	if c.sampled, err = ebpf.NewMap(c.spec.Maps[hotsniffMapSampledOut]); err != nil {
		return fmt.Errorf("create sampled-out map: %w", err)
	}
	if c.skips, err = ebpf.NewMap(c.spec.Maps[hotsniffMapReplySkips]); err != nil {
		return fmt.Errorf("create reply skips map: %w", err)
	}
	if c.decap, err = ebpf.NewMap(c.spec.Maps[hotsniffMapDecapCfg]); err != nil {
		return fmt.Errorf("create decap map: %w", err)
	}
	c.kcMaps = make(map[string]*ebpf.Map)
	for _, name := range []string{hotsniffMapKcCounts, hotsniffMapKcLocated, hotsniffMapKcHot, hotsniffMapKcCmds,
		hotsniffMapKcProto, hotsniffMapKcConns, hotsniffMapKcFlows, hotsniffMapKcScratch, hotsniffMapKcBcounts, hotsniffMapKcRflows, hotsniffMapKcRzero} {
		m, err := ebpf.NewMap(c.spec.Maps[name])
		if err != nil {
			return fmt.Errorf("create map %s: %w", name, err)
		}
		c.kcMaps[name] = m
	}
	c.kcCounts, c.kcLocated, c.kcHot = c.kcMaps[hotsniffMapKcCounts], c.kcMaps[hotsniffMapKcLocated], c.kcMaps[hotsniffMapKcHot]
	c.kcScratch = c.kcMaps[hotsniffMapKcScratch]
	if c.cfg.KernelCount != nil {
		cpus, err := ebpf.PossibleCPU()
		if err != nil {
			return fmt.Errorf("count possible CPUs: %w", err)
		}
		c.kcRawSlots, c.kcRawParts = make([]byte, cpus*KernelSlots*kcSlotSize), make([]byte, kcPartSize)
		if c.kcScratchMem, err = c.kcScratch.Memory(); err != nil {
			return fmt.Errorf("map kernel slots: %w", err)
		}
		if c.kcCountsMem, err = c.kcCounts.Memory(); err != nil {
			return fmt.Errorf("map kernel counts: %w", err)
		}
		if c.kcLocatedMem, err = c.kcLocated.Memory(); err != nil {
			return fmt.Errorf("map located buckets: %w", err)
		}
		if c.cfg.KernelCount.ReplyBytes {
			c.kcRawBSlots = make([]byte, cpus*KernelSlots*kcSlotSize)
			if c.kcBCountsMem, err = c.kcMaps[hotsniffMapKcBcounts].Memory(); err != nil {
				return fmt.Errorf("map kernel byte counts: %w", err)
			}
		}
	}
	c.kcCmds, c.kcProto = c.kcMaps[hotsniffMapKcCmds], c.kcMaps[hotsniffMapKcProto]
	return c.initKernelMaps()
}

// onlineCPUs reports which of the possible CPUs are online, from
// /sys/devices/system/cpu/online ("0-3,8-11"). Where that cannot be read,
// all are taken as online. A variable so tests can take CPUs offline.
var onlineCPUs = func(possible int) []bool {
	online := make([]bool, possible)
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err == nil {
		err = parseCPUList(strings.TrimSpace(string(b)), online)
	}
	if err != nil {
		for i := range online {
			online[i] = true
		}
	}
	return online
}

// parseCPUList marks the CPUs of a kernel CPU list ("0-3,8,10-11") in set;
// CPUs beyond set's length are ignored.
func parseCPUList(list string, set []bool) error {
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil {
			return fmt.Errorf("parse CPU list %q: %w", list, err)
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil {
				return fmt.Errorf("parse CPU list %q: %w", list, err)
			}
		}
		for cpu := first; cpu <= last && cpu < len(set); cpu++ {
			if cpu >= 0 {
				set[cpu] = true
			}
		}
	}
	return nil
}

func roundPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

func (c *Capture) load(objs *hotsniffObjects, rawIP bool) error {
	return c.loadInto(objs, rawIP)
}

// loadInto loads the programs and maps that to (a *hotsniffObjects, or a
// struct naming a subset of them) asks for, sharing c's rings, port map,
// wakeup state and reply skips, so every attachment feeds the same reader.
// rawIP is for devices without a link-layer header.
func (c *Capture) loadInto(to any, rawIP bool) error {
	spec := c.spec.Copy()
	var raw uint8
	if rawIP {
		raw = 1
	}
	if err := spec.Variables[hotsniffVarRawIp].Set(raw); err != nil {
		return fmt.Errorf("set raw_ip: %w", err)
	}
	repl := map[string]*ebpf.Map{
		hotsniffMapRings:      c.rings,
		hotsniffMapPorts:      c.ports,
		hotsniffMapWake:       c.wake,
		hotsniffMapSampling:   c.sampling,
		hotsniffMapSampledOut: c.sampled,
		hotsniffMapReplySkips: c.skips,
		hotsniffMapDecapCfg:   c.decap,
	}
	for name, m := range c.kcMaps {
		repl[name] = m
	}
	err := spec.LoadAndAssign(to, &ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			// The last lines say why; the full log is thousands of lines.
			return fmt.Errorf("load bpf programs: %w", ve)
		}
		return fmt.Errorf("load bpf programs: %w", err)
	}
	return nil
}

// Rings are the ring buffers the attachments write to, one per possible
// CPU: RingSize bytes for the CPUs online at Open, a page for the others.
// Records within one ring are in the order they were written; across
// rings, their timestamps order them.
func (c *Capture) Rings() []*ebpf.Map { return c.ring }

// MaxCopy is the effective per-packet copy limit.
func (c *Capture) MaxCopy() uint32 { return c.cfg.MaxCopy }

// DefaultReplyCopy is the default Config.ReplyCopy: a pipeline of 16
// replies of values up to ~250 bytes fits whole, and each segment of a large
// value costs one record of at most 4 KiB (one ring CHUNK).
const DefaultReplyCopy = 4096

// ReplyCopy is the effective Config.ReplyCopy.
func (c *Capture) ReplyCopy() uint32 { return c.cfg.ReplyCopy }

// ReplyHeads reports whether the programs copy only reply heads.
func (c *Capture) ReplyHeads() bool { return c.cfg.ReplyHeads && !c.cfg.Replies }

// CopiesReplies reports whether the programs copy replies whole.
func (c *Capture) CopiesReplies() bool { return c.cfg.Replies }

// SetReplySkip tells the programs that user space does not need the reply
// bytes of the connection server→client with sequence numbers in [start,
// end) (serial arithmetic): the rest of a value whose header it has read.
// They are then dropped in the kernel instead of copied.
func (c *Capture) SetReplySkip(server, client netip.AddrPort, start, end uint32) error {
	var k hotsniffSkipKey
	a, b := server.Addr().Unmap(), client.Addr().Unmap()
	if a.Is4() {
		v := a.As4()
		copy(k.Saddr[:], v[:])
	} else {
		k.Saddr = a.As16()
	}
	if b.Is4() {
		v := b.As4()
		copy(k.Daddr[:], v[:])
	} else {
		k.Daddr = b.As16()
	}
	k.Sport, k.Dport = server.Port(), client.Port()
	if err := c.skips.Put(&k, &hotsniffSkipRange{Start: start, End: end}); err != nil {
		return fmt.Errorf("update reply skips map: %w", err)
	}
	return nil
}

// SetPorts replaces the captured ports; it takes effect for the next packet.
func (c *Capture) SetPorts(ports []uint16) error {
	var bm hotsniffPortBitmap
	for _, p := range ports {
		bm.Bits[p>>3] |= 1 << (p & 7)
	}
	if err := c.ports.Put(uint32(0), &bm); err != nil {
		return fmt.Errorf("update ports map: %w", err)
	}
	return nil
}

// Attach captures iface in mode (ModeAuto, ModeXDP or ModeTC) in both
// directions: XDP for ingress plus TC for egress, or TC for both. On loopback
// only TC ingress is used: every loopback packet passes egress then ingress,
// and one copy is enough.
func (c *Capture) Attach(iface string, mode Mode) (*Attachment, error) {
	l, err := netlink.LinkByName(iface)
	if err != nil {
		return nil, fmt.Errorf("find interface %s: %w", iface, err)
	}
	attrs := l.Attrs()
	loopback := attrs.EncapType == "loopback"
	if mode == ModeAuto {
		mode = ModeTC
		if Physical(iface) {
			mode = ModeXDP
		}
	}
	if mode != ModeXDP && mode != ModeTC {
		return nil, fmt.Errorf("attach %s: mode %s is not an eBPF mode", iface, mode)
	}
	a := &Attachment{Iface: iface, Mode: mode}
	if err := c.load(&a.objs, attrs.EncapType == "none"); err != nil {
		return nil, err
	}
	fail := func(err error) (*Attachment, error) {
		a.close()
		return nil, err
	}
	if err := removeStaleFilters(l, c.log); err != nil {
		c.log.Warn("remove stale tc filters", "iface", iface, "err", err)
	}
	if mode == ModeXDP {
		if err := a.attachXDP(attrs.Index); err != nil {
			return fail(err)
		}
	} else if err := a.attachTC(l, ebpf.AttachTCXIngress, a.objs.HotsniffTcIngress); err != nil {
		return fail(err)
	}
	if !loopback {
		if err := a.attachTC(l, ebpf.AttachTCXEgress, a.objs.HotsniffTcEgress); err != nil {
			return fail(err)
		}
	}
	c.log.Info("capture attached", "iface", iface, "mode", mode, "xdp", a.XDPMode, "tcx", a.TCX,
		"rings", c.fullRings, "ring_bytes", c.cfg.RingSize, "offline_cpu_rings", len(c.ring)-c.fullRings)
	c.mu.Lock()
	c.ifaces = append(c.ifaces, a)
	c.mu.Unlock()
	return a, nil
}

// LoadDetached loads a set of programs writing to c's ring without
// attaching them, for BPF_PROG_TEST_RUN (tests, benchmarks). Close it with
// Detach.
func (c *Capture) LoadDetached() (*Attachment, error) {
	a := &Attachment{Iface: "", Mode: ModeTC}
	if err := c.load(&a.objs, false); err != nil {
		return nil, err
	}
	return a, nil
}

// Detach closes an attachment made by Attach or LoadDetached.
func (a *Attachment) Detach() error { return a.close() }

// Program returns the program of one hook (XDP, TC ingress or egress).
func (a *Attachment) Program(h Hook) *ebpf.Program {
	switch h {
	case HookXDP:
		return a.objs.HotsniffXdp
	case HookTCIngress:
		return a.objs.HotsniffTcIngress
	case HookCgroupIngress:
		return a.objs.HotsniffCgroupIngress
	case HookCgroupEgress:
		return a.objs.HotsniffCgroupEgress
	}
	return a.objs.HotsniffTcEgress
}

// Physical reports whether iface is backed by a device (a NIC), as opposed
// to veth, bridge, loopback or tunnel devices: XDP goes there in auto mode.
func Physical(iface string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", iface, "device"))
	return err == nil
}

func (a *Attachment) attachXDP(ifindex int) error {
	prog := a.objs.HotsniffXdp
	// Native (driver) mode runs before the skb exists; drivers without XDP
	// support only take generic mode.
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPDriverMode})
	a.XDPMode = "driver"
	if err != nil {
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPGenericMode})
		a.XDPMode = "generic"
	}
	if err != nil {
		a.XDPMode = ""
		return fmt.Errorf("attach xdp to %s: %w", a.Iface, err)
	}
	a.links = append(a.links, l)
	return nil
}

func (a *Attachment) attachTC(l netlink.Link, dir ebpf.AttachType, prog *ebpf.Program) error {
	// TCX (6.6+) attachments are bpf_links: the kernel removes them when
	// the last fd closes, even if we are SIGKILLed.
	if !forceClsact {
		tl, err := link.AttachTCX(link.TCXOptions{Interface: l.Attrs().Index, Program: prog, Attach: dir})
		if err == nil {
			a.TCX = true
			a.links = append(a.links, tl)
			return nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return fmt.Errorf("attach tcx to %s: %w", a.Iface, err)
		}
	}
	return a.attachClsact(l, dir, prog)
}

func (a *Attachment) close() error {
	var errs []error
	for _, l := range a.links {
		errs = append(errs, l.Close())
	}
	for _, f := range a.filters {
		if err := netlink.FilterDel(f); err != nil {
			errs = append(errs, fmt.Errorf("delete tc filter on %s: %w", a.Iface, err))
		}
	}
	a.links, a.filters = nil, nil
	errs = append(errs, a.objs.Close())
	return errors.Join(errs...)
}

// Programs returns the attached programs by hook, for run-time statistics.
func (a *Attachment) Programs() map[Hook]*ebpf.Program {
	if a.Mode == ModeCgroup {
		return map[Hook]*ebpf.Program{HookCgroupIngress: a.objs.HotsniffCgroupIngress, HookCgroupEgress: a.objs.HotsniffCgroupEgress}
	}
	m := map[Hook]*ebpf.Program{HookTCEgress: a.objs.HotsniffTcEgress}
	if a.Mode == ModeXDP {
		m[HookXDP] = a.objs.HotsniffXdp
	} else {
		m[HookTCIngress] = a.objs.HotsniffTcIngress
	}
	return m
}

// Counters is what the programs on one interface counted, summed over CPUs.
type Counters struct {
	Iface string
	Mode  Mode
	// Packets is every packet the hooks ran on; Matched those on a
	// captured port.
	Packets, Matched uint64
	// Records and Bytes are ring records and payload bytes written.
	Records, Bytes uint64
	// RingbufFull counts records lost because the ring was full and
	// RingbufFullBytes their payload bytes.
	RingbufFull, RingbufFullBytes uint64
	// Truncated is payload bytes beyond MaxCopy, reported as Missing.
	Truncated uint64
	// LoadErrors is payload bytes lost because reading the packet failed.
	LoadErrors uint64
	// Nonlinear counts packets not parsed because their headers were not
	// in the skb's linear data; expected to stay 0.
	Nonlinear uint64
	// ReplyBytes is reply payload left uncopied because Config.Replies is
	// off (or trimmed in heads mode): by design, not a loss. With replies
	// off it counts every connection's replies, sampled out or not.
	ReplyBytes uint64
}

func (s *Counters) add(c *hotsniffCounters) {
	s.Packets += c.Packets
	s.Matched += c.Matched
	s.Records += c.Records
	s.Bytes += c.Bytes
	s.RingbufFull += c.RbFull
	s.RingbufFullBytes += c.RbFullBytes
	s.Truncated += c.Truncated
	s.LoadErrors += c.LoadErr
	s.Nonlinear += c.Nonlinear
	s.ReplyBytes += c.ReplyBytes
}

// Counters reads the counters of one interface.
func (a *Attachment) Counters() (Counters, error) {
	s := Counters{Iface: a.Iface, Mode: a.Mode}
	all, err := readCounters(a.objs.Stats)
	if err != nil {
		return s, fmt.Errorf("read counters of %s: %w", a.Iface, err)
	}
	for i := range all {
		s.add(&all[i])
	}
	return s, nil
}

// readCounters reads the stats map, entry cpu × numHooks + hook (the
// programs' counters_for), through its memory mapping: no system call, and
// each 8-byte counter is aligned, so it is read whole.
func readCounters(m *ebpf.Map) ([]hotsniffCounters, error) {
	mm, err := m.Memory()
	if err != nil {
		return nil, fmt.Errorf("map counters: %w", err)
	}
	out := make([]hotsniffCounters, m.MaxEntries())
	b := unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), len(out)*int(unsafe.Sizeof(out[0])))
	if _, err := mm.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("read mapped counters: %w", err)
	}
	return out, nil
}

// Attachments lists the attached interfaces.
func (c *Capture) Attachments() []*Attachment {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Attachment(nil), c.ifaces...)
}

// Counters reads the counters of every interface. It holds the lock Remove
// takes, so an attachment is not closed under it.
func (c *Capture) Counters() ([]Counters, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Counters
	for _, a := range c.ifaces {
		s, err := a.Counters()
		if err != nil {
			return out, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Close detaches everything and frees the maps. Detaching is also what the
// kernel does for bpf_link attachments if the process dies.
func (c *Capture) Close() error {
	c.mu.Lock()
	ifaces := c.ifaces
	c.ifaces = nil
	c.mu.Unlock()
	var errs []error
	for _, a := range ifaces {
		errs = append(errs, a.close())
	}
	if c.ports != nil {
		errs = append(errs, c.ports.Close())
	}
	if c.wake != nil {
		errs = append(errs, c.wake.Close())
	}
	for _, m := range []*ebpf.Map{c.sampling, c.sampled} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	if c.skips != nil {
		errs = append(errs, c.skips.Close())
	}
	if c.decap != nil {
		errs = append(errs, c.decap.Close())
	}
	for _, m := range c.kcMaps {
		errs = append(errs, m.Close())
	}
	if c.rings != nil {
		errs = append(errs, c.rings.Close())
	}
	for _, m := range c.ring {
		errs = append(errs, m.Close())
	}
	return errors.Join(errs...)
}

// MonotonicOffset returns what to add to a bpf_ktime_get_ns timestamp
// (CLOCK_MONOTONIC) to get Unix nanoseconds. It drifts with NTP slewing and
// jumps with clock steps, so long-running readers refresh it now and then.
func MonotonicOffset() int64 {
	mono := monotonicNow()
	return time.Now().UnixNano() - mono
}
