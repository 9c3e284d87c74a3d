package main

import (
	"fmt"
	"time"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture/ebpfsrc"
	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/detect"
)

// --kernel-count: the eBPF programs count reads in the kernel and copy
// only what the detector's later stages need (bpf/kcount.h,
// ebpfsrc.KernelReader). Glue only: the logic lives in those packages.
type kernelCount struct {
	det *detect.Detector
	r   *ebpfsrc.KernelReader
	err bool // a read failed (logged once)
}

// kernelCountConfig sets cfg.KernelCount for --kernel-count on an eBPF
// capture.
func (d *daemon) kernelCountConfig(cfg *bpf.Config) error {
	if !d.cf.kcount || d.mode == bpf.ModeAFPacket || d.kc.det == nil {
		return nil
	}
	if d.dcfg.Detector == detect.DetectorTair {
		return fmt.Errorf("--kernel-count needs the default detector, not %q", d.dcfg.Detector)
	}
	b := d.kc.det.Config().Buckets
	if b > bpf.KernelBuckets {
		return fmt.Errorf("--kernel-count counts at most %d buckets: set --buckets %d or less, or --kernel-count=false", bpf.KernelBuckets, bpf.KernelBuckets)
	}
	protos := make(map[uint16]uint8)
	for _, port := range d.ports.List() {
		if p := d.ports.Lookup(port); p == decode.ProtoRedis || p == decode.ProtoMemcache {
			protos[port] = uint8(p)
		}
	}
	cfg.KernelCount = &bpf.KernelCountConfig{SubWindow: time.Duration(d.kc.det.SubWindow()), Buckets: b, Protos: protos}
	// Replies of requests the programs keep would pair with the wrong
	// requests: no reply bytes with kernel counting (yet).
	cfg.Replies, cfg.ReplyHeads = false, false
	return nil
}

// startKernelReader starts moving the kernel's counts into the detector.
func (d *daemon) startKernelReader() {
	if d.bpfCap != nil && d.bpfCap.KernelCounting() {
		d.kc.r = ebpfsrc.NewKernelReader(d.bpfCap, d.kc.det)
		d.log.Info("counting in the kernel", "sub_window", time.Duration(d.kc.det.SubWindow()))
	}
}

// stepKernel runs on the pipeline goroutine at every tick.
func (d *daemon) stepKernel() {
	if d.kc.r == nil {
		return
	}
	if err := d.kc.r.Step(); err != nil && !d.kc.err {
		d.kc.err = true
		d.log.Warn("kernel counting: reading counts failed", "err", err)
	}
}
