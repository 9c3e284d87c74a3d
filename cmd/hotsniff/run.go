package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture/live"
	"github.com/hotsniff/hotsniff/config"
	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/httpserve"
	"github.com/hotsniff/hotsniff/internal/webview"
	"github.com/hotsniff/hotsniff/metrics"
	"github.com/hotsniff/hotsniff/pipeline"
	"github.com/hotsniff/hotsniff/publish"
	"github.com/hotsniff/hotsniff/stream"
)

func newRunCmd() *cobra.Command {
	var (
		cfg   *config.Config
		check bool
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
			if err := loadSettings(cmd, cfg); err != nil {
				return err
			}
			ports, err := cfg.Stream.PortMap()
			if err != nil {
				return usageError{err}
			}
			mode, err := bpf.ParseMode(cfg.Capture.Mode)
			if err != nil {
				return usageError{err}
			}
			var target *publish.Target
			if url := cfg.Publish.RedisURL; url != "" {
				if target, err = publish.ParseURL(url); err != nil {
					return usageError{err}
				}
			}
			if err := checkWebConfig(cfg.HTTP.WebConfig); err != nil {
				return err
			}
			if _, err := loadSecret(cfg.Publish); err != nil {
				return err
			}
			if check {
				fmt.Fprint(cmd.OutOrStdout(), configSummary(cfg, ports, mode))
				return nil
			}
			if cfg.Capture.Procs > 0 {
				runtime.GOMAXPROCS(cfg.Capture.Procs)
			}
			cur, err := currentNice()
			if err != nil {
				return err
			}
			// Applied once capture is attached: loading and attaching the
			// programs at a low priority on a busy node took tens of seconds.
			niceTo, setNiceTo := niceToSet(cfg.Capture.Nice, cmd.Flags().Changed("nice"), cur)
			base := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			d := &daemon{
				log: base.With("component", "run"), base: base,
				cfg: cfg, mode: mode, ports: ports, target: target,
				stdout: cmd.OutOrStdout(),
				nice: func() error {
					if !setNiceTo {
						return nil
					}
					if err := setNice(niceTo); err != nil {
						return usageError{fmt.Errorf("%w (running at nice %d: a lower --nice needs CAP_SYS_NICE)", err, cur)}
					}
					return nil
				},
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return d.run(ctx)
		},
	}
	f := cmd.Flags()
	cfg = registerSettings(f, streamSettings, detectSettings, publishSettings, captureSettings, httpSettings)
	f.BoolVar(&check, "config-check", false, "load and validate the configuration, print every setting and exit")
	return cmd
}

// daemon is one `hotsniff run`.
type daemon struct {
	log     *slog.Logger
	base    *slog.Logger // for other packages, which add their own component
	cfg     *config.Config
	mode    bpf.Mode
	ports   *stream.Ports
	skipErr bool // a reply skip update failed (logged once)
	target  *publish.Target
	stdout  io.Writer
	nice    func() error // lowers the priority, once capture is attached

	// adopt hands the previous daemon's hot set from the publisher to the
	// pipeline goroutine; pub is set before running.
	adopt   chan []*event.Event
	pub     *publish.Publisher
	noTraff pipeline.NoTraffic

	rdb         interface{ Close() error }
	cap         *live.Capture
	pl          *pipeline.Pipeline
	lastMetrics time.Time
	lat         []time.Duration
	samp        *sampler
	kc          kernelCount
	ev          evidence
	clock       int64 // the pipeline's clock at the last tick (packet time)

	col     *metrics.Collector
	hotMu   sync.Mutex
	hot     []event.Event
	beat    atomic.Int64 // pipeline heartbeat, Unix ns
	running atomic.Bool
}

