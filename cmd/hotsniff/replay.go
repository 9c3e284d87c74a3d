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

	"github.com/hotsniff/hotsniff/config"
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/termtext"
	"github.com/hotsniff/hotsniff/pipeline"
	"github.com/hotsniff/hotsniff/publish"
)

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
		cfg   *config.Config
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
			if err := loadSettings(cmd, cfg); err != nil {
				return err
			}
			ports, err := cfg.Stream.PortMap()
			if err != nil {
				return usageError{err}
			}
			dcfg := cfg.Detect.Config
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()

			prog := newProgress(cmd.ErrOrStderr(), cfg.Stream.Progress)
			var stdout io.Writer = cmd.OutOrStdout()
			if prog != nil {
				bw := prog.writer(stdout)
				defer bw.Flush()
				stdout = bw
			}
			out := bufio.NewWriter(stdout)
			defer out.Flush()
			w, err := publish.NewWriter(out, cfg.Detect.Output, cfg.Detect.Node)
			if err != nil {
				return usageError{err}
			}
			var em emitters
			var pub *publish.Publisher
			if cfg.Publish.RedisURL != "" {
				quietRedisLogs()
				rdb, err := connectRedis(ctx, cfg.Publish)
				if err != nil {
					return err
				}
				defer rdb.Close()
				secret, err := loadSecret(cfg.Publish)
				if err != nil {
					return err
				}
				opt, err := publishOptions(cfg.Publish)
				if err != nil {
					return err
				}
				opt.Node, opt.Secret = cfg.Detect.Node, secret
				// The budget is in wall time and replay runs on packet
				// time: it applies only when asked for.
				if !cmd.Flags().Changed("channel-budget") {
					opt.Budget = 0
				}
				pub, err = publish.New(rdb, opt)
				if err != nil {
					return err
				}
				em = append(em, pub)
			}
			em = append(em, w)
			if speed < 0 {
				return usagef("--speed %g: must be 0 (as fast as possible) or positive", speed)
			}
			pl, err := pipeline.New(pipeline.Config{Ports: ports, Stream: cfg.Stream.Config, Detect: &dcfg, Emitter: em})
			if err != nil {
				return usageError{err}
			}
			det := pl.Detector()
			start := time.Now()
			tally := new(pipeline.PortTally)
			// ReadFiles flushes the pipeline at the end, before the
			// publisher closes: the merged invalidates still waiting for
			// their interval are sent.
			tot, rerr := pl.ReadFiles(ctx, args, fileOptions(prog, func() { out.Flush() }, speed, tally))
			out.Flush()
			if pub != nil {
				// The snapshot shows the rates measured at the end.
				pub.FinalRates(det.HotSet())
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := pub.Close(cctx); err != nil && rerr == nil {
					rerr = fmt.Errorf("publish: %w", err)
				}
				cancel()
			}
			if summary(cmd.ErrOrStderr(), tot, tally, pl.Counter(), pl.StreamStats(), time.Since(start), rerr) {
				ds := det.Stats()
				fmt.Fprintf(cmd.ErrOrStderr(), "hotsniff: %d hot, %d refreshes, %d cold, %d invalidates; %s hot at the end\n",
					ds.Hot, ds.Refreshes, ds.Cold, ds.Invalidates, termtext.Count(ds.HotKeys, "key", "keys"))
			}
			if err := w.Err(); err != nil && rerr == nil {
				rerr = fmt.Errorf("write events: %w", err)
			}
			return rerr
		},
	}
	cfg = registerSettings(cmd.Flags(), streamSettings, detectSettings, publishSettings)
	cmd.Flags().Float64Var(&speed, "speed", 0, "replay at this multiple of the recorded pace (1: real time); 0: as fast as possible")
	return cmd
}
