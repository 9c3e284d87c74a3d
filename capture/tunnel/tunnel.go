// Package tunnel decides which overlay tunnels a live capture decapsulates:
// the --decap setting (auto, off, or named tunnels) and the detection of the
// tunnel devices this node terminates (VXLAN, Geneve, IP-in-IP), through
// netlink.
//
// A tunnel packet is a UDP datagram (or an IP packet of protocol 4 or 41)
// that anyone who can reach the node can send, and the capture hooks run
// before the host firewall: decapsulating every datagram to port 4789 would
// let any sender make up cache requests. So a live capture follows only the
// tunnels the node really terminates, to or from its own tunnel endpoint
// addresses; with none configured or detected it follows nothing.
package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/hotsniff/hotsniff/capture"
)

// Setting is a parsed --decap value.
type Setting struct {
	// Auto follows the tunnel devices detected on the node.
	Auto bool
	// Tunnels are the ones the operator named; their endpoints are the
	// node's addresses.
	Tunnels []capture.Tunnel
}

// Default is the --decap default.
const Default = "auto"

// Parse reads a --decap value: "auto", "off", or a comma-separated list of
// "vxlan:PORT[/VNI...]", "geneve:PORT[/VNI...]", "ipip" (IP-in-IP and
// IPv6-in-IP) and "auto" (VNIs separated by "/": vxlan:4789/42/43). Limits
// keep a config file from making a table of any size.
func Parse(s string) (Setting, error) {
	var out Setting
	s = strings.TrimSpace(s)
	if s == "off" || s == "none" {
		return out, nil
	}
	if s == "" {
		return out, errors.New(`parse --decap: empty (use "auto", "off" or "vxlan:PORT,geneve:PORT,ipip")`)
	}
	items := strings.Split(s, ",")
	if len(items) > maxItems {
		return out, fmt.Errorf("parse --decap: %d tunnels, at most %d", len(items), maxItems)
	}
	for _, item := range items {
		item = strings.TrimSpace(item)
		kind, rest, hasPort := strings.Cut(item, ":")
		switch kind {
		case "auto":
			if hasPort {
				return out, fmt.Errorf("parse --decap %q: auto takes no port", item)
			}
			out.Auto = true
			continue
		case "off", "none":
			return out, fmt.Errorf(`parse --decap %q: "off" cannot be combined with tunnels`, s)
		case "ipip":
			if hasPort {
				return out, fmt.Errorf("parse --decap %q: ipip takes no port", item)
			}
			out.Tunnels = append(out.Tunnels, capture.Tunnel{Kind: capture.TunnelIPIP})
			continue
		}
		var t capture.Tunnel
		switch kind {
		case "vxlan":
			t.Kind = capture.TunnelVXLAN
		case "geneve":
			t.Kind = capture.TunnelGeneve
		default:
			return out, fmt.Errorf(`parse --decap %q: unknown tunnel %q (want auto, off, vxlan:PORT, geneve:PORT or ipip)`, item, kind)
		}
		if !hasPort {
			return out, fmt.Errorf("parse --decap %q: %s needs a UDP port (%s:%d)", item, kind, kind, defaultPort(t.Kind))
		}
		fields := strings.Split(rest, "/")
		p, err := strconv.ParseUint(fields[0], 10, 16)
		if err != nil || p == 0 {
			return out, fmt.Errorf("parse --decap %q: port %q is not 1-65535", item, fields[0])
		}
		t.Port = uint16(p)
		if len(fields)-1 > maxVNIs {
			return out, fmt.Errorf("parse --decap %q: %d VNIs, at most %d", item, len(fields)-1, maxVNIs)
		}
		for _, f := range fields[1:] {
			v, err := strconv.ParseUint(f, 10, 24)
			if err != nil {
				return out, fmt.Errorf("parse --decap %q: VNI %q is not 0-16777215", item, f)
			}
			t.VNIs = append(t.VNIs, uint32(v))
		}
		for _, o := range out.Tunnels {
			if o.Port == t.Port && o.Kind != capture.TunnelIPIP && o.Kind != t.Kind {
				return out, fmt.Errorf("parse --decap %q: port %d named as both %s and %s", s, t.Port, o.Kind, t.Kind)
			}
		}
		out.Tunnels = append(out.Tunnels, t)
	}
	return out, nil
}

const (
	maxItems = 64
	maxVNIs  = 256
)

func defaultPort(k capture.TunnelKind) int {
	if k == capture.TunnelGeneve {
		return 6081
	}
	return 4789
}

// String renders s as Parse reads it.
func (s Setting) String() string {
	var parts []string
	if s.Auto {
		parts = append(parts, "auto")
	}
	for _, t := range s.Tunnels {
		parts = append(parts, describe(t))
	}
	if len(parts) == 0 {
		return "off"
	}
	return strings.Join(parts, ",")
}

func describe(t capture.Tunnel) string {
	if t.Kind == capture.TunnelIPIP {
		return "ipip"
	}
	b := []byte(t.Kind.String() + ":" + strconv.Itoa(int(t.Port)))
	for _, v := range t.VNIs {
		b = append(b, '/')
		b = strconv.AppendUint(b, uint64(v), 10)
	}
	return string(b)
}

// Found is a tunnel device detected on the node.
type Found struct {
	Device string
	Tunnel capture.Tunnel
	// Local is the device's own endpoint address; invalid when it has
	// none (it then terminates tunnels to any of the node's addresses).
	Local netip.Addr
}

func (f Found) String() string {
	s := f.Device + "=" + describe(f.Tunnel)
	if f.Local.IsValid() {
		s += "@" + f.Local.String()
	}
	return s
}