func (d *daemon) run(ctx context.Context) error {
	d.col = metrics.New()
	// HTTP first: /healthz answers while capture attaches, and /readyz
	// says 503 until it is attached and the previous hot set adopted.
	var srv *httpserve.Server
	if d.cfg.HTTP.Listen != "" {
		var err error
		if srv, err = d.serve(); err != nil {
			return err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			srv.Shutdown(cctx)
			cancel()
		}()
	}
	if err := d.openCapture(); err != nil {
		return err
	}
	d.cap.FollowDecap(ctx)
	if err := d.nice(); err != nil {
		d.cap.Close()
		return err
	}
	var em emitters
	var pub *publish.Publisher
	if d.target != nil {
		// The publisher starts once capture is attached: its first act is
		// to take over this node's section of the snapshot (a surge
		// rollout's old daemon stops publishing then), so it must not
		// happen before this daemon can carry on.
		quietRedisLogs()
		var err error
		if pub, err = d.startPublisher(); err != nil {
			d.cap.Close()
			return err
		}
		em = append(em, pub)
	} else {
		w, err := publish.NewWriter(d.stdout, d.cfg.Detect.Output, d.cfg.Detect.Node)
		if err != nil {
			d.cap.Close()
			return usageError{err}
		}
		em = append(em, w)
	}
	d.pub = pub
	// The capabilities of the capture, looked up once.
	skips := d.cap.ReplySkips()
	heads := skips != nil
	if heads {
		// The programs copy reply heads; large values are skipped in the
		// kernel once the reply parser has read their header.
		c := skips
		d.cfg.Stream.Config.SkipNotify = 2 * int(c.ReplyCopy())
		d.cfg.Stream.Config.OnSkip = func(f *decode.Flow, start, end uint32) {
			if err := c.SetReplySkip(f.Server, f.Client, start, end); err != nil && !d.skipErr {
				d.skipErr = true
				d.log.Warn("reply skips: kernel map update failed; replies are still decoded, at full copy cost", "err", err)
			}
		}
	}
	// Anyone on the wire can send a segment: only those that can belong to
	// a connection the server accepted are decoded.
	d.cfg.Stream.Config.Verify = true
	pl, err := pipeline.New(pipeline.Config{Ports: d.ports, Stream: d.cfg.Stream.Config, Detect: &d.cfg.Detect.Config, Emitter: em,
		RequestsOnly: d.cap.RequestsOnly()})
	if err != nil {
		d.cap.Close()
		d.closePublisher(pub)
		return usageError{err}
	}
	if heads {
		pl.SkipReplyHeads()
	}
	d.pl = pl
	d.startKernelReader()
	d.samp = d.startSampler()
	defer d.samp.close()
	d.noTraff.After = d.cfg.Capture.NoTrafficWarn

	// The pipeline owns the assembler, decoders and detector: one goroutine,
	// no locks on the per-packet path.
	done := make(chan error, 1)
	d.beat.Store(time.Now().UnixNano()) // /healthz is ok before the first tick
	go func() {
		// With a CPU budget, on its own thread, so that the budget
		// measures the pipeline alone (sampling.go), not HTTP or the
		// publisher. Without one, on any thread: every wakeup of a
		// locked goroutine hands the scheduler's P to its thread and back
		// (two futex calls and two context switches), which was a third
		// of the daemon's own CPU under redis-benchmark -P 1.
		if d.cfg.Capture.MaxCPU > 0 {
			runtime.LockOSThread()
		}
		done <- pl.Run(d.cap, pipeline.LiveOptions{TickEvery: tickEvery, BeforeTick: func() { d.stepKernel(); d.checkEvidence() },
			OnTick: func(clock, now time.Time) { d.clock = clock.UnixNano(); d.tick(now, pub) }, Wake: d.wakeKernel})
	}()
	d.running.Store(true)
	d.log.Info("capturing", "mode", d.cap.Mode(), "ports", d.ports.List(), "listen", d.cfg.HTTP.Listen, "publish", d.target != nil)

	var perr error
	select {
	case <-ctx.Done():
		d.log.Info("stopping")
		d.cap.Close() // unblocks Next with io.EOF and detaches the programs
		perr = <-done
	case perr = <-done:
		d.cap.Close()
	}
	d.running.Store(false)
	pl.Flush() // merged invalidates still waiting for their interval
	if cerr := d.closePublisher(pub); cerr != nil && perr == nil {
		perr = cerr
	}
	return perr
}

// startPublisher connects the channel Redis (which may be down: the
// publisher queues, bounded, and reconnects with backoff) and starts a
// publisher that adopts this node's previous hot set.
func (d *daemon) startPublisher() (*publish.Publisher, error) {
	rdb, err := publish.Connect(d.target, tlsOptions(d.cfg.Publish))
	if err != nil {
		return nil, err
	}
	secret, err := loadSecret(d.cfg.Publish)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	opt, err := publishOptions(d.cfg.Publish)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	d.adopt = make(chan []*event.Event, 1)
	opt.Node, opt.Logger, opt.Secret = d.cfg.Detect.Node, d.base, secret
	opt.Adopt = func(prev []*event.Event) { d.adopt <- prev } // called once
	pub, err := publish.New(rdb, opt)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	d.rdb = rdb
	return pub, nil
}

