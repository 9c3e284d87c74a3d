package live

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture/ebpfsrc"
	"github.com/hotsniff/hotsniff/capture/ifwatch"
)

// isPattern reports whether an --iface value has glob characters.
func isPattern(s string) bool { return strings.ContainsAny(s, "*?[") }

// chooseCgroup decides whether `run` captures at the cgroup v2 root: when
// asked (--capture cgroup), or in auto mode with no --iface given where a
// cgroup v2 hierarchy is mounted. It logs one line saying what was chosen
// and why.
func (d *opener) chooseCgroup() bool {
	switch {
	case d.mode == bpf.ModeCgroup:
		d.log.Info("capture mode chosen", "mode", "cgroup", "reason", "--capture cgroup")
		if len(d.cfg.Ifaces) > 0 {
			d.log.Warn("--iface is ignored with --capture cgroup: every socket on the host is captured", "iface", d.cfg.Ifaces)
		}
		return true
	case d.mode != bpf.ModeAuto:
		d.log.Info("capture mode chosen", "mode", d.mode, "reason", "--capture "+string(d.mode))
		return false
	case len(d.cfg.Ifaces) > 0:
		d.log.Info("capture mode chosen", "mode", "interfaces (xdp on NICs, tc elsewhere)", "reason", "--iface given")
		return false
	}
	root, err := bpf.CgroupRoot(d.cfg.CgroupPath)
	if err != nil {
		d.log.Info("capture mode chosen", "mode", "interfaces (xdp on NICs, tc elsewhere)", "reason", err.Error())
		return false
	}
	d.log.Info("capture mode chosen", "mode", "cgroup", "reason",
		"cgroup v2 mounted at "+root+": one attachment sees every pod, host and loopback socket after decapsulation")
	return true
}

// openCgroup attaches the cgroup_skb programs.
func (d *opener) openCgroup(cfg bpf.Config) error {
	c, err := bpf.Open(cfg)
	if err != nil {
		return err
	}
	if _, err := c.AttachCgroup(d.cfg.CgroupPath); err != nil {
		c.Close()
		return err
	}
	src, err := ebpfsrc.New(c)
	if err != nil {
		c.Close()
		return err
	}
	d.out = &Capture{Source: src, mode: string(bpf.ModeCgroup), bpf: c, log: d.log}
	return nil
}

// ifaceSpec splits --iface values (or the defaults) into exact names, which
// must exist now, and patterns, which may match nothing yet.
func (d *opener) ifaceSpec() (names, patterns []string, err error) {
	given := d.cfg.Ifaces
	if len(given) == 0 {
		phys, err := defaultIfaces()
		if err != nil && !isUsage(err) {
			return nil, nil, err
		}
		given = append(phys, ifwatch.DefaultPodPatterns...)
		d.log.Info("no --iface given", "ifaces", phys, "patterns", ifwatch.DefaultPodPatterns)
	}
	if err := ifwatch.ValidatePatterns(given); err != nil {
		return nil, nil, &UsageError{fmt.Errorf("--iface: %w", err)}
	}
	for _, name := range given {
		if isPattern(name) {
			patterns = append(patterns, name)
			continue
		}
		if _, err := net.InterfaceByName(name); err != nil {
			return nil, nil, &UsageError{fmt.Errorf("--iface %s: no such network interface on this node (ip link lists them; a pattern such as 'veth*' may match none yet)", name)}
		}
		names = append(names, name)
	}
	return names, patterns, nil
}

func isUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u)
}

// expand lists the interfaces that exist now and match names or patterns,
// for AF_PACKET, which does not follow interfaces that appear later.
func expand(names, patterns []string) ([]string, error) {
	out := slices.Clone(names)
	if len(patterns) == 0 {
		return out, nil
	}
	all, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	for _, i := range all {
		if ifwatch.Match(patterns, i.Name) && !slices.Contains(out, i.Name) {
			out = append(out, i.Name)
		}
	}
	return out, nil
}

