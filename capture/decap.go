package capture

import (
	"net/netip"
	"slices"
)

// TunnelKind is an overlay encapsulation ParsePacket can follow.
type TunnelKind uint8

const (
	TunnelVXLAN  TunnelKind = 1 // UDP, then an 8-byte VXLAN header and an Ethernet frame
	TunnelGeneve TunnelKind = 2 // UDP, then a Geneve header with options
	TunnelIPIP   TunnelKind = 3 // IP protocol 4 (IPv4-in-IP) or 41 (IPv6-in-IP)
)

func (k TunnelKind) String() string {
	switch k {
	case TunnelVXLAN:
		return "vxlan"
	case TunnelGeneve:
		return "geneve"
	case TunnelIPIP:
		return "ipip"
	}
	return "unknown"
}

// Tunnel is one encapsulation a node terminates: its kind, UDP port (VXLAN
// and Geneve) and the VNIs it carries (none: any VNI, as a device in
// external/collect_metadata mode accepts).
type Tunnel struct {
	Kind TunnelKind
	Port uint16
	VNIs []uint32
}

// Decap says which encapsulated packets ParsePacketDecap follows to the
// inner segment. A tunnel packet is a plain UDP datagram (or IP packet) that
// anyone who can reach the node can send, and the capture hooks run before
// the host firewall; so only packets that are a tunnel this node
// terminates are followed: the right kind on the right UDP port, with a
// VNI the tunnel carries, to or from one of the node's tunnel endpoint
// addresses. Everything else is "not TCP" and never reaches a decoder.
//
// A Decap is immutable once built; share it freely.
type Decap struct {
	udp   map[uint16]udpTunnel
	ipip  bool
	local map[netip.Addr]struct{}
	// anyAddr accepts any outer address (files: the operator chose what
	// the capture holds).
	anyAddr bool
}

type udpTunnel struct {
	kind TunnelKind
	vnis map[uint32]struct{} // nil: any VNI
}

// NewDecap builds a Decap following tunnels whose outer source or
// destination address is in local. With no tunnels (or no addresses) it
// follows nothing, which is also what a nil *Decap does.
func NewDecap(tunnels []Tunnel, local []netip.Addr) *Decap {
	d := &Decap{udp: map[uint16]udpTunnel{}, local: map[netip.Addr]struct{}{}}
	for _, a := range local {
		d.local[a.Unmap()] = struct{}{}
	}
	for _, t := range tunnels {
		if t.Kind == TunnelIPIP {
			d.ipip = true
			continue
		}
		u, seen := d.udp[t.Port]
		if !seen {
			u = udpTunnel{kind: t.Kind}
			if len(t.VNIs) > 0 {
				u.vnis = map[uint32]struct{}{}
			}
		} else if u.kind != t.Kind {
			continue // one port, one kind: the first named wins
		}
		switch {
		case len(t.VNIs) == 0:
			u.vnis = nil // any VNI
		case u.vnis != nil:
			for _, v := range t.VNIs {
				u.vnis[v&0xFFFFFF] = struct{}{}
			}
		}
		d.udp[t.Port] = u
	}
	return d
}

// DecapStandard follows VXLAN on UDP 4789 and 8472, Geneve on 6081 and
// IP-in-IP with any VNI and any address: what capture files are read with,
// since the operator chose what a file holds.
var DecapStandard = func() *Decap {
	d := NewDecap([]Tunnel{{Kind: TunnelVXLAN, Port: portVXLAN}, {Kind: TunnelVXLAN, Port: portVXLANLinux},
		{Kind: TunnelGeneve, Port: portGeneve}, {Kind: TunnelIPIP}}, nil)
	d.anyAddr = true
	return d
}()

// Enabled reports whether d follows any tunnel.
func (d *Decap) Enabled() bool {
	return d != nil && (len(d.udp) > 0 || d.ipip) && (d.anyAddr || len(d.local) > 0)
}

// IPIP reports whether d follows IP-in-IP.
func (d *Decap) IPIP() bool { return d != nil && d.ipip }

// Ports lists the UDP ports of kind d follows, sorted.
func (d *Decap) Ports(kind TunnelKind) []uint16 {
	if d == nil {
		return nil
	}
	var out []uint16
	for p, u := range d.udp {
		if u.kind == kind {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// VNIs lists the VNIs d follows on port (sorted); any is true when every
// VNI is.
func (d *Decap) VNIs(port uint16) (vnis []uint32, any bool) {
	if d == nil {
		return nil, false
	}
	u, ok := d.udp[port]
	if !ok {
		return nil, false
	}
	if u.vnis == nil {
		return nil, true
	}
	for v := range u.vnis {
		vnis = append(vnis, v)
	}
	slices.Sort(vnis)
	return vnis, false
}

// Local lists the tunnel endpoint addresses, sorted.
func (d *Decap) Local() []netip.Addr {
	if d == nil {
		return nil
	}
	out := make([]netip.Addr, 0, len(d.local))
	for a := range d.local {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// endpoint reports whether an outer packet src > dst is to or from a local
// tunnel endpoint.
func (d *Decap) endpoint(src, dst netip.Addr) bool {
	if d.anyAddr {
		return true
	}
	if _, ok := d.local[dst]; ok {
		return true
	}
	_, ok := d.local[src]
	return ok
}

// udpKind returns the tunnel on UDP port, if d follows one there.
func (d *Decap) udpKind(port uint16) (udpTunnel, bool) {
	u, ok := d.udp[port]
	return u, ok
}

func (u udpTunnel) carries(vni uint32) bool {
	if u.vnis == nil {
		return true
	}
	_, ok := u.vnis[vni]
	return ok
}
