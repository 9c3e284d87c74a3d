package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// tcObjects and cgroupObjects name the programs one kind of attachment runs.
// Loading only those skips verifying the others: each verification costs a
// good part of a second on a busy node, and kernel memory for as long as
// the attachment lives.
type tcObjects struct {
	Ingress *ebpf.Program `ebpf:"hotsniff_tc_ingress"`
	Egress  *ebpf.Program `ebpf:"hotsniff_tc_egress"`
	Stats   *ebpf.Map     `ebpf:"stats"`
}

type cgroupObjects struct {
	Ingress *ebpf.Program `ebpf:"hotsniff_cgroup_ingress"`
	Egress  *ebpf.Program `ebpf:"hotsniff_cgroup_egress"`
	Stats   *ebpf.Map     `ebpf:"stats"`
}

// loadTC loads the TC programs and the counters into objs, whose other
// programs stay nil.
func (c *Capture) loadTC(objs *hotsniffObjects) error {
	var o tcObjects
	if err := c.loadInto(&o); err != nil {
		return err
	}
	objs.HotsniffTcIngress, objs.HotsniffTcEgress, objs.Stats = o.Ingress, o.Egress, o.Stats
	return nil
}

// loadCgroup loads the cgroup_skb programs and the counters into objs.
func (c *Capture) loadCgroup(objs *hotsniffObjects) error {
	var o cgroupObjects
	if err := c.loadInto(&o); err != nil {
		return err
	}
	objs.HotsniffCgroupIngress, objs.HotsniffCgroupEgress, objs.Stats = o.Ingress, o.Egress, o.Stats
	return nil
}

// loadInto is load for a subset of the programs, for packets with a link
// layer header (raw_ip 0): the shared maps are c's.
func (c *Capture) loadInto(to any) error {
	spec := c.spec.Copy()
	if err := spec.Variables[hotsniffVarRawIp].Set(uint8(0)); err != nil {
		return fmt.Errorf("set raw_ip: %w", err)
	}
	err := spec.LoadAndAssign(to, &ebpf.CollectionOptions{
		MapReplacements: map[string]*ebpf.Map{
			hotsniffMapRings: c.rings,
			hotsniffMapPorts: c.ports,
			hotsniffMapWake:  c.wake,
			// Sampling state is one for all attachments (sampling.go).
			hotsniffMapSampling:   c.sampling,
			hotsniffMapSampledOut: c.sampled,
		},
	})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("load bpf programs: %w", ve)
		}
		return fmt.Errorf("load bpf programs: %w", err)
	}
	return nil
}
