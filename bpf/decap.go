package bpf

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// DecapTable is a decapsulation policy in the programs' terms: the UDP
// tunnels (port, kind, VNIs), IP-in-IP, and the local tunnel endpoint
// addresses. The capture layer renders its policy into it (live), so the
// loader stays below that layer.
type DecapTable struct {
	UDP   []DecapPort
	IPIP  bool
	Local []netip.Addr
}

// DecapPort is one UDP tunnel port.
type DecapPort struct {
	Port   uint16
	Geneve bool // else VXLAN
	VNIs   []uint32
	AnyVNI bool
}

// Key types and values of the decap_cfg map (hotsniff.c).
const (
	decapUDP    = 1
	decapVNI    = 2
	decapIPIP   = 3
	decapAddr   = 4
	decapVXLAN  = 1
	decapGeneve = 2
	decapAnyVNI = 0x80

	// maxDecapEntries is decap_cfg's size.
	maxDecapEntries = 4096
)

// decapEntries renders d as decap_cfg entries (nil, or no endpoint
// address: none, so nothing is decapsulated).
func decapEntries(d *DecapTable) (map[hotsniffDecapKey]uint8, error) {
	out := map[hotsniffDecapKey]uint8{}
	if d == nil || (len(d.UDP) == 0 && !d.IPIP) || len(d.Local) == 0 {
		return out, nil
	}
	for _, u := range d.UDP {
		val := uint8(decapVXLAN)
		if u.Geneve {
			val = decapGeneve
		}
		if u.AnyVNI {
			val |= decapAnyVNI
		}
		out[hotsniffDecapKey{Type: decapUDP, Port: u.Port}] = val
		for _, vni := range u.VNIs {
			out[hotsniffDecapKey{Type: decapVNI, Port: u.Port, Vni: vni}] = 1
		}
	}
	if d.IPIP {
		out[hotsniffDecapKey{Type: decapIPIP}] = 1
	}
	for _, a := range d.Local {
		k := hotsniffDecapKey{Type: decapAddr, Family: 6}
		if a.Is4() {
			k.Family = 4
			v := a.As4()
			copy(k.Addr[:], v[:])
		} else {
			k.Addr = a.As16()
		}
		out[k] = 1
	}
	if len(out) > maxDecapEntries {
		return nil, fmt.Errorf("set tunnels: %d entries (ports, VNIs, endpoint addresses), at most %d", len(out), maxDecapEntries)
	}
	return out, nil
}

// SetDecap replaces the tunnels the programs follow (nil: none). New
// entries go in before stale ones leave, so a tunnel in both the old and new
// setting is followed throughout.
func (c *Capture) SetDecap(d *DecapTable) error {
	want, err := decapEntries(d)
	if err != nil {
		return err
	}
	for k, v := range want {
		if err := c.decap.Put(&k, &v); err != nil {
			return fmt.Errorf("update decap map: %w", err)
		}
	}
	var (
		k     hotsniffDecapKey
		v     uint8
		stale []hotsniffDecapKey
	)
	it := c.decap.Iterate()
	for it.Next(&k, &v) {
		if _, ok := want[k]; !ok {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read decap map: %w", err)
	}
	for _, k := range stale {
		if err := c.decap.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("update decap map: %w", err)
		}
	}
	return nil
}