// Detect lists the tunnel devices that are up in the current network
// namespace: VXLAN and Geneve devices (their destination port and VNI, or
// any VNI for an external/collect_metadata device as Cilium's) and IP-in-IP
// devices (ipip, sit, ip6tnl, including the fallback tunl0 when it is up).
func Detect() ([]Found, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var out []Found
	for _, l := range links {
		a := l.Attrs()
		if a.Flags&net.FlagUp == 0 {
			continue // a device that is down decapsulates nothing
		}
		f := Found{Device: a.Name}
		switch d := l.(type) {
		case *netlink.Vxlan:
			f.Tunnel = capture.Tunnel{Kind: capture.TunnelVXLAN, Port: uint16(d.Port)}
			if f.Tunnel.Port == 0 {
				f.Tunnel.Port = 8472 // the kernel's default
			}
			if !d.FlowBased {
				f.Tunnel.VNIs = []uint32{uint32(d.VxlanId)}
			}
			f.Local = addr(d.SrcAddr)
		case *netlink.Geneve:
			f.Tunnel = capture.Tunnel{Kind: capture.TunnelGeneve, Port: d.Dport}
			if f.Tunnel.Port == 0 {
				f.Tunnel.Port = 6081
			}
			if !d.FlowBased {
				f.Tunnel.VNIs = []uint32{d.ID}
			}
		case *netlink.Iptun:
			f.Tunnel, f.Local = capture.Tunnel{Kind: capture.TunnelIPIP}, addr(d.Local)
		case *netlink.Sittun:
			f.Tunnel, f.Local = capture.Tunnel{Kind: capture.TunnelIPIP}, addr(d.Local)
		case *netlink.Ip6tnl:
			f.Tunnel, f.Local = capture.Tunnel{Kind: capture.TunnelIPIP}, addr(d.Local)
		default:
			continue
		}
		out = append(out, f)
	}
	return out, nil
}

// addr converts a netlink address; unset (nil or unspecified) is invalid.
func addr(ip net.IP) netip.Addr {
	a, ok := netip.AddrFromSlice(ip)
	if !ok || a.IsUnspecified() {
		return netip.Addr{}
	}
	return a.Unmap()
}

// NodeAddrs lists the addresses of the current network namespace, loopback
// excluded.
func NodeAddrs() ([]netip.Addr, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		ip := addr(a.IP)
		if ip.IsValid() && !ip.IsLoopback() && !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out, nil
}

// Plan is what a live capture decapsulates and why.
type Plan struct {
	Decap    *capture.Decap
	Detected []Found // the devices auto detection found
}

// Resolve turns a setting into a Decap for the current network namespace:
// the named tunnels and, with auto, the detected ones, followed to or from
// their devices' local addresses, or the node's addresses for tunnels with
// none. Nothing named or detected: nothing is followed.
func Resolve(s Setting) (Plan, error) {
	return resolve(s, Detect, NodeAddrs)
}

func resolve(s Setting, detect func() ([]Found, error), nodeAddrs func() ([]netip.Addr, error)) (Plan, error) {
	var p Plan
	tunnels := slices.Clone(s.Tunnels)
	anyLocal := len(tunnels) > 0
	var local []netip.Addr
	if s.Auto {
		found, err := detect()
		if err != nil {
			return p, err
		}
		p.Detected = found
		for _, f := range found {
			tunnels = append(tunnels, f.Tunnel)
			if f.Local.IsValid() {
				local = append(local, f.Local)
			} else {
				anyLocal = true
			}
		}
	}
	if len(tunnels) == 0 {
		return p, nil
	}
	if anyLocal {
		addrs, err := nodeAddrs()
		if err != nil {
			return p, err
		}
		local = append(local, addrs...)
	}
	p.Decap = capture.NewDecap(tunnels, local)
	return p, nil
}

// Describe says in one line what d follows, for the log.
func Describe(d *capture.Decap) string { return describeDecap(d, 8) }

// describeDecap is Describe naming at most limit addresses (0: all).
func describeDecap(d *capture.Decap, limit int) string {
	if !d.Enabled() {
		return "nothing (no tunnel configured or detected)"
	}
	var parts []string
	for _, k := range []capture.TunnelKind{capture.TunnelVXLAN, capture.TunnelGeneve} {
		for _, port := range d.Ports(k) {
			s := k.String() + ":" + strconv.Itoa(int(port))
			if vnis, any := d.VNIs(port); !any {
				for _, v := range vnis {
					s += "/" + strconv.FormatUint(uint64(v), 10)
				}
			}
			parts = append(parts, s)
		}
	}
	if d.IPIP() {
		parts = append(parts, "ipip")
	}
	local := d.Local()
	s := strings.Join(parts, ",") + " to or from "
	for i, a := range local {
		if i == limit && limit > 0 {
			s += fmt.Sprintf(" and %d more", len(local)-limit)
			break
		}
		if i > 0 {
			s += " "
		}
		s += a.String()
	}
	return s
}

// Follow re-resolves s every interval until ctx ends and calls apply with
// the new plan whenever what is followed changes: a tunnel device created
// after the start (a CNI that starts after the capture) or removed, or a
// node address that changed. Errors are passed to onErr and the last plan
// stays.
func Follow(ctx context.Context, s Setting, every time.Duration, last *capture.Decap, apply func(Plan), onErr func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	prev := describeDecap(last, 0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p, err := Resolve(s)
		if err != nil {
			onErr(err)
			continue
		}
		if d := describeDecap(p.Decap, 0); d != prev {
			prev = d
			apply(p)
		}
	}
}
