package main

import (
	"time"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/metrics"
)

// evidence tracks what the capture missed, to tell the detector (unknown
// is not cold, detect/incomplete.go) and the metrics.
type evidence struct {
	lost    uint64 // ring drops, load errors, stream bytes lost, kernel sub-windows lost
	checked bool
	// The programs' flow sampling. They raise the level themselves when a
	// ring fills past three quarters (raises), and user space brings it
	// back down one halving at a time: from a raise until the level is
	// back to what was in effect before it (planned), the connections
	// skipped are shed, a loss, not sampling the detector can scale for.
	raises            uint64
	level, planned    uint8
	shedding          bool
	outSegs, outBytes uint64 // sampled-out counters at the previous check
	// Totals for the metrics.
	shedSegs, shedBytes uint64
}

// checkEvidence runs on the pipeline goroutine before every tick (so
// before the detector's scan at that tick): when the capture lost anything
// since the previous check, or the programs are still shedding
// connections, the detector is told that the counts of that time are
// incomplete; then that everything up to now has been looked at
// (Confirm), so its cold verdicts on that time may be given.
//
// Losses are counted by the kernel as they happen, and read here: what was
// lost before now is in the counters now. The span reported runs from the
// packet time of the previous tick (a stream hole is found only when the
// records around it are decoded, and a reader behind its rings decodes old
// ones) to the wall clock (packet time is the wall clock of the moment the
// programs copied the packet).
func (d *daemon) checkEvidence() {
	det := d.pl.Detector()
	if det == nil {
		return
	}
	now := time.Now().UnixNano()
	lost := d.pl.StreamStats().BytesLost
	cs, err := d.cap.Counters()
	if err == nil {
		for _, c := range cs {
			lost += c.Dropped["ringbuf_full"] + c.Dropped["kernel"]
		}
	}
	if d.kc.r != nil {
		lost += d.kc.r.Stats().Lost
	}
	missed := d.ev.checked && lost > d.ev.lost
	if smp := d.cap.Sampler(); smp != nil {
		if st, err := smp.Sampling(); err == nil {
			missed = d.ev.sampling(st) || missed
		}
	}
	if missed {
		from := d.clock // packet time of the previous tick
		if from == 0 || from > now {
			from = now - int64(tickEvery)
		}
		det.Incomplete(from, now)
	}
	det.Confirm(now)
	d.ev.lost, d.ev.checked = lost, true
}

// sampling notes the programs' sampling state and reports whether they
// shed connections since the previous check.
func (e *evidence) sampling(st bpf.Sampling) bool {
	// The counters start at 0 with the programs, which this daemon
	// loaded: a raise before the first check is a raise.
	was := e.shedding
	if st.Raises != e.raises && !e.shedding {
		e.shedding, e.planned = true, e.level
	}
	if e.shedding || was {
		// Everything skipped meanwhile counts as shed, including what
		// --max-cpu would have skipped anyway at the planned level.
		e.shedSegs += st.SampledOut - e.outSegs
		e.shedBytes += st.OutBytes - e.outBytes
	}
	if e.shedding && st.Raises == e.raises && st.Level <= e.planned {
		e.shedding = false // back; this last span is still reported
	}
	e.raises, e.level, e.outSegs, e.outBytes = st.Raises, st.Level, st.SampledOut, st.OutBytes
	return e.shedding || was
}

// noteEvidence copies the loss counters to the metrics, every full tick.
func (d *daemon) noteEvidence(det *detect.Detector) {
	var fallback, counted, reply, unattr map[string]uint64
	if bc := d.cap.KernelCounting(); bc != nil && d.kc.r != nil {
		if ks, err := bc.KernelStats(); err == nil {
			fallback = make(map[string]uint64, len(ks.Fallback))
			for r, v := range ks.Fallback {
				fallback[bpf.FallbackReason(r).String()] = v
			}
			counted = map[string]uint64{"segments": ks.Counted, "requests": ks.Requests, "keys": ks.Keys, "duplicates": ks.Duplicate,
				"copied": ks.Counted - ks.Skipped}
			if bc.KernelReplyBytes() {
				reply = map[string]uint64{"seen": ks.ReplyBytes, "attributed": ks.ReplyAttr, "duplicate": ks.ReplyDuplicate}
				unattr = make(map[string]uint64, len(ks.Unattributed))
				for r, v := range ks.Unattributed {
					unattr[bpf.UnattrReason(r).String()] = v
				}
			}
		}
	}
	ds := det.Stats()
	d.col.Update(func(s *metrics.Snapshot) {
		s.IncompleteSpans, s.ColdHeld, s.ColdHeldKernel = ds.IncompleteSpans, ds.ColdHeld, ds.ColdHeldKernel
		s.IncompleteSeconds = float64(ds.IncompleteNs) / 1e9
		s.ShedSegments, s.ShedBytes = d.ev.shedSegs, d.ev.shedBytes
		s.KernelFallback, s.KernelCounted = fallback, counted
		s.KernelReply, s.KernelUnattributed = reply, unattr
	})
}
