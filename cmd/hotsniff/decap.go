package main

import (
	"context"
	"time"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/capture/tunnel"
)

// decapRefresh is how often `run` looks again for tunnel devices and node
// addresses (a CNI started after the daemon, an address that changed).
const decapRefresh = 10 * time.Second

// resolveDecap works out what the interface captures decapsulate from
// --decap and logs it. Detection failing leaves decapsulation off (safe:
// no forged tunnel packet is decoded) with a warning.
func (d *daemon) resolveDecap() *capture.Decap {
	if !d.decap.Auto && len(d.decap.Tunnels) == 0 {
		d.log.Info("decapsulation off", "decap", d.decap.String())
		return nil
	}
	p, err := tunnel.Resolve(d.decap)
	if err != nil {
		d.log.Warn("tunnel detection failed: decapsulating nothing until it works", "decap", d.decap.String(), "err", err)
		return nil
	}
	d.logDecap(p)
	return p.Decap
}

func (d *daemon) logDecap(p tunnel.Plan) {
	var found []string
	for _, f := range p.Detected {
		found = append(found, f.String())
	}
	d.log.Info("decapsulating", "decap", d.decap.String(), "follows", tunnel.Describe(p.Decap), "detected", found)
}

// followDecap keeps the captures' tunnels up to date until ctx ends.
func (d *daemon) followDecap(ctx context.Context, last *capture.Decap) {
	if d.modeName == "cgroup" || (!d.decap.Auto && len(d.decap.Tunnels) == 0) {
		return // sockets see decapsulated packets; or nothing to follow
	}
	apply := func(p tunnel.Plan) {
		d.logDecap(p)
		var err error
		switch {
		case d.bpfCap != nil:
			err = d.bpfCap.SetDecap(p.Decap)
		case d.afp != nil:
			err = d.afp.SetDecap(p.Decap)
		}
		if err != nil {
			d.log.Warn("update tunnels followed", "err", err)
		}
	}
	go tunnel.Follow(ctx, d.decap, decapRefresh, last, apply, func(err error) {
		d.log.Warn("tunnel detection failed: the tunnels followed stay as they were", "err", err)
	})
}
