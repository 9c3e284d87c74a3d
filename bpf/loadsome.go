package bpf

import (
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
	if err := c.loadInto(&o, false); err != nil {
		return err
	}
	objs.HotsniffTcIngress, objs.HotsniffTcEgress, objs.Stats = o.Ingress, o.Egress, o.Stats
	return nil
}

// loadCgroup loads the cgroup_skb programs and the counters into objs.
func (c *Capture) loadCgroup(objs *hotsniffObjects) error {
	var o cgroupObjects
	if err := c.loadInto(&o, false); err != nil {
		return err
	}
	objs.HotsniffCgroupIngress, objs.HotsniffCgroupEgress, objs.Stats = o.Ingress, o.Egress, o.Stats
	return nil
}