// ifaceAttacher attaches a Capture to interfaces as ifwatch reports them.
// Pods' interfaces (TC, not physical NICs) share one loaded set of
// programs, so a new pod costs two link creations and not a program load;
// the rest get programs of their own.
type ifaceAttacher struct {
	c      *bpf.Capture
	mode   bpf.Mode
	log    *slog.Logger
	shared *bpf.Shared // nil: every interface gets its own programs

	mu  sync.Mutex
	att map[int]*bpf.Attachment
	shr map[int]string // interfaces on shared, by index
}

func (a *ifaceAttacher) Up(name string, index int) error {
	if a.shared != nil && (a.mode == bpf.ModeTC || a.mode == bpf.ModeAuto) && !physical(name) {
		err := a.shared.Attach(name)
		if err == nil {
			a.mu.Lock()
			a.shr[index] = name
			a.mu.Unlock()
			return nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return err
		}
	}
	at, err := a.c.Attach(name, a.mode)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.att[index] = at
	a.mu.Unlock()
	return nil
}

func (a *ifaceAttacher) Down(name string, index int) {
	a.mu.Lock()
	at := a.att[index]
	shr, onShared := a.shr[index]
	delete(a.att, index)
	delete(a.shr, index)
	a.mu.Unlock()
	var err error
	switch {
	case onShared:
		err = a.shared.Detach(shr)
	case at != nil:
		err = a.c.Remove(at)
	default:
		return
	}
	if err != nil {
		a.log.Warn("detach interface", "iface", name, "err", err)
		return
	}
	a.log.Info("capture detached", "iface", name)
}

// physical reports whether iface is backed by a device (a NIC): the one
// test of it (the loader asks the same of an interface it attaches XDP to).
func physical(iface string) bool { return bpf.Physical(iface) }

// openInterfaces attaches to the named interfaces and to every interface
// matching the patterns, now and as they appear, until the source closes.
// An interface named exactly that fails to attach fails the start.
func (d *opener) openInterfaces(cfg bpf.Config, names, patterns []string) error {
	c, err := bpf.Open(cfg)
	if err != nil {
		return err
	}
	h := &ifaceAttacher{c: c, mode: d.mode, log: d.log, att: map[int]*bpf.Attachment{}, shr: map[int]string{}}
	for _, name := range names {
		l, err := net.InterfaceByName(name)
		if err == nil {
			err = h.Up(name, l.Index)
		}
		if err != nil {
			c.Close()
			return err
		}
	}
	var w *ifwatch.Watcher
	if len(patterns) > 0 {
		if d.mode == bpf.ModeTC || d.mode == bpf.ModeAuto {
			if h.shared, err = c.NewShared(strings.Join(patterns, ",")); err != nil {
				c.Close()
				return err
			}
		}
		// Exact names are attached already; the watcher only follows
		// the patterns, and never detaches a named interface.
		if w, err = ifwatch.Start(patterns, patternOnly{h, names}, d.base); err != nil {
			if h.shared != nil {
				h.shared.Close()
			}
			c.Close()
			return err
		}
		d.log.Info("following interfaces", "patterns", patterns, "attached", len(w.Attached()))
	}
	src, err := ebpfsrc.New(c)
	if err != nil {
		if w != nil {
			w.Close()
		}
		if h.shared != nil {
			h.shared.Close()
		}
		c.Close()
		return err
	}
	d.out = &Capture{Source: &watchedSource{Source: src, w: w, shared: h.shared}, mode: string(d.mode), bpf: c,
		decap: d.decap, decapNow: d.decapNow, log: d.log}
	return nil
}

// patternOnly leaves interfaces named exactly to the caller.
type patternOnly struct {
	h     *ifaceAttacher
	names []string
}

func (p patternOnly) Up(name string, index int) error {
	if slices.Contains(p.names, name) {
		return nil
	}
	return p.h.Up(name, index)
}

func (p patternOnly) Down(name string, index int) { p.h.Down(name, index) }

// watchedSource stops following interfaces before the capture closes, so
// nothing attaches to a closed Capture.
type watchedSource struct {
	*ebpfsrc.Source
	w      *ifwatch.Watcher
	shared *bpf.Shared
}

func (s *watchedSource) Close() error {
	if s.w != nil {
		s.w.Close()
	}
	var err error
	if s.shared != nil {
		err = s.shared.Close()
	}
	return errors.Join(err, s.Source.Close())
}
