// Package metrics exposes hotsniff's counters to Prometheus (the metrics README.md lists).
//
// The capture pipeline runs on one goroutine and keeps plain counters; it
// hands a copy to the Collector about once a second (Update). Scrapes read
// that copy under a lock, so the per-packet path never touches a mutex or
// an atomic for metrics. No key ever appears as a label: labels are fixed
// sets (protocols, table op names, reasons, interfaces).
package metrics

import (
	"slices"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/decode/memcache"
	"github.com/hotsniff/hotsniff/decode/redis"
	"github.com/hotsniff/hotsniff/decode/tair"
)

// DecodeErrorReasons are the reasons each decoder reports. Every (proto,
// reason) pair is exported from the first scrape, at zero until it counts,
// so a dashboard panel over hotsniff_decode_errors_total shows a flat line
// instead of "no data" on a healthy node.
var DecodeErrorReasons = map[decode.Proto][]string{
	decode.ProtoRedis:    redis.Reasons(),
	decode.ProtoMemcache: memcache.Reasons(),
	decode.ProtoTair:     tair.Reasons(),
}

// DroppedReasons are the values of capture_dropped_total's reason label,
// always exported for each interface.
var DroppedReasons = []string{"ringbuf_full", "kernel", "truncated"}

// CaptureStat is what one interface's capture counted.
type CaptureStat struct {
	Iface, Mode string
	Packets     uint64
	// Dropped by reason: "ringbuf_full", "kernel" (records or packets) and
	// "truncated" (packets cut short).
	Dropped map[string]uint64
	// TruncatedBytes is payload bytes not copied (snap length, eBPF limit).
	TruncatedBytes uint64
	// DroppedBytes is the payload bytes of the records lost because a
	// ring buffer was full.
	DroppedBytes uint64
}

// Snapshot is the state the pipeline reports.
type Snapshot struct {
	Capture []CaptureStat
	// TruncatedSegments counts segments the capture cut short, seen in user
	// space where the interface is no longer known (iface="all").
	TruncatedSegments uint64
	Requests          map[decode.OpKey]uint64
	Keys              map[decode.Proto]uint64
	DecodeErrors      map[decode.ErrKey]uint64
	Gaps              map[decode.Proto]uint64
	LostBytes         uint64 // stream bytes never seen (holes, snap-length cuts)
	DuplicateBytes    uint64 // stream bytes seen again (retransmissions, one segment on two hooks), counted once
	// Rejected counts segments that cannot belong to a connection the
	// server accepted, by reason; RejectedBytes their payload.
	Rejected      map[string]uint64
	RejectedBytes uint64
	Flows         int
	Buffered      int
	FlowsEvicted  uint64
	HotKeys       map[decode.Proto]int
	// ReplyBytes counts reply bytes decoded per protocol; ReplyUnpaired the
	// part no request could be matched to (joined mid-stream, lost bytes).
	ReplyBytes, ReplyUnpaired map[decode.Proto]uint64
	// Pending counts what the per-connection request queues could not keep.
	Pending decode.PendingStats

	Published      map[string]uint64
	PublishErrors  uint64
	PublishDropped uint64
	PublishLag     float64 // seconds from event time to PUBLISH of the last batch
	// PublishMessages counts channel messages (a v2 message carries a
	// batch); PublishShed the refreshes the node's message budget shed,
	// PublishDelayed the events that waited for it.
	PublishMessages, PublishShed, PublishDelayed uint64
	// Channel says the daemon publishes on a Redis channel; ChannelUp
	// whether its last round trip to that Redis succeeded.
	Channel, ChannelUp bool
	// Adopted counts hot keys taken over from the node's previous daemon.
	Adopted uint64
	// Absorbed counts the absorbed-demand reports of client shims.
	Absorbed Absorbed
	// LateReads counts reads the detector could not place: they reached it
	// more than a sub-window after newer ones (the reader fell behind one
	// capture ring while draining another).
	LateReads uint64
	// Sampling is the capture's flow sampling and the measured cost.
	Sampling Sampling
	// DetectionLatency holds onset-to-event latencies (seconds) observed
	// since the previous Update; they feed a histogram.
	DetectionLatency []float64
	// IncompleteSpans counts the times the capture missed requests (ring
	// drops, stream holes, sampling steps, kernel counts read too late)
	// and the detector was told; ColdHeld the cold verdicts it held
	// because its window held such a span. ColdHeldKernel counts, of
	// those, the verdicts held (--kernel-count) because the kernel counted
	// reads in the key's bucket that user space did not see.
	IncompleteSpans, ColdHeld, ColdHeldKernel uint64
	// IncompleteSeconds is the time those spans cover (overlaps once).
	IncompleteSeconds float64
	// ShedSegments and ShedBytes count the segments, and their request
	// payload bytes, the eBPF programs skipped while they shed connections
	// on their own (a ring buffer filling): a loss, unlike sampling under
	// --max-cpu.
	ShedSegments, ShedBytes uint64
	// KernelFallback counts request segments the eBPF programs copied
	// without counting them (--kernel-count), by reason; nil when off.
	KernelFallback map[string]uint64
	// KernelCounted counts what the eBPF programs counted themselves
	// (--kernel-count), by what: request segments, requests, keys and
	// duplicate segments skipped, and counted segments copied anyway; nil
	// when off. Requests counted in the kernel and not copied are not in
	// requests_total.
	KernelCounted map[string]uint64
	// KernelReply counts the reply bytes the eBPF programs framed
	// themselves (--kernel-count with a reply-bytes threshold), by what:
	// seen (reply payload bytes looked at), attributed (to read keys),
	// duplicate (seen again); KernelUnattributed the bytes they attributed
	// to no key, by reason. nil when off.
	KernelReply, KernelUnattributed map[string]uint64
	// KernelCopied counts the decoded requests (in Requests) of segments
	// the programs had counted already: counted once, in all, are the
	// programs' requests plus Requests minus these.
	KernelCopied map[decode.OpKey]uint64
}