// closePublisher flushes the publisher and says truly what was lost.
func (d *daemon) closePublisher(pub *publish.Publisher) error {
	if pub == nil {
		return nil
	}
	defer d.rdb.Close()
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	before := pub.Stats().Dropped
	cerr := pub.Close(cctx)
	cancel()
	lost := pub.Stats().Dropped - before
	if lost == 0 && errors.Is(cerr, publish.ErrChannelDown) {
		// Nothing was waiting: only the last rewrite of this node's
		// section did not happen; it ages out on its own.
		d.log.Warn("stopped with the channel Redis unreachable: no event lost; this node's snapshot section was not rewritten and ages out after the snapshot ttl", "redis", d.target.Redacted, "err", cerr)
		return nil
	}
	// Subscribers missed what was lost: the exit status says so, as
	// replay's does, so a supervisor or a script sees it.
	if cerr != nil || lost > 0 {
		return fmt.Errorf("publish on shutdown: %d event(s) not published to %s: %w", lost, d.target.Redacted, cmp.Or(cerr, errLostOnClose))
	}
	return nil
}

var errLostOnClose = errors.New("Redis did not take them before the shutdown deadline")

// tickEvery is how often the pipeline expires flows, lets the detector see
// time pass without traffic, and refreshes what HTTP and metrics read.
const tickEvery = 100 * time.Millisecond

// tick runs on the pipeline goroutine after the pipeline's own tick:
// time-driven work of the daemon, and every second a fresh copy of
// everything HTTP and metrics read.
func (d *daemon) tick(now time.Time, pub *publish.Publisher) {
	det := d.pl.Detector()
	d.beat.Store(now.UnixNano())
	select {
	case prev := <-d.adopt: // nil channel without a publisher
		n := det.Adopt(prev, now.UnixNano())
		d.log.Info("previous hot set adopted: keys stay hot until measured for a full window", "keys", n, "offered", len(prev), "window", det.Config().Window)
	default:
	}
	if now.Sub(d.lastMetrics) < time.Second {
		if d.samp != nil && d.samp.early(now) {
			d.samp.step(d, det, now)
		}
		return
	}
	d.lastMetrics = now
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
	st := d.pl.StreamStats()
	d.updateMetrics(st, d.pl.Counter(), hot, pub)
	d.noteEvidence(det)
	ds := det.Stats()
	d.col.Update(func(s *metrics.Snapshot) {
		s.Absorbed, s.LateReads, s.Adopted = absorbedMetrics(ds), ds.Late, ds.Adopted
	})
	if msg, ok := d.noTraff.Check(now, st.Segments, d.ports.List(), d.cfg.Capture.Ifaces); ok {
		d.log.Warn(msg)
	}
}

