package main

import (
	"time"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture/ebpfsrc"
	"github.com/hotsniff/hotsniff/config"
	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/decode/redis"
	"github.com/hotsniff/hotsniff/detect"
)

// --kernel-count: the eBPF programs count reads in the kernel and copy
// only what the detector's later stages need (bpf/kcount.h,
// ebpfsrc.KernelReader). Glue only: the logic lives in those packages.
type kernelCount struct {
	r   *ebpfsrc.KernelReader
	err bool // a read failed (logged once)
}

// kernelCountConfig is the programs' counting configuration for
// --kernel-count on an eBPF capture (nil otherwise). The detector is not
// built yet: a probe of the same configuration gives its sub-window and
// buckets. The settings were validated already (config.Load): with kernel
// counting the detector is the default one, its buckets at most
// bpf.KernelBuckets and no threshold saturates a bucket.
func (d *daemon) kernelCountConfig() (*bpf.KernelCountConfig, error) {
	if !d.cfg.Capture.KernelCounting() {
		return nil, nil
	}
	probe, err := detect.New(d.cfg.Detect.Config, nil)
	if err != nil {
		return nil, err
	}
	b := probe.Config().Buckets
	sub := time.Duration(probe.SubWindow())
	protos := make(map[uint16]uint8)
	for _, port := range d.ports.List() {
		if p := d.ports.Lookup(port); p == decode.ProtoRedis || p == decode.ProtoMemcache {
			protos[port] = uint8(p)
		}
	}
	// A reply-bytes threshold (--hot-bytes, a rule's hot_bytes): the
	// programs frame Redis replies and count their bytes too, and copy
	// the replies of the requests they copy (bpf/kcount.h).
	bytes := config.HotBytesSet(d.cfg.Detect.Config) != ""
	return &bpf.KernelCountConfig{SubWindow: sub, Buckets: b, Protos: protos, Commands: kernelRedisTable(), ReplyBytes: bytes}, nil
}

// kernelRedisTable is the decoder's command table in the loader's terms.
func kernelRedisTable() []bpf.RedisCommand {
	rs := redis.KeyRanges()
	out := make([]bpf.RedisCommand, len(rs))
	for i, c := range rs {
		out[i] = bpf.RedisCommand(c)
	}
	return out
}

// startKernelReader starts moving the kernel's counts into the detector.
func (d *daemon) startKernelReader() {
	if bc := d.cap.KernelCounting(); bc != nil {
		det := d.pl.Detector()
		d.kc.r = ebpfsrc.NewKernelReader(bc, det, det.Config().Buckets)
		d.log.Info("counting in the kernel", "sub_window", time.Duration(det.SubWindow()))
	}
}

// wakeKernel runs on the pipeline goroutine as each kernel sub-window
// ends (pipeline.LiveOptions.Wake): its counts reach the detector then,
// not at the next tick, which is longer than a sub-window at thresholds
// above 1000/s. It returns when the next one ends.
func (d *daemon) wakeKernel(now time.Time) time.Time {
	if d.kc.r == nil {
		return time.Time{} // no kernel counting: never again
	}
	d.stepKernel()
	// Never sooner than a millisecond from now: a clock that has not
	// moved on yet must not make the pipeline spin.
	return later(d.kc.r.Due(), now.Add(time.Millisecond))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// stepKernel runs on the pipeline goroutine at every tick and sub-window.
func (d *daemon) stepKernel() {
	if d.kc.r == nil {
		return
	}
	if err := d.kc.r.Step(); err != nil && !d.kc.err {
		d.kc.err = true
		d.log.Warn("kernel counting: reading counts failed", "err", err)
	}
}
