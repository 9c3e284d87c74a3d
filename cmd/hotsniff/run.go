package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf/rlimit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/capture/afpacket"
	"github.com/hotsniff/hotsniff/capture/tunnel"
	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/webview"
	"github.com/hotsniff/hotsniff/metrics"
	"github.com/hotsniff/hotsniff/publish"
	"github.com/hotsniff/hotsniff/stream"
)

// captureFlags choose how `run` captures.
type captureFlags struct {
	ifaces     []string
	mode       string
	cgroupPath string
	ringSize   int
	maxCopy    int
	listen     string
	webCfg     string
	health     string
	check      bool
	replies    bool
	replyCopy  int
	pprof      bool
	procs      int
	nice       int
	maxCPU     float64
	decap      string
}

func newRunCmd() *cobra.Command {
	var (
		sf  streamFlags
		df  detectFlags
		rf  redisFlags
		cf  captureFlags
		chf channelFlags
	)
	cmd := &cobra.Command{
		Use:   "run [flags]",
		Short: "Live daemon: capture cache traffic (eBPF XDP/TC, or AF_PACKET), detect and publish hot keys",
		Long: `Captures traffic on the server ports of the given interfaces with eBPF (XDP or
TC into a ring buffer; needs CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON) or AF_PACKET
(needs CAP_NET_RAW), decodes every request, detects hot keys and publishes
them on the Redis channel (or prints them when --redis-url is unset). Serves
a web view at /, /metrics, /hotkeys, /healthz and /readyz on --listen, with
TLS and basic auth from --web-config. SIGTERM or SIGINT stops
it cleanly: the pipeline drains, the publisher flushes, the programs detach.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ports, scfg, dcfg, err := loadConfig(cmd, &sf, &df)
			if err != nil {
				return err
			}
			mode, err := bpf.ParseMode(cf.mode)
			if err != nil {
				return usageError{err}
			}
			var target *publish.Target
			if url := rf.resolvedURL(); url != "" {
				if target, err = publish.ParseURL(url); err != nil {
					return usageError{err}
				}
			}
			if err := validateMaxCPU(cf.maxCPU); err != nil {
				return err
			}
			if err := chf.apply(&publish.Options{}); err != nil {
				return err
			}
			if err := checkWebConfig(cf.webCfg); err != nil {
				return err
			}
			if cf.replyCopy < 0 {
				return usagef("--reply-copy %d: must be 0 (no reply payload) or a number of bytes", cf.replyCopy)
			}
			decap, err := tunnel.Parse(cf.decap)
			if err != nil {
				return usageError{err}
			}
			if cf.nice < -20 || cf.nice > 19 {
				return usagef("--nice %d: must be between -20 and 19", cf.nice)
			}
			if cf.check {
				fmt.Fprintf(cmd.OutOrStdout(), "config ok: ports %v, capture %s, hot-qps %g, detector %s, %d rules, %d ignore patterns\n",
					ports.List(), mode, dcfg.HotQPS, dcfg.Detector, len(dcfg.Rules), len(dcfg.Ignore))
				fmt.Fprintln(cmd.OutOrStdout(), tuningSummary(dcfg))
				return nil
			}
			if cf.procs > 0 {
				runtime.GOMAXPROCS(cf.procs)
			}
			cur, err := currentNice()
			if err != nil {
				return err
			}
			if n, ok := niceToSet(cf.nice, cmd.Flags().Changed("nice"), cur); ok {
				if err := setNice(n); err != nil {
					return usageError{fmt.Errorf("%w (running at nice %d: a lower --nice needs CAP_SYS_NICE)", err, cur)}
				}
			}
			base := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			d := &daemon{
				log: base.With("component", "run"), base: base,
				sf: sf, df: df, rf: rf, cf: cf, chf: chf, mode: mode, ports: ports, scfg: scfg, dcfg: dcfg, target: target, decap: decap,
				stdout: cmd.OutOrStdout(),
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return d.run(ctx)
		},
	}
	sf.register(cmd)
	df.register(cmd)
	rf.register(cmd.Flags())
	chf.register(cmd.Flags(), 1000)
	f := cmd.Flags()
	f.StringArrayVar(&cf.ifaces, "iface", nil, "interface name or pattern to capture on (repeatable; patterns such as 'cali*' are followed as interfaces appear and go; default: the physical interfaces that are up plus pods' interfaces: "+strings.Join(defaultPodPatterns, " ")+")")
	f.StringVar(&cf.mode, "capture", "auto", "capture mode: auto (cgroup when cgroup v2 is mounted and no --iface is given, else XDP on physical NICs and TC on veth and loopback; AF_PACKET when eBPF is unavailable), cgroup, xdp, tc, afpacket")
	f.StringVar(&cf.cgroupPath, "cgroup-path", "", "cgroup v2 hierarchy the cgroup mode attaches to (default: /sys/fs/cgroup, else /sys/fs/cgroup/unified; in a container, the host's hierarchy mounted in)")
	f.IntVar(&cf.ringSize, "ring-size", 0, "eBPF ring buffer size per CPU (or AF_PACKET ring per interface) in bytes; 0: 2 MiB per online CPU for eBPF (at most 64 MiB in all, at least 512 KiB each; small rings stay in the CPU cache; offline CPUs get one page), 32 MiB for AF_PACKET")
	f.IntVar(&cf.maxCopy, "max-copy", 256<<10, "most payload bytes copied from one packet by eBPF (GRO/GSO super-packets); the rest is counted as truncated")
	f.StringVar(&cf.listen, "listen", ":9464", "address for / (web view), /metrics, /hotkeys, /healthz, /readyz (empty: none)")
	f.StringVar(&cf.health, "health-listen", "", "also serve /healthz and /readyz alone, in plain HTTP without the web configuration, on this address (e.g. 127.0.0.1:9465, for the kubelet's probes when --web-config asks for credentials)")
	f.StringVar(&cf.webCfg, "web-config", "", "web configuration file (Prometheus exporter format: tls_server_config, basic_auth_users) for TLS, client certificates and basic auth on every --listen endpoint; re-read on each request")
	f.BoolVar(&cf.check, "config-check", false, "load and validate the configuration, print a summary and exit")
	f.BoolVar(&cf.pprof, "pprof", false, "also serve Go profiling at /debug/pprof/ on --listen")
	// One pipeline goroutine does the work; the publisher and HTTP are
	// light. More Ps only add threads that the runtime wakes to look for
	// work on every ring wakeup: in profiles of `run` on 2 vCPUs that was a
	// third of the daemon's CPU, and on a 64-core node it is worse.
	f.IntVar(&cf.procs, "gomaxprocs", 1, "threads running Go code at once (GOMAXPROCS); 0 keeps Go's default (the GOMAXPROCS variable, else the CPU count or limit)")
	f.IntVar(&cf.nice, "nice", 10, "CPU priority of the daemon's threads, -20 (highest) to 19: by default it yields to the cache server when the CPU is saturated (a daemon started at a higher nice value keeps it)")
	f.Float64Var(&cf.maxCPU, "max-cpu", 0, "CPU budget as a share of one core (0.05: 5 %), the eBPF programs' run time included: above it the programs copy only part of the connections (in steps of 4 %) and counts are scaled back, thresholds staying in true requests per second; 0: no budget")
	f.BoolVar(&cf.replies, "capture-replies", false, "eBPF: copy server replies whole (exact reply bytes whatever the traffic; replies are most of the bytes)")
	f.StringVar(&cf.decap, "decap", tunnel.Default, "overlay tunnels followed to the inner segment on interfaces (xdp, tc, afpacket): auto (the VXLAN, Geneve and IP-in-IP devices on the node, to or from their local endpoints), off, or a list such as vxlan:4789,vxlan:8472/1,geneve:6081,ipip (PORT/VNI; to or from the node's addresses), which may include auto; a UDP datagram that is not such a tunnel is never decoded")
	f.IntVar(&cf.replyCopy, "reply-copy", bpf.DefaultReplyCopy, "eBPF without --capture-replies: copy at most this many bytes of each reply segment, enough to read reply headers and attribute reply bytes to keys (0: copy no reply payload; no reply bytes)")
	return cmd
}

// resolvedURL is --redis-url or HOTSNIFF_REDIS_URL.
func (f *redisFlags) resolvedURL() string {
	if f.url != "" {
		return f.url
	}
	return os.Getenv("HOTSNIFF_REDIS_URL")
}

// daemon is one `hotsniff run`.
type daemon struct {
	log      *slog.Logger
	base     *slog.Logger // for other packages, which add their own component
	sf       streamFlags
	df       detectFlags
	rf       redisFlags
	cf       captureFlags
	chf      channelFlags
	mode     bpf.Mode
	ports    *stream.Ports
	scfg     stream.Config
	skipErr  bool // a reply skip update failed (logged once)
	dcfg     detect.Config
	target   *publish.Target
	stdout   io.Writer
	decap    tunnel.Setting
	decapNow *capture.Decap // what the captures follow at the start

	src       capture.Source
	bpfCap    *bpf.Capture
	afp       *afpacket.Source
	modeName  string
	truncSegs uint64 // segments with bytes the capture did not copy
	lat       []time.Duration
	samp      *sampler

	col     *metrics.Collector
	hotMu   sync.Mutex
	hot     []event.Event
	beat    atomic.Int64 // pipeline heartbeat, Unix ns
	running atomic.Bool
}

func (d *daemon) run(ctx context.Context) error {
	var em emitters
	var pub *publish.Publisher
	if d.target != nil {
		quietRedisLogs()
		rdb, err := publish.Connect(d.target, d.rf.tlsOptions())
		if err != nil {
			return err
		}
		defer rdb.Close()
		// Redis may be down now: the publisher queues (bounded) and
		// reconnects with backoff; capture starts regardless.
		opt := publish.Options{Channel: d.rf.channel, Node: d.df.node, Logger: d.base}
		if err := d.chf.apply(&opt); err != nil {
			return err
		}
		pub, err = publish.New(rdb, opt)
		if err != nil {
			return err
		}
		em = append(em, pub)
	} else {
		w, err := publish.NewWriter(d.stdout, d.df.output, d.df.node)
		if err != nil {
			return usageError{err}
		}
		em = append(em, w)
	}
	det, err := detect.New(d.dcfg, em)
	if err != nil {
		return usageError{err}
	}
	if err := d.openCapture(); err != nil {
		if pub != nil {
			pub.Close(context.Background())
		}
		return err
	}
	d.followDecap(ctx, d.decapNow)
	d.col = metrics.New()
	d.samp = d.startSampler()
	defer d.samp.close()
	counter := decode.NewCounter(det)
	reg := registry()
	switch {
	case d.bpfCap != nil && d.bpfCap.ReplyHeads():
		// The programs copy reply heads; large values are skipped in the
		// kernel once the reply parser has read their header.
		c := d.bpfCap
		d.scfg.SkipNotify = 2 * int(c.ReplyCopy())
		d.scfg.OnSkip = func(f *decode.Flow, start, end uint32) {
			if err := c.SetReplySkip(f.Server, f.Client, start, end); err != nil && !d.skipErr {
				d.skipErr = true
				d.log.Warn("reply skips: kernel map update failed; replies are still decoded, at full copy cost", "err", err)
			}
		}
	case d.bpfCap != nil && !d.cf.replies:
		reg = withoutReplies(reg)
		d.scfg.Replies = false // no reply parser drains the queues
	}
	// Anyone on the wire can send a segment: only those that can belong to
	// a connection the server accepted are decoded.
	d.scfg.Verify = true
	asm := stream.NewAssembler(d.scfg, d.ports, reg, counter)

	var srv *http.Server
	if d.cf.listen != "" {
		srv, err = d.serve()
		if err != nil {
			d.src.Close()
			return err
		}
	}
	// The pipeline owns the assembler, decoders and detector: one goroutine,
	// no locks on the per-packet path.
	done := make(chan error, 1)
	d.beat.Store(time.Now().UnixNano()) // /healthz is ok before the first tick
	go func() { done <- d.pipeline(asm, counter, det, pub) }()
	d.running.Store(true)
	d.log.Info("capturing", "mode", d.modeName, "ports", d.ports.List(), "listen", d.cf.listen, "publish", d.target != nil)

	var perr error
	select {
	case <-ctx.Done():
		d.log.Info("stopping")
		d.src.Close() // unblocks Next with io.EOF and detaches the programs
		perr = <-done
	case perr = <-done:
		d.src.Close()
	}
	d.running.Store(false)
	asm.Flush()
	det.Flush() // merged invalidates still waiting for their interval
	if pub != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		before := pub.Stats().Dropped
		cerr := pub.Close(cctx)
		cancel()
		// Subscribers missed what was lost: the exit status says so, as
		// replay's does, so a supervisor or a script sees it.
		if lost := pub.Stats().Dropped - before; (cerr != nil || lost > 0) && perr == nil {
			perr = fmt.Errorf("publish on shutdown: %d event(s) not published to %s: %w", lost, d.target.Redacted, cmp.Or(cerr, errLostOnClose))
		}
	}
	if srv != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		srv.Shutdown(cctx)
		cancel()
	}
	return perr
}

var errLostOnClose = errors.New("Redis did not take them before the shutdown deadline")

// openCapture attaches eBPF at the cgroup root or on the interfaces (see
// capturemode.go), or opens AF_PACKET.
func (d *daemon) openCapture() error {
	ports := d.ports.List()
	cfg := bpf.Config{Ports: ports, RingSize: d.cf.ringSize, MaxCopy: uint32(d.cf.maxCopy), Replies: d.cf.replies,
		ReplyHeads: !d.cf.replies && d.cf.replyCopy > 0, ReplyCopy: uint32(max(d.cf.replyCopy, 0)), Logger: d.base}
	if d.mode != bpf.ModeAFPacket {
		// Kernels before 5.11 charge BPF maps to the locked memory limit;
		// later ones ignore it. Without CAP_SYS_RESOURCE this fails and
		// the permission error below says what to do.
		_ = rlimit.RemoveMemlock()
	}
	if d.chooseCgroup() {
		err := d.openCgroup(cfg)
		if err == nil {
			return nil
		}
		if d.mode == bpf.ModeCgroup {
			return privilegeError("start cgroup capture", "ebpf", err)
		}
		d.log.Warn("cgroup capture unavailable, capturing on interfaces", "err", err)
	}
	// Interfaces see tunnel packets; sockets (cgroup) never do.
	d.decapNow = d.resolveDecap()
	cfg.Decap = d.decapNow
	names, patterns, err := d.ifaceSpec()
	if err != nil {
		return err
	}
	if d.mode != bpf.ModeAFPacket {
		err := d.openInterfaces(cfg, names, patterns)
		if err == nil {
			return nil
		}
		if d.mode != bpf.ModeAuto {
			return privilegeError(fmt.Sprintf("start %s capture", d.mode), "ebpf", err)
		}
		d.log.Warn("eBPF unavailable, falling back to AF_PACKET", "err", privilegeError("start eBPF capture", "ebpf", err))
	}
	ifaces, err := expand(names, patterns)
	if err != nil {
		return err
	}
	if len(ifaces) == 0 {
		return usagef("no interface matches --iface %v", patterns)
	}
	if len(patterns) > 0 {
		d.log.Warn("afpacket captures the interfaces matching --iface patterns at start only; interfaces created later need an eBPF mode", "ifaces", ifaces)
	}
	src, err := afpacket.Open(afpacket.Config{Ifaces: ifaces, Ports: ports, Blocks: max(1, cmp.Or(d.cf.ringSize, afpacketRingSize)/(1<<20)), Decap: d.decapNow, Logger: d.base})
	if err != nil {
		if d.mode == bpf.ModeAuto && errors.Is(err, os.ErrPermission) {
			return privilegeError("start capture (eBPF, then AF_PACKET)", "auto", err)
		}
		return privilegeError("start afpacket capture", "afpacket", err)
	}
	d.src, d.afp, d.modeName = src, src, "afpacket"
	return nil
}

// defaultIfaces picks the interfaces a cache node's traffic arrives on: the
// physical ones that are up, or else every non-loopback one that is up.
func defaultIfaces() ([]string, error) {
	all, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	var phys, up []string
	for _, i := range all {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		up = append(up, i.Name)
		if _, err := os.Stat(filepath.Join("/sys/class/net", i.Name, "device")); err == nil {
			phys = append(phys, i.Name)
		}
	}
	if len(phys) > 0 {
		return phys, nil
	}
	if len(up) == 0 {
		return nil, usagef("no interface to capture on: pass --iface")
	}
	return up, nil
}

// afpacketRingSize is the default AF_PACKET ring per interface.
const afpacketRingSize = 32 << 20

// tickEvery is how often the pipeline expires flows, lets the detector see
// time pass without traffic, and refreshes what HTTP and metrics read.
const tickEvery = 100 * time.Millisecond

func (d *daemon) pipeline(asm *stream.Assembler, counter *decode.Counter, det *detect.Detector, pub *publish.Publisher) error {
	var seg capture.Segment
	dl, _ := d.src.(interface{ SetDeadline(time.Time) })
	next := time.Now().Add(tickEvery)
	if dl != nil {
		dl.SetDeadline(next)
	}
	lastMetrics := time.Time{}
	heads := d.bpfCap != nil && d.bpfCap.ReplyHeads()
	var level uint8 // flow sampling level of the records (capture.SampleRate)
	for n := 1; ; n++ {
		err := d.src.Next(&seg)
		switch {
		case err == nil:
			// With reply heads, reply segments leave bytes out on purpose.
			if seg.Missing > 0 && (!heads || d.ports.Lookup(seg.Src.Port()) == decode.ProtoUnknown) {
				d.truncSegs++
			}
			if seg.SampleLevel != level {
				level = seg.SampleLevel
				det.SetSampleRate(capture.SampleRate(level))
			}
			asm.Add(&seg)
			if n&1023 != 0 {
				continue
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
		case errors.Is(err, io.EOF):
			// Closed: the kernel counters are gone with the programs.
			d.tick(time.Now(), time.Now(), asm, counter, det, pub, false)
			return nil
		default:
			return fmt.Errorf("capture: %w", err)
		}
		now := time.Now()
		if now.Before(next) {
			continue
		}
		full := now.Sub(lastMetrics) >= time.Second
		// The detector and the stream layer run on packet time. Caught up
		// (the capture had nothing more), time passes for them as on the
		// wall; behind (records still waiting: the reader was descheduled
		// on a busy node), the clock stops at the last record, or every
		// record of the backlog would arrive "late" and not count.
		clock := now
		if err == nil && seg.TS < now.UnixNano() {
			clock = time.Unix(0, seg.TS)
		}
		d.tick(clock, now, asm, counter, det, pub, full)
		if full {
			lastMetrics = now
		}
		next = now.Add(tickEvery)
		if dl != nil {
			dl.SetDeadline(next)
		}
	}
}

// tick runs on the pipeline goroutine: time-driven work, and (full) a
// fresh copy of everything HTTP and metrics read. clock is packet time for
// the stream layer and the detector, now the wall clock.
func (d *daemon) tick(clock, now time.Time, asm *stream.Assembler, counter *decode.Counter, det *detect.Detector, pub *publish.Publisher, full bool) {
	ns := clock.UnixNano()
	asm.Tick(ns)
	det.Tick(ns)
	d.beat.Store(now.UnixNano())
	if !full {
		if d.samp != nil && d.samp.early(now) {
			d.samp.step(d, det, now)
		}
		return
	}
	hot := det.HotSet()
	d.hotMu.Lock()
	d.hot = hot
	d.hotMu.Unlock()
	d.lat = det.DrainLatencies(d.lat[:0])
	if d.samp != nil {
		d.samp.step(d, det, now)
		d.col.Update(func(s *metrics.Snapshot) { s.Sampling = d.samp.last })
	}
	if pub != nil {
		pub.UpdateRates(hot) // the snapshot carries current rates
	}
	d.updateMetrics(asm.Stats(), counter, hot, pub)
	ds := det.Stats()
	d.col.Update(func(s *metrics.Snapshot) { s.Absorbed, s.LateReads = absorbedMetrics(ds), ds.Late })
}

func (d *daemon) updateMetrics(st stream.Stats, c *decode.Counter, hot []event.Event, pub *publish.Publisher) {
	capStats := d.captureStats()
	d.col.Update(func(s *metrics.Snapshot) {
		s.Capture = capStats
		s.TruncatedSegments = d.truncSegs
		s.Requests = c.Requests()
		s.DecodeErrors = copyMap(c.Errors, s.DecodeErrors)
		if s.Keys == nil {
			s.Keys, s.Gaps, s.HotKeys = map[decode.Proto]uint64{}, map[decode.Proto]uint64{}, map[decode.Proto]int{}
		}
		clear(s.HotKeys)
		if s.ReplyBytes == nil {
			s.ReplyBytes, s.ReplyUnpaired = map[decode.Proto]uint64{}, map[decode.Proto]uint64{}
		}
		for _, p := range decode.Protos() {
			s.Keys[p] = c.Reads[p] + c.Writes[p]
			s.Gaps[p] = st.Gaps[p]
			s.ReplyBytes[p], s.ReplyUnpaired[p] = c.ReplyBytes[p], c.Unpaired[p]
		}
		s.Pending = st.Pending
		for i := range hot {
			if p, ok := decode.ParseProto(hot[i].Proto); ok {
				s.HotKeys[p]++
			}
		}
		s.LostBytes, s.Flows, s.Buffered, s.FlowsEvicted = st.BytesLost, st.FlowsActive, st.BufferedBytes, st.FlowsEvicted+st.MemEvictions
		s.DuplicateBytes = st.BytesRetransmitted
		if s.Rejected == nil {
			s.Rejected = map[string]uint64{}
		}
		for i, r := range stream.RejectReasons {
			s.Rejected[r] = st.Rejected[i]
		}
		s.RejectedBytes = st.RejectedBytes
		if pub != nil {
			ps := pub.Stats()
			s.Published, s.PublishErrors, s.PublishDropped, s.PublishLag = ps.Published, ps.Errors, ps.Dropped, ps.LastLag.Seconds()
			s.PublishMessages, s.PublishShed, s.PublishDelayed = ps.Messages, ps.Shed, ps.Delayed
		}
		for _, l := range d.lat {
			s.DetectionLatency = append(s.DetectionLatency, l.Seconds())
		}
	})
}

func copyMap[K comparable](src map[K]uint64, dst map[K]uint64) map[K]uint64 {
	if dst == nil {
		dst = make(map[K]uint64, len(src))
	}
	for k, v := range src {
		dst[k] = v
	}
	return dst
}

// captureStats reads the kernel-side counters of the capture.
func (d *daemon) captureStats() []metrics.CaptureStat {
	var out []metrics.CaptureStat
	switch {
	case d.bpfCap != nil:
		cs, err := d.bpfCap.Counters()
		if err != nil {
			d.log.Warn("read eBPF counters", "err", err)
		}
		for _, c := range cs {
			out = append(out, metrics.CaptureStat{
				Iface: c.Iface, Mode: string(c.Mode), Packets: c.Packets,
				Dropped:        map[string]uint64{"ringbuf_full": c.RingbufFull, "kernel": c.LoadErrors},
				TruncatedBytes: c.Truncated,
			})
		}
	case d.afp != nil:
		cs, err := d.afp.Counters()
		if err != nil {
			d.log.Warn("read AF_PACKET counters", "err", err)
		}
		for _, c := range cs {
			out = append(out, metrics.CaptureStat{
				Iface: c.Iface, Mode: "afpacket", Packets: c.Packets,
				Dropped: map[string]uint64{"kernel": c.KernelDrops},
			})
		}
	}
	return out
}

// serve starts the HTTP endpoints: metrics, the hot set, health.
func (d *daemon) serve() (*http.Server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(d.col, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/hotkeys", d.hotkeys)
	if d.cf.pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("/healthz", d.healthz)
	mux.Handle(webview.IndexPath, webview.Handler())
	mux.Handle(webview.AssetsPath, webview.Handler())
	mux.HandleFunc("/readyz", d.readyz)
	l, err := net.Listen("tcp", d.cf.listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", d.cf.listen, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go serveWeb(l, srv, d.cf.webCfg, d.base.With("component", "http"))
	if d.cf.health != "" {
		hl, err := net.Listen("tcp", d.cf.health)
		if err != nil {
			srv.Close()
			return nil, fmt.Errorf("listen %s (--health-listen): %w", d.cf.health, err)
		}
		hmux := http.NewServeMux()
		hmux.HandleFunc("/healthz", d.healthz)
		hmux.HandleFunc("/readyz", d.readyz)
		hsrv := &http.Server{Handler: hmux, ReadHeaderTimeout: 5 * time.Second}
		go hsrv.Serve(hl)
		srv.RegisterOnShutdown(func() { hsrv.Close() })
	}
	return srv, nil
}

func (d *daemon) healthz(w http.ResponseWriter, _ *http.Request) {
	// Alive while the pipeline loop turns: it beats at least every tick.
	if age := time.Since(time.Unix(0, d.beat.Load())); d.running.Load() && age > 10*time.Second {
		http.Error(w, fmt.Sprintf("pipeline stalled for %s", age.Round(time.Second)), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

func (d *daemon) readyz(w http.ResponseWriter, _ *http.Request) {
	if !d.running.Load() {
		http.Error(w, "capture not running", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintf(w, "ready: capturing with %s\n", d.modeName)
}

// hotkeysDoc is the /hotkeys document: the current hot set as events.
type hotkeysDoc struct {
	V      int            `json:"v"`
	Node   string         `json:"node"`
	TS     string         `json:"ts"`
	HotQPS float64        `json:"hot_qps"`
	Keys   []*event.Event `json:"keys"`
}

func (d *daemon) hotkeys(w http.ResponseWriter, _ *http.Request) {
	d.hotMu.Lock()
	doc := hotkeysDoc{V: event.Version, Node: d.df.node, TS: time.Now().UTC().Format(event.TSFormat), HotQPS: d.dcfg.HotQPS, Keys: make([]*event.Event, len(d.hot))}
	for i := range d.hot {
		e := d.hot[i]
		e.Node = d.df.node
		doc.Keys[i] = &e
	}
	d.hotMu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	bw := bufio.NewWriter(w)
	json.NewEncoder(bw).Encode(&doc)
	bw.Flush()
}

func (f *redisFlags) tlsOptions() publish.TLSOptions {
	return publish.TLSOptions{CAFile: f.caFile, CertFile: f.certFile, KeyFile: f.keyFile, InsecureSkipVerify: f.insecureSkipVerify}
}
