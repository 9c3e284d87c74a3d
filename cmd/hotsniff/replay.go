package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/publish"
	"github.com/hotsniff/hotsniff/stream"
)

// detectFlags are the detection and output flags of replay and run.
type detectFlags struct {
	cfg    detect.Config
	output string
	node   string
}

func (d *detectFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.Float64Var(&d.cfg.HotQPS, "hot-qps", 1000, "a key is hot when its weighted request rate at one server reaches this per second")
	f.Float64Var(&d.cfg.HotBytes, "hot-bytes", 0, "also hot when the reply bytes attributed to a key at one server reach this per second (0: off)")
	f.StringVar(&d.cfg.Detector, "detector", detect.DetectorDefault, "detection algorithm: default, or tair (Tair's server-side pipeline, for comparison)")
	registerTuning(f, &d.cfg)
	f.StringVar(&d.output, "output", "jsonl", "event format on stdout: jsonl or text")
	f.StringVar(&d.node, "node", "", "node name in events (default: the host name; env HOTSNIFF_NODE)")
}

// build validates the flags and reads rules and the ignore list from the
// config file.
func (d *detectFlags) build(configPath string) (detect.Config, error) {
	cfg := d.cfg
	if d.output != publish.FormatJSONL && d.output != publish.FormatText {
		return cfg, usagef("--output %q: want jsonl or text", d.output)
	}
	var err error
	if cfg.Rules, cfg.Ignore, err = loadRules(configPath); err != nil {
		return cfg, err
	}
	if d.node == "" {
		d.node = os.Getenv("HOTSNIFF_NODE")
	}
	if d.node == "" {
		d.node, _ = os.Hostname()
	}
	if _, err := detect.New(cfg, nil); err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}

// loadConfig applies --config and HOTSNIFF_* to unset flags, then builds
// the stream and detector settings of replay and run.
func loadConfig(cmd *cobra.Command, sf *streamFlags, df *detectFlags) (*stream.Ports, stream.Config, detect.Config, error) {
	if err := applyConfig(cmd, sf.configPath); err != nil {
		return nil, stream.Config{}, detect.Config{}, err
	}
	ports, scfg, err := sf.build()
	if err != nil {
		return nil, scfg, detect.Config{}, err
	}
	dcfg, err := df.build(sf.configPath)
	return ports, scfg, dcfg, err
}

// emitters sends every event to each emitter in order. The publisher goes
// first: it stamps seq and node, so what is printed is what was published.
type emitters []detect.Emitter

func (e emitters) Emit(ev *event.Event) {
	for _, x := range e {
		x.Emit(ev)
	}
}

func newReplayCmd() *cobra.Command {
	var (
		sf    streamFlags
		df    detectFlags
		rf    redisFlags
		chf   channelFlags
		speed float64
	)
	cmd := &cobra.Command{
		Use:   "replay [flags] FILE...",
		Short: "Detect hot keys in pcap/pcapng files, with packet time as the clock",
		Long: `Reads pcap or pcapng files (gzip-compressed too), decodes every request, runs
hot-key detection with packet timestamps as the clock (same file, same output)
and writes hot-key events (fields: docs/events.md) on stdout. With --redis-url the events
are also published on the channel and kept in the snapshot. No root needed.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ports, scfg, dcfg, err := loadConfig(cmd, &sf, &df)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()

			prog := newProgress(cmd.ErrOrStderr(), sf.progress)
			var stdout io.Writer = cmd.OutOrStdout()
			if prog != nil {
				bw := prog.writer(stdout)
				defer bw.Flush()
				stdout = bw
			}
			out := bufio.NewWriter(stdout)
			defer out.Flush()
			w, err := publish.NewWriter(out, df.output, df.node)
			if err != nil {
				return usageError{err}
			}
			var em emitters
			var pub *publish.Publisher
			if rf.url != "" || os.Getenv("HOTSNIFF_REDIS_URL") != "" {
				quietRedisLogs()
				rdb, err := rf.connect(ctx)
				if err != nil {
					return err
				}
				defer rdb.Close()
				secret, err := rf.secret()
				if err != nil {
					return err
				}
				opt := publish.Options{Channel: rf.channel, Node: df.node, Secret: secret}
				if err := chf.apply(&opt); err != nil {
					return err
				}
				pub, err = publish.New(rdb, opt)
				if err != nil {
					return err
				}
				em = append(em, pub)
			}
			em = append(em, w)
			det, err := detect.New(dcfg, em)
			if err != nil {
				return usageError{err}
			}
			counter := decode.NewCounter(det)
			asm := stream.NewAssembler(scfg, ports, registry(), counter)
			start := time.Now()
			var pace *pacer
			if speed < 0 {
				return usagef("--speed %g: must be 0 (as fast as possible) or positive", speed)
			} else if speed > 0 {
				pace = &pacer{speed: speed}
			}
			tot, rerr := readFiles(ctx, args, asm, readOpts{prog: prog, pace: pace, flush: func() { out.Flush() }})
			// Before the publisher closes: Flush sends the merged
			// invalidates still waiting for their interval.
			det.Flush()
			out.Flush()
			if pub != nil {
				// The snapshot shows the rates measured at the end.
				pub.UpdateRates(det.HotSet())
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := pub.Close(cctx); err != nil && rerr == nil {
					rerr = fmt.Errorf("publish: %w", err)
				}
				cancel()
			}
			if summary(cmd.ErrOrStderr(), tot, counter, asm.Stats(), time.Since(start), rerr) {
				ds := det.Stats()
				fmt.Fprintf(cmd.ErrOrStderr(), "hotsniff: %d hot, %d refreshes, %d cold, %d invalidates; %d keys hot at the end\n",
					ds.Hot, ds.Refreshes, ds.Cold, ds.Invalidates, ds.HotKeys)
			}
			if err := w.Err(); err != nil && rerr == nil {
				rerr = fmt.Errorf("write events: %w", err)
			}
			return rerr
		},
	}
	sf.register(cmd)
	df.register(cmd)
	rf.register(cmd.Flags())
	chf.register(cmd.Flags(), 0)
	cmd.Flags().Float64Var(&speed, "speed", 0, "replay at this multiple of the recorded pace (1: real time); 0: as fast as possible")
	return cmd
}
