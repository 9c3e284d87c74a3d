// Package live opens a live capture: eBPF at the cgroup root or on
// interfaces (XDP on NICs, TC elsewhere, following interfaces as they come
// and go), or AF_PACKET where eBPF is unavailable. It returns one
// capture.Source with a few optional capabilities (kernel counters,
// sampling control, reply skips) that the daemon looks up once, so nothing
// above it switches on the kind of capture.
package live

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/cilium/ebpf/rlimit"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/capture/afpacket"
	"github.com/hotsniff/hotsniff/capture/tunnel"
)

// Config chooses how to capture.
type Config struct {
	Mode       bpf.Mode
	Ifaces     []string // names or patterns; none: the physical NICs and pods' interfaces
	CgroupPath string
	Ports      []uint16
	RingSize   int
	MaxCopy    int
	Replies    bool // copy replies whole
	ReplyCopy  int  // without Replies: bytes of each reply segment copied (0: none)
	// KernelCount, when set, makes the programs count reads in the kernel
	// (experimental; no reply bytes then).
	KernelCount *bpf.KernelCountConfig
	// Decap says which tunnels interface captures follow to the inner
	// segment (--decap; sockets, in cgroup mode, see no tunnels).
	Decap  string
	Logger *slog.Logger
}

// UsageError is a capture configuration the user must fix (an --iface that
// does not exist); the message says how.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Capture is an open live capture.
type Capture struct {
	capture.Source
	mode string
	bpf  *bpf.Capture     // eBPF modes
	afp  *afpacket.Source // AF_PACKET

	decap    tunnel.Setting
	decapNow *capture.Decap
	log      *slog.Logger
}

// SetDeadline forwards to the source when it has one (the eBPF and
// AF_PACKET readers do): the embedded interface hides it, and without it a
// live pipeline ticks only on traffic, so a quiet node's hot keys were
// neither refreshed nor cooled, and metrics went stale.
func (c *Capture) SetDeadline(t time.Time) {
	if d, ok := c.Source.(interface{ SetDeadline(time.Time) }); ok {
		d.SetDeadline(t)
	}
}

// Mode names what was opened: cgroup, xdp, tc, auto (interfaces) or afpacket.
func (c *Capture) Mode() string { return c.mode }

// Counter is one attachment's kernel-side counts.
type Counter struct {
	Iface, Mode    string
	Packets        uint64
	Dropped        map[string]uint64 // by reason: ringbuf_full, kernel
	TruncatedBytes uint64
	DroppedBytes   uint64 // payload bytes of the ringbuf_full records
}

// Counters reads the kernel-side counters of the capture.
func (c *Capture) Counters() ([]Counter, error) {
	var out []Counter
	switch {
	case c.bpf != nil:
		cs, err := c.bpf.Counters()
		for _, k := range cs {
			out = append(out, Counter{Iface: k.Iface, Mode: string(k.Mode), Packets: k.Packets,
				Dropped: map[string]uint64{"ringbuf_full": k.RingbufFull, "kernel": k.LoadErrors}, TruncatedBytes: k.Truncated,
				DroppedBytes: k.RingbufFullBytes})
		}
		return out, err
	case c.afp != nil:
		cs, err := c.afp.Counters()
		for _, k := range cs {
			out = append(out, Counter{Iface: k.Iface, Mode: "afpacket", Packets: k.Packets,
				Dropped: map[string]uint64{"kernel": k.KernelDrops}})
		}
		return out, err
	}
	return nil, nil
}

// KernelCounting is the eBPF capture when its programs count reads in the
// kernel (--kernel-count), else nil.
func (c *Capture) KernelCounting() *bpf.Capture {
	if c.bpf == nil || !c.bpf.KernelCounting() {
		return nil
	}
	return c.bpf
}

// Sampler controls flow sampling in the kernel programs (--max-cpu).
type Sampler interface {
	ProgramRunTime() time.Duration
	Sampling() (bpf.Sampling, error)
	SetSampleLevel(level uint8, resume time.Duration) error
}

// Sampler is the capture's sampling control, or nil where the capture
// cannot sample (AF_PACKET).
func (c *Capture) Sampler() Sampler {
	if c.bpf == nil {
		return nil
	}
	return c.bpf
}

// ReplySkipper lets the stream layer tell the programs to skip the rest
// of a large reply once its header was read.
type ReplySkipper interface {
	ReplyCopy() uint32
	SetReplySkip(server, client netip.AddrPort, start, end uint32) error
}

// ReplySkips is the capture's reply-skip control, or nil unless the
// programs copy reply heads.
func (c *Capture) ReplySkips() ReplySkipper {
	if c.bpf == nil || !c.bpf.ReplyHeads() {
		return nil
	}
	return c.bpf
}

// RequestsOnly reports whether the capture carries no reply payload at all
// (eBPF without reply copies): the reply parsers must then stay off.
func (c *Capture) RequestsOnly() bool {
	return c.bpf != nil && !c.bpf.ReplyHeads() && !c.bpf.CopiesReplies() && !c.bpf.KernelReplyBytes()
}