func (d *daemon) updateMetrics(st stream.Stats, c *decode.Counter, hot []event.Event, pub *publish.Publisher) {
	capStats := d.captureStats()
	d.col.Update(func(s *metrics.Snapshot) {
		s.Capture = capStats
		s.TruncatedSegments = d.pl.Truncated()
		s.Requests = c.Requests()
		s.KernelCopied = c.KernelCountedRequests()
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
			s.Channel, s.ChannelUp = true, ps.Connected
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
	cs, err := d.cap.Counters()
	if err != nil {
		d.log.Warn("read capture counters", "err", err)
	}
	out := make([]metrics.CaptureStat, 0, len(cs))
	for _, c := range cs {
		out = append(out, metrics.CaptureStat{Iface: c.Iface, Mode: c.Mode, Packets: c.Packets, Dropped: c.Dropped, TruncatedBytes: c.TruncatedBytes, DroppedBytes: c.DroppedBytes})
	}
	return out
}

// openCapture opens the live capture the settings ask for.
func (d *daemon) openCapture() error {
	c := d.cfg.Capture
	kc, err := d.kernelCountConfig()
	if err != nil {
		return usageError{err}
	}
	cp, err := live.Open(live.Config{Mode: d.mode, Ifaces: c.Ifaces, CgroupPath: c.CgroupPath, Ports: d.ports.List(),
		RingSize: c.RingSize, MaxCopy: c.MaxCopy, Replies: c.Replies, ReplyCopy: c.ReplyCopy, KernelCount: kc, Decap: c.Decap, Logger: d.base})
	var u *live.UsageError
	if errors.As(err, &u) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	d.cap = cp
	return nil
}

// serve starts the HTTP endpoints: metrics, the hot set, health
// (internal/httpserve bounds connections, timeouts and failed logins).
func (d *daemon) serve() (*httpserve.Server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(d.col, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/hotkeys", d.hotkeys)
	if d.cfg.HTTP.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("/healthz", d.healthz)
	mux.Handle(webview.IndexPath, webview.Handler())
	mux.Handle(webview.AssetsPath, webview.Handler())
	mux.HandleFunc("/readyz", d.readyz)
	log := d.base.With("component", "http")
	srv, err := httpserve.Listen(httpserve.Options{Addr: d.cfg.HTTP.Listen, Handler: mux, WebConfig: d.cfg.HTTP.WebConfig,
		MaxConns: d.cfg.HTTP.MaxConns, IdleTimeout: d.cfg.HTTP.IdleTimeout, Logger: log})
	if err != nil {
		return nil, err
	}
	go srv.Serve()
	if d.cfg.HTTP.Health != "" {
		hmux := http.NewServeMux()
		hmux.HandleFunc("/healthz", d.healthz)
		hmux.HandleFunc("/readyz", d.readyz)
		hsrv, err := httpserve.Listen(httpserve.Options{Addr: d.cfg.HTTP.Health, Handler: hmux,
			MaxConns: httpserve.HealthMaxConns, IdleTimeout: d.cfg.HTTP.IdleTimeout, Logger: log})
		if err != nil {
			srv.Close()
			return nil, fmt.Errorf("--health-listen: %w", err)
		}
		go hsrv.Serve()
		srv.OnShutdown(hsrv.Close)
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

// readyz is 503 until capture is attached and, when publishing, this node's
// previous hot set is adopted (which needs the channel Redis once), 200
// after. A later channel outage does not make the daemon unready (capture
// and detection go on, events queue): the body and hotsniff_channel_up say
// so.
func (d *daemon) readyz(w http.ResponseWriter, _ *http.Request) {
	if !d.running.Load() {
		http.Error(w, "starting: capture not attached yet", http.StatusServiceUnavailable)
		return
	}
	if d.pub == nil {
		fmt.Fprintf(w, "ready: capturing with %s\n", d.cap.Mode())
		return
	}
	st := d.pub.Stats()
	if !st.Adopted {
		why := "reading this node's previous hot set from the channel Redis"
		if !st.Connected {
			why = "channel Redis unreachable: waiting for it to read this node's previous hot set"
		}
		http.Error(w, fmt.Sprintf("starting: capturing with %s; %s", d.cap.Mode(), why), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintf(w, "ready: capturing with %s; adopted %d hot key(s)", d.cap.Mode(), st.AdoptedKeys)
	switch {
	case st.Superseded:
		fmt.Fprint(w, "; a newer daemon for this node publishes now")
	case !st.Connected:
		fmt.Fprint(w, "; channel Redis unreachable: events queue until it is back")
	}
	fmt.Fprintln(w)
}

// hotkeysDoc is the /hotkeys document as a reader decodes it.
type hotkeysDoc struct {
	httpserve.HotkeysHead
	Keys      []*event.Event `json:"keys"`
	Truncated int            `json:"truncated,omitempty"`
}

func (d *daemon) hotkeys(w http.ResponseWriter, _ *http.Request) {
	d.hotMu.Lock()
	keys := make([]event.Event, len(d.hot))
	copy(keys, d.hot)
	d.hotMu.Unlock()
	for i := range keys {
		keys[i].Node = d.cfg.Detect.Node
	}
	httpserve.WriteHotkeys(w, httpserve.HotkeysHead{V: event.Version, Node: d.cfg.Detect.Node, TS: time.Now().UTC().Format(event.TSFormat), HotQPS: d.cfg.Detect.HotQPS}, keys, httpserve.HotkeysLimit)
}
