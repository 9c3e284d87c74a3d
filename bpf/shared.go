package bpf

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
)

// Shared is one set of TC programs attached to many interfaces: the host
// side of pods' veths, which come and go with the pods. Loading (verifying)
// the programs takes a good part of a second on a busy node, and a pod's
// first connections can come within milliseconds of its interface, so they
// are loaded once, and each new interface only costs two TCX link creations.
// Its counters are those of every interface it is attached to together,
// reported under its label (the --iface patterns).
type Shared struct {
	c *Capture
	a *Attachment

	mu    sync.Mutex
	links map[string][]link.Link // by interface
}

// NewShared loads a set of TC programs for interfaces with an Ethernet
// header, to be attached with Shared.Attach. label names it in Counters.
func (c *Capture) NewShared(label string) (*Shared, error) {
	a := &Attachment{Iface: label, Mode: ModeTC, TCX: true}
	if err := c.loadTC(&a.objs); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.ifaces = append(c.ifaces, a)
	c.mu.Unlock()
	return &Shared{c: c, a: a, links: map[string][]link.Link{}}, nil
}

// Attach attaches the shared programs to iface's TCX ingress and egress.
// It needs TCX (Linux 6.6); without it the caller attaches a copy of its
// own to the interface (Capture.Attach). Interfaces without an Ethernet
// header (tun, wireguard) are refused the same way.
func (s *Shared) Attach(iface string) error {
	l, err := netlink.LinkByName(iface)
	if err != nil {
		return fmt.Errorf("find interface %s: %w", iface, err)
	}
	if l.Attrs().EncapType == "none" {
		return fmt.Errorf("attach shared programs to %s: %w (no link-layer header)", iface, ebpf.ErrNotSupported)
	}
	var links []link.Link
	for _, x := range []struct {
		prog *ebpf.Program
		dir  ebpf.AttachType
	}{{s.a.objs.HotsniffTcIngress, ebpf.AttachTCXIngress}, {s.a.objs.HotsniffTcEgress, ebpf.AttachTCXEgress}} {
		tl, err := link.AttachTCX(link.TCXOptions{Interface: l.Attrs().Index, Program: x.prog, Attach: x.dir})
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			return fmt.Errorf("attach tcx to %s: %w", iface, err)
		}
		links = append(links, tl)
	}
	s.mu.Lock()
	old := s.links[iface]
	s.links[iface] = links
	s.mu.Unlock()
	for _, l := range old { // a stale entry: an interface of that name that went
		l.Close()
	}
	s.c.log.Info("capture attached", "iface", iface, "mode", ModeTC, "tcx", true, "shared", s.a.Iface)
	return nil
}

// Detach removes the shared programs from iface (fine if it is gone).
func (s *Shared) Detach(iface string) error {
	s.mu.Lock()
	links := s.links[iface]
	delete(s.links, iface)
	s.mu.Unlock()
	var errs []error
	for _, l := range links {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// Interfaces counts the interfaces the shared programs are attached to.
func (s *Shared) Interfaces() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.links)
}

// Close detaches from every interface and unloads the programs.
func (s *Shared) Close() error {
	s.mu.Lock()
	all := s.links
	s.links = map[string][]link.Link{}
	s.mu.Unlock()
	var errs []error
	for _, links := range all {
		for _, l := range links {
			errs = append(errs, l.Close())
		}
	}
	return errors.Join(append(errs, s.c.Remove(s.a))...)
}