// Open attaches eBPF at the cgroup root or on the interfaces, or opens
// AF_PACKET, as cfg.Mode asks (auto: the best that works here), and logs
// what it chose and why.
func Open(cfg Config) (*Capture, error) {
	o := &opener{cfg: cfg, mode: cfg.Mode, base: cmp.Or(cfg.Logger, slog.Default())}
	o.log = o.base.With("component", "capture")
	d, err := tunnel.Parse(cfg.Decap)
	if err != nil {
		return nil, &UsageError{err}
	}
	o.decap = d
	if err := o.open(); err != nil {
		return nil, err
	}
	return o.out, nil
}

// opener holds one Open's state.
type opener struct {
	cfg       Config
	mode      bpf.Mode
	base, log *slog.Logger
	out       *Capture
	decap     tunnel.Setting
	decapNow  *capture.Decap // what the interface captures follow at the start
}

func (d *opener) open() error {
	ports := d.cfg.Ports
	cfg := bpf.Config{Ports: ports, RingSize: d.cfg.RingSize, MaxCopy: uint32(d.cfg.MaxCopy), Replies: d.cfg.Replies,
		ReplyHeads: !d.cfg.Replies && d.cfg.ReplyCopy > 0, ReplyCopy: uint32(max(d.cfg.ReplyCopy, 0)), Logger: d.base,
		KernelCount: d.cfg.KernelCount}
	if cfg.KernelCount != nil {
		// Replies of requests the programs keep would pair with the wrong
		// requests: with kernel counting the programs copy only the
		// replies of the requests they copy, and only when they count
		// reply bytes themselves (KernelCountConfig.ReplyBytes).
		cfg.Replies, cfg.ReplyHeads = false, false
	}
	if d.mode != bpf.ModeAFPacket {
		// Kernels before 5.11 charge BPF maps to the locked memory limit;
		// later ones ignore it. Without CAP_SYS_RESOURCE this fails and
		// the permission error below says what to do.
		_ = rlimit.RemoveMemlock()
	}
	if d.chooseCgroup() {
		err := d.openCgroup(cfg)
		if err == nil {
			return nil
		}
		if d.mode == bpf.ModeCgroup {
			return privilegeError("start cgroup capture", "ebpf", err)
		}
		d.log.Warn("cgroup capture unavailable, capturing on interfaces", "err", err)
	}
	// Interfaces see tunnel packets; sockets (cgroup) never do.
	d.decapNow = d.resolveDecap()
	cfg.Decap = decapTable(d.decapNow)
	names, patterns, err := d.ifaceSpec()
	if err != nil {
		return err
	}
	if d.mode != bpf.ModeAFPacket {
		err := d.openInterfaces(cfg, names, patterns)
		if err == nil {
			return nil
		}
		if d.mode != bpf.ModeAuto {
			return privilegeError(fmt.Sprintf("start %s capture", d.mode), "ebpf", err)
		}
		d.log.Warn("eBPF unavailable, falling back to AF_PACKET", "err", privilegeError("start eBPF capture", "ebpf", err))
	}
	ifaces, err := expand(names, patterns)
	if err != nil {
		return err
	}
	if len(ifaces) == 0 {
		return &UsageError{fmt.Errorf("no interface matches --iface %v", patterns)}
	}
	if len(patterns) > 0 {
		d.log.Warn("afpacket captures the interfaces matching --iface patterns at start only; interfaces created later need an eBPF mode", "ifaces", ifaces)
	}
	src, err := afpacket.Open(afpacket.Config{Ifaces: ifaces, Ports: ports, Blocks: max(1, cmp.Or(d.cfg.RingSize, afpacketRingSize)/(1<<20)), Decap: d.decapNow, Logger: d.base})
	if err != nil {
		if d.mode == bpf.ModeAuto && errors.Is(err, os.ErrPermission) {
			return privilegeError("start capture (eBPF, then AF_PACKET)", "auto", err)
		}
		return privilegeError("start afpacket capture", "afpacket", err)
	}
	d.out = &Capture{Source: src, mode: "afpacket", afp: src, decap: d.decap, decapNow: d.decapNow, log: d.log}
	return nil
}

// defaultIfaces picks the interfaces a cache node's traffic arrives on: the
// physical ones that are up, or else every non-loopback one that is up.
func defaultIfaces() ([]string, error) {
	all, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	var phys, up []string
	for _, i := range all {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		up = append(up, i.Name)
		if physical(i.Name) {
			phys = append(phys, i.Name)
		}
	}
	if len(phys) > 0 {
		return phys, nil
	}
	if len(up) == 0 {
		return nil, &UsageError{errors.New("no interface to capture on: pass --iface")}
	}
	return up, nil
}

// afpacketRingSize is the default AF_PACKET ring per interface.
const afpacketRingSize = 32 << 20
