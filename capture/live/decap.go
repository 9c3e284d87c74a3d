package live

import (
	"context"
	"time"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/capture/tunnel"
)

// decapRefresh is how often the tunnels followed are worked out again (a
// CNI started after the daemon, an address that changed).
const decapRefresh = 10 * time.Second

// resolveDecap works out what the interface captures decapsulate from
// --decap and logs it. Detection failing leaves decapsulation off (safe:
// no forged tunnel packet is decoded) with a warning.
func (d *opener) resolveDecap() *capture.Decap {
	if !d.decap.Auto && len(d.decap.Tunnels) == 0 {
		d.log.Info("decapsulation off", "decap", d.decap.String())
		return nil
	}
	p, err := tunnel.Resolve(d.decap)
	if err != nil {
		d.log.Warn("tunnel detection failed: decapsulating nothing until it works", "decap", d.decap.String(), "err", err)
		return nil
	}
	logDecap(d.log, d.decap, p)
	return p.Decap
}

func logDecap(log interface{ Info(string, ...any) }, s tunnel.Setting, p tunnel.Plan) {
	var found []string
	for _, f := range p.Detected {
		found = append(found, f.String())
	}
	log.Info("decapsulating", "decap", s.String(), "follows", tunnel.Describe(p.Decap), "detected", found)
}

// FollowDecap keeps the tunnels an interface capture follows up to date
// until ctx ends (nothing to do for a cgroup capture, which sees sockets).
func (c *Capture) FollowDecap(ctx context.Context) {
	if c.mode == "cgroup" || (!c.decap.Auto && len(c.decap.Tunnels) == 0) {
		return
	}
	apply := func(p tunnel.Plan) {
		logDecap(c.log, c.decap, p)
		var err error
		switch {
		case c.bpf != nil:
			err = c.bpf.SetDecap(decapTable(p.Decap))
		case c.afp != nil:
			err = c.afp.SetDecap(p.Decap)
		}
		if err != nil {
			c.log.Warn("update tunnels followed", "err", err)
		}
	}
	go tunnel.Follow(ctx, c.decap, decapRefresh, c.decapNow, apply, func(err error) {
		c.log.Warn("tunnel detection failed: the tunnels followed stay as they were", "err", err)
	})
}

// decapTable renders the capture layer's policy in the loader's terms.
func decapTable(d *capture.Decap) *bpf.DecapTable {
	if !d.Enabled() {
		return nil
	}
	t := &bpf.DecapTable{IPIP: d.IPIP(), Local: d.Local()}
	for _, kind := range []capture.TunnelKind{capture.TunnelVXLAN, capture.TunnelGeneve} {
		for _, port := range d.Ports(kind) {
			vnis, any := d.VNIs(port)
			t.UDP = append(t.UDP, bpf.DecapPort{Port: port, Geneve: kind == capture.TunnelGeneve, VNIs: vnis, AnyVNI: any})
		}
	}
	return t
}