// Sampling is the state of flow sampling under a CPU budget (--max-cpu).
type Sampling struct {
	// Rate is the fraction of connections copied (1: all).
	Rate float64
	// SampledOut counts segments of connections skipped by flow sampling
	// (planned, or shed: Snapshot.ShedSegments).
	SampledOut uint64
	// KernelRaises counts the times the programs lowered the rate because a ring was filling.
	KernelRaises uint64
	// CPUShare is the measured cost (user, system and BPF program time) as a share of one core; Budget the --max-cpu target (0: none).
	CPUShare, Budget float64
	// Reportable is the lowest rate (per second) a key is reported at under
	// the sampling in effect: the lowest threshold, or higher when sampling
	// is too deep to tell keys near it apart (0: not known).
	Reportable float64
}

// Absorbed counts absorbed-demand reports: those credited, the local reads
// they added to keys' demand, and those not credited, by reason
// ("malformed", "unpaired", "not_hot", "capped": credited only up to the
// per-key or per-client bound, "held": from a client that alone held the
// key hot past absorbed_hold).
type Absorbed struct {
	Reports, Hits uint64
	Rejected      map[string]uint64
}

// AbsorbedReasons are the values of the reason label, always exported.
var AbsorbedReasons = []string{"malformed", "unpaired", "not_hot", "capped", "held"}

// Collector is a prometheus.Collector over the last Snapshot.
type Collector struct {
	mu   sync.Mutex
	snap Snapshot
	lat  prometheus.Histogram

	packets, dropped, truncated, requests, keys, decodeErrs, gaps, lost, dup,
	flows, buffered, evicted, hot, published, pubErrs, pubDropped, pubLag *prometheus.Desc
	sampleRate, sampledOut, sampleRaises, cpuShare, cpuBudget, reportable                        *prometheus.Desc
	pubMsgs, pubOverflow                                                                         *prometheus.Desc
	incomplete, coldHeld, coldHeldKernel, kernelFallback, kernelCounted, rejected, rejectedBytes *prometheus.Desc
	kernelReply, kernelUnattr                                                                    *prometheus.Desc
	incompleteSecs, shed, shedBytes, droppedBytes                                                *prometheus.Desc
	channelUp, adopted                                                                           *prometheus.Desc
	absReports, absHits, absRejected, lateReads                                                  *prometheus.Desc
	replyBytes, replyUnpaired, pendingDropped, pendingDesyncs, pendingHeld                       *prometheus.Desc
	kernelCopied                                                                                 *prometheus.Desc
}

// New returns a Collector; register it with a prometheus.Registry.
func New() *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("hotsniff_"+name, help, labels, nil)
	}
	return &Collector{
		lat: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hotsniff_detection_latency_seconds",
			Help:    "Time from a key's traffic crossing the threshold to its hot event, in packet time.",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5},
		}),
		packets:       d("packets_total", "Packets seen by the capture.", "iface", "mode"),
		dropped:       d("capture_dropped_total", "Packets or records lost by the capture.", "iface", "reason"),
		droppedBytes:  d("capture_dropped_bytes_total", "Payload bytes of the records lost because an eBPF ring buffer was full (capture_dropped_total{reason=\"ringbuf_full\"} counts the records).", "iface"),
		truncated:     d("capture_truncated_bytes_total", "Payload bytes not copied by the capture (copy limit, snap length).", "iface"),
		requests:      d("requests_total", "Decoded requests (MGET a b is one).", "proto", "op"),
		keys:          d("keys_total", "Decoded key occurrences (MGET a b is two), reads and writes.", "proto"),
		decodeErrs:    d("decode_errors_total", "Bytes the decoders could not make sense of, by reason.", "proto", "reason"),
		gaps:          d("stream_gaps_total", "Times a decoder lost bytes of a connection and resynchronised.", "proto"),
		lost:          d("stream_lost_bytes_total", "Stream bytes never seen: holes given up on and snap-length cuts."),
		rejected:      d("stream_rejected_total", "Segments that cannot belong to a connection the server accepted (forged or stray), never decoded: unconfirmed (no handshake or server acknowledgment yet), out_of_window (sequence or acknowledgment number far from the connection's), unexpected_syn (a SYN on an accepted connection).", "reason"),
		rejectedBytes: d("stream_rejected_bytes_total", "Payload bytes of the rejected segments."),
		dup:           d("stream_duplicate_bytes_total", "Stream bytes seen more than once (retransmissions, or one segment captured on two hooks such as a pod's veth and the uplink), counted once."),
		flows:         d("stream_flows", "Connections tracked now."),
		buffered:      d("stream_buffered_bytes", "Bytes held for reassembly now."),
		evicted:       d("stream_flows_evicted_total", "Connections dropped to respect the flow and memory bounds."),
		hot:           d("hot_keys", "Keys hot now.", "proto"),
		published:     d("published_total", "Events published.", "type"),
		pubErrs:       d("publish_errors_total", "Failed publish attempts."),
		pubDropped:    d("publish_queue_dropped_total", "Events dropped because the publish queue was full."),
		pubLag:        d("publish_lag_seconds", "Event time to publish time of the last batch."),
		lateReads:     d("detect_late_reads_total", "Reads the detector dropped because they reached it more than a sub-window (window/8) after newer ones: the reader fell behind on one capture ring."),
		absReports:    d("absorbed_reports_total", "Absorbed-demand reports of client shims credited to a hot key."),
		absHits:       d("absorbed_hits_total", "Reads client shims served locally and reported, credited to hot keys' demand."),
		absRejected: d("absorbed_rejected_total",
			"Absorbed-demand reports not credited (capped: credited only up to the per-key bound), by reason.", "reason"),
		sampleRate:     d("capture_sample_rate", "Fraction of connections the capture copies (1: all; lower under the --max-cpu budget). Counts and rates are scaled back to true units."),
		sampledOut:     d("capture_sampled_out_total", "Segments of connections skipped by flow sampling: on purpose under --max-cpu, or shed by the programs when a ring was filling (those are also in capture_shed_total, a loss)."),
		sampleRaises:   d("capture_sample_kernel_steps_total", "Times the eBPF programs halved the sample rate themselves because a ring buffer was more than three quarters full."),
		cpuShare:       d("cpu_share", "Measured cost of hotsniff as a share of one core: user and system time plus eBPF program run time."),
		cpuBudget:      d("cpu_budget", "The --max-cpu budget as a share of one core (0: none)."),
		reportable:     d("detect_reportable_qps", "Lowest rate (requests per second) at which a key is reported under the sampling in effect: the lowest threshold, or higher when sampling is too deep to tell keys near it apart."),
		incomplete:     d("detect_incomplete_spans_total", "Times the capture missed requests (ring buffer drops, stream holes, connections the programs shed, kernel counts read too late) and the detector was told: rates over those spans are lower bounds."),
		incompleteSecs: d("detect_incomplete_seconds_total", "Seconds of traffic whose counts are incomplete because the capture missed requests (the spans of detect_incomplete_spans_total, overlaps counted once): keys are not announced cold over them."),
		shed:           d("capture_shed_total", "Segments of connections the eBPF programs shed on their own because a ring buffer was more than three quarters full, until the sample rate was back where it was: a loss (what they carried was not seen), unlike sampling under --max-cpu."),
		shedBytes:      d("capture_shed_bytes_total", "Request payload bytes of the segments counted in capture_shed_total."),
		coldHeld:       d("detect_cold_held_total", "Cold verdicts held because the window held a span of missed requests: a key turns cold only on evidence of low demand."),
		coldHeldKernel: d("detect_cold_held_kernel_total", "Of detect_cold_held_total, the verdicts held (--kernel-count) because the kernel counted reads in the key's bucket that user space did not see, enough to keep it above the cold line."),
		kernelFallback: d("kernel_fallback_total",
			"Request segments the eBPF programs copied without counting them in the kernel (--kernel-count), by reason.", "reason"),
		kernelCounted: d("kernel_counted_total",
			"What the eBPF programs counted in the kernel themselves (--kernel-count): what=segments (request segments parsed whole), requests, keys, duplicates (segments seen a second time, not counted again), copied (segments counted and copied anyway: a read in a located bucket, a write to a hot key, a session command). Requests counted only there are not in requests_total.", "what"),
		kernelReply: d("kernel_reply_bytes_total",
			"Reply bytes the eBPF programs framed themselves (--kernel-count with a reply-bytes threshold): what=seen (reply payload bytes looked at), attributed (to the read keys they answer, in the kernel's byte counts), duplicate (seen a second time, not counted again).", "what"),
		kernelUnattr: d("kernel_reply_unattributed_bytes_total",
			"Reply bytes the eBPF programs attributed to no key (--kernel-count with a reply-bytes threshold), by reason: nokey (a command that reads no key), push, unsynced (the connection's requests were not all counted in the kernel, until a quiet point), dead (pub/sub, MONITOR), bad, depth, unpaired, gap (a reply segment missed), steps, noflow (no reply state: memcached, the table full), load, race.", "reason"),
		kernelCopied: d("kernel_copied_requests_total",
			"Decoded requests (in requests_total) of segments the eBPF programs had counted themselves and copied anyway (--kernel-count): every request is counted once in kernel_counted_total{what=\"requests\"} + requests_total - this.", "proto", "op"),
		pubMsgs:     d("publish_messages_total", "Channel messages sent (one PUBLISH each; a v2 message carries a batch of events)."),
		pubOverflow: d("publish_budget_overflow_total", "Events over this node's channel message budget: shed (refreshes left out) or delayed (waited, batched).", "action"),
		replyBytes:  d("reply_bytes_total", "Reply bytes decoded (TCP payload from the server), attributed to keys or not.", "proto"),
		channelUp:   d("channel_up", "1 while the channel Redis answers, 0 while it does not (events queue, bounded, and the capture goes on); absent without --redis-url."),
		adopted:     d("adopted_keys_total", "Hot keys taken over at start from the node's previous daemon (its snapshot section)."),
		replyUnpaired: d("reply_unpaired_bytes_total",
			"Reply bytes that answer no request known to hotsniff (connections joined mid-stream, lost segments, pushes).", "proto"),
		pendingDropped: d("reply_pairing_dropped_total",
			"Requests (what=request) or keys (what=key) not queued for reply pairing because a connection's queue was full.", "what"),
		pendingDesyncs: d("reply_pairing_resets_total", "Times a connection's request queue was thrown away after lost bytes."),
		pendingHeld:    d("reply_pairing_held_bytes", "Memory the per-connection request queues hold now (bounded, 64 MiB by default)."),
	}
}

// Update lets the pipeline change the snapshot under the lock.
func (c *Collector) Update(fn func(s *Snapshot)) {
	c.mu.Lock()
	fn(&c.snap)
	lat := c.snap.DetectionLatency
	c.snap.DetectionLatency = c.snap.DetectionLatency[:0]
	c.mu.Unlock()
	for _, l := range lat {
		c.lat.Observe(l)
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.packets, c.dropped, c.truncated, c.requests, c.keys, c.decodeErrs, c.gaps, c.lost, c.dup, c.flows, c.buffered, c.evicted, c.hot, c.published, c.pubErrs, c.pubDropped, c.pubLag, c.absReports, c.absHits, c.absRejected, c.lateReads, c.pubMsgs, c.pubOverflow, c.replyBytes, c.replyUnpaired, c.pendingDropped, c.pendingDesyncs, c.pendingHeld,
		c.sampleRate, c.sampledOut, c.sampleRaises, c.cpuShare, c.cpuBudget, c.reportable, c.incomplete, c.coldHeld, c.coldHeldKernel, c.incompleteSecs, c.shed, c.shedBytes, c.droppedBytes, c.kernelFallback, c.kernelCounted, c.kernelReply, c.kernelUnattr, c.kernelCopied, c.rejected, c.rejectedBytes, c.channelUp, c.adopted} {
		ch <- d
	}
	c.lat.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.snap
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, cs := range s.Capture {
		counter(c.packets, float64(cs.Packets), cs.Iface, cs.Mode)
		for _, r := range DroppedReasons {
			counter(c.dropped, float64(cs.Dropped[r]), cs.Iface, r)
		}
		for _, r := range sortedKeys(cs.Dropped) {
			if !slices.Contains(DroppedReasons, r) {
				counter(c.dropped, float64(cs.Dropped[r]), cs.Iface, r)
			}
		}
		counter(c.truncated, float64(cs.TruncatedBytes), cs.Iface)
		counter(c.droppedBytes, float64(cs.DroppedBytes), cs.Iface)
	}
	counter(c.dropped, float64(s.TruncatedSegments), "all", "truncated")
	for k, v := range s.Requests {
		counter(c.requests, float64(v), k.Proto.String(), k.Op)
	}
	// Protocols are always present, so rate() works from the first scrape.
	for _, p := range decode.Protos() {
		counter(c.keys, float64(s.Keys[p]), p.String())
		counter(c.gaps, float64(s.Gaps[p]), p.String())
		gauge(c.hot, float64(s.HotKeys[p]), p.String())
		counter(c.replyBytes, float64(s.ReplyBytes[p]), p.String())
		counter(c.replyUnpaired, float64(s.ReplyUnpaired[p]), p.String())
	}
	counter(c.pendingDropped, float64(s.Pending.Overflow), "request")
	counter(c.pendingDropped, float64(s.Pending.KeysDropped), "key")
	counter(c.pendingDesyncs, float64(s.Pending.Desyncs))
	gauge(c.pendingHeld, float64(s.Pending.Held))
	for _, p := range decode.Protos() {
		for _, r := range DecodeErrorReasons[p] {
			counter(c.decodeErrs, float64(s.DecodeErrors[decode.ErrKey{Proto: p, Reason: r}]), p.String(), r)
		}
	}
	for k, v := range s.DecodeErrors {
		if !slices.Contains(DecodeErrorReasons[k.Proto], k.Reason) {
			counter(c.decodeErrs, float64(v), k.Proto.String(), k.Reason)
		}
	}
	counter(c.lost, float64(s.LostBytes))
	for _, r := range sortedKeys(s.Rejected) {
		counter(c.rejected, float64(s.Rejected[r]), r)
	}
	counter(c.rejectedBytes, float64(s.RejectedBytes))
	counter(c.dup, float64(s.DuplicateBytes))
	gauge(c.flows, float64(s.Flows))
	gauge(c.buffered, float64(s.Buffered))
	counter(c.evicted, float64(s.FlowsEvicted))
	for _, t := range []string{"hot", "cold", "invalidate"} {
		counter(c.published, float64(s.Published[t]), t)
	}
	counter(c.pubErrs, float64(s.PublishErrors))
	counter(c.pubDropped, float64(s.PublishDropped))
	gauge(c.pubLag, s.PublishLag)
	counter(c.pubMsgs, float64(s.PublishMessages))
	if s.Channel {
		up := 0.0
		if s.ChannelUp {
			up = 1
		}
		gauge(c.channelUp, up)
	}
	counter(c.adopted, float64(s.Adopted))
	counter(c.pubOverflow, float64(s.PublishShed), "shed")
	counter(c.pubOverflow, float64(s.PublishDelayed), "delayed")
	counter(c.absReports, float64(s.Absorbed.Reports))
	counter(c.lateReads, float64(s.LateReads))
	counter(c.absHits, float64(s.Absorbed.Hits))
	for _, r := range AbsorbedReasons {
		counter(c.absRejected, float64(s.Absorbed.Rejected[r]), r)
	}
	rate := s.Sampling.Rate
	if rate == 0 {
		rate = 1
	}
	gauge(c.sampleRate, rate)
	counter(c.sampledOut, float64(s.Sampling.SampledOut))
	counter(c.sampleRaises, float64(s.Sampling.KernelRaises))
	counter(c.incomplete, float64(s.IncompleteSpans))
	counter(c.coldHeld, float64(s.ColdHeld))
	counter(c.coldHeldKernel, float64(s.ColdHeldKernel))
	counter(c.incompleteSecs, s.IncompleteSeconds)
	counter(c.shed, float64(s.ShedSegments))
	counter(c.shedBytes, float64(s.ShedBytes))
	for _, w := range sortedKeys(s.KernelCounted) {
		counter(c.kernelCounted, float64(s.KernelCounted[w]), w)
	}
	for k, v := range s.KernelCopied {
		counter(c.kernelCopied, float64(v), k.Proto.String(), k.Op)
	}
	for _, r := range sortedKeys(s.KernelFallback) {
		counter(c.kernelFallback, float64(s.KernelFallback[r]), r)
	}
	for _, w := range sortedKeys(s.KernelReply) {
		counter(c.kernelReply, float64(s.KernelReply[w]), w)
	}
	for _, r := range sortedKeys(s.KernelUnattributed) {
		counter(c.kernelUnattr, float64(s.KernelUnattributed[r]), r)
	}
	gauge(c.cpuShare, s.Sampling.CPUShare)
	gauge(c.cpuBudget, s.Sampling.Budget)
	if s.Sampling.Reportable > 0 {
		gauge(c.reportable, s.Sampling.Reportable)
	}
	c.lat.Collect(ch)
}

func sortedKeys(m map[string]uint64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
