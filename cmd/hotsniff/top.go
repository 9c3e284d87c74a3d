package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gdamore/tcell/v2"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hotsniff/hotsniff/config"
	"github.com/hotsniff/hotsniff/internal/topview"
)

// topFlags are the flags of `hotsniff top`.
type topFlags struct {
	cfg      *config.Config // the shared settings: stream, detector, channel
	addr     string
	interval time.Duration
	replay   bool
	speed    float64
	once     bool
	sort     string
	reverse  bool
	filter   string
	coldFor  time.Duration
	top      int
}

func newTopCmd() *cobra.Command { return newTopCmdWith(new(topFlags)) }

// newTopCmdWith builds the command around f (tests read the parsed flags).
func newTopCmdWith(f *topFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "top [flags] | top --redis-url URL | top --replay [flags] FILE...",
		Short: "Live terminal view of the hottest keys of a running daemon, of every node through the channel, or of a replay",
		Long: `Shows the hottest keys in a live table: rate, trend, protocol, server,
namespace, hot/cold state, source and key.

By default it polls GET http://ADDR/hotkeys of a daemon started with
'hotsniff run --listen ADDR' every --interval. If the daemon cannot be reached
the view says so and keeps retrying.

With --redis-url it follows the hot-key channel (--channel) as a client shim
does, reading the snapshot first, and shows the hot keys of every node that
publishes there: the node column, the key's demand (qps of its last hot
message), its write rate and whether shims may cache it (CACHE no: written
too often). Rates change when a node sends a refresh or a new verdict.

When a daemon samples connections to stay within its CPU budget
(run --max-cpu), its rates are estimates scaled up from the share it saw:
the header says "sampling 25% of connections", each such rate is marked ~,
and when the keys shown differ (nodes sampling at different rates) a SAMPLE
column gives each key's share.

With --replay it runs the capture files through replay's pipeline in process
(packet timestamps as the clock) and samples the hot set every --interval of
packet time, at --speed (default 1: the recorded pace; 0: as fast as 10
frames a second). p pauses the replay itself. The last frame stays until you
quit. --top N lists the N hottest keys: with --replay whether or not they
cross the threshold (those below it show state "-").

Keys: q or ctrl-c quit; s cycles the sort column (rate, key, proto, server,
state), S back; r reverses; / filters (substring of key, proto or server,
any case; Enter applies, Esc clears); p pauses; up/down, PgUp/PgDn, Home/End
scroll. Keys that leave the hot set stay listed as cold (dimmed) for --cold-for.

When stdout is not a terminal, or with --once, it prints one plain-text
table and exits (a replay is run to its end first).`,
		Example: `  hotsniff top --addr 127.0.0.1:9464
  hotsniff top --once --addr cache-node-3:9464 --sort key
  hotsniff top --redis-url redis://channel-redis:6379
  hotsniff top --replay --hot-qps 1000 --top 10 capture.pcap.gz
  hotsniff top --replay --hot-qps 1000 --speed 10 --interval 250ms a.pcap b.pcap`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTop(cmd, f, args)
		},
	}
	fs := cmd.Flags()
	// With --replay the detector settings are replay's, defaults included.
	f.cfg = registerSettings(fs, without(streamSettings, "progress"), without(detectSettings, "output", "node"), redisSettings)
	fs.StringVar(&f.addr, "addr", "127.0.0.1:9464", "daemon to poll: host:port (or http[s]:// URL) of 'hotsniff run --listen'")
	fs.DurationVar(&f.interval, "interval", time.Second, "time between two samples (wall time; packet time with --replay)")
	fs.BoolVar(&f.replay, "replay", false, "replay the capture files given as arguments instead of polling a daemon")
	fs.Float64Var(&f.speed, "speed", 1, "with --replay: 1 = the recorded pace, 10 = ten times faster; 0 = as fast as 10 frames a second")
	fs.IntVar(&f.top, "top", 0, "list the N hottest keys: with --replay whether or not they are hot (keys below the threshold show state -); from a daemon, the N hottest hot keys. 0: every hot key")
	fs.BoolVar(&f.once, "once", false, "print one plain-text table and exit (also when stdout is not a terminal)")
	fs.StringVar(&f.sort, "sort", "rate", "initial sort column: rate, key, proto, server, state or bytes (reply bytes per second)")
	fs.BoolVar(&f.reverse, "reverse", false, "reverse the initial sort order")
	fs.StringVar(&f.filter, "filter", "", "initial filter: substring of key, proto or server")
	fs.DurationVar(&f.coldFor, "cold-for", 30*time.Second, "how long a key that left the hot set stays listed as cold")
	return cmd
}

func runTop(cmd *cobra.Command, f *topFlags, args []string) error {
	if err := loadSettings(cmd, f.cfg); err != nil {
		return err
	}
	if f.interval <= 0 {
		return usagef("--interval %v: must be positive", f.interval)
	}
	if f.speed < 0 {
		return usagef("--speed %v: must not be negative", f.speed)
	}
	if f.top < 0 {
		return usagef("--top %d: must not be negative", f.top)
	}
	if f.coldFor < 0 {
		return usagef("--cold-for %v: must not be negative", f.coldFor)
	}
	sortCol, err := topview.ParseSort(f.sort)
	if err != nil {
		return usagef("--sort: %v", err)
	}
	fleet := cmd.Flags().Changed("redis-url")
	if fleet && (f.replay || cmd.Flags().Changed("addr")) {
		return usagef("--redis-url, --addr and --replay exclude each other")
	}
	if f.replay {
		if len(args) == 0 {
			return usagef("--replay needs capture files: hotsniff top --replay FILE...")
		}
		if cmd.Flags().Changed("addr") {
			return usagef("--addr and --replay exclude each other")
		}
	} else if len(args) > 0 {
		return usagef("unexpected arguments %q: capture files need --replay", args)
	}

	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var (
		src   topview.Source
		label string
	)
	switch {
	case fleet:
		secret, err := loadSecret(f.cfg.Publish)
		if err != nil {
			return err
		}
		quietRedisLogs()
		rdb, err := connectRedis(ctx, f.cfg.Publish)
		if err != nil {
			return err
		}
		defer rdb.Close()
		label = "channel " + f.cfg.Publish.Channel
		cs, err := topview.NewSignedChannelSource(rdb, f.cfg.Publish.Channel, label, f.interval, nil, secret)
		if err != nil {
			return usageError{err}
		}
		defer cs.Close()
		src = cs
	case f.replay:
		rs, err := newTopReplay(f, args)
		if err != nil {
			return err
		}
		defer rs.Close()
		src, label = rs, "replay"
	default:
		hs, err := topview.NewHTTPSource(f.addr, f.interval)
		if err != nil {
			return usagef("--addr: %v", err)
		}
		src, label = hs, f.addr
	}
	m := topview.NewModel(label, topview.Options{ColdFor: f.coldFor, Sort: sortCol, Reverse: f.reverse, Filter: f.filter, TopN: f.top, Fleet: fleet})

	out := cmd.OutOrStdout()
	if f.once || !isTerminal(out) {
		return topOnce(ctx, src, m, out)
	}
	scr, err := tcell.NewScreen()
	if err != nil {
		return fmt.Errorf("open terminal: %w", err)
	}
	if err := scr.Init(); err != nil {
		return fmt.Errorf("open terminal: %w", err)
	}
	defer scr.Fini()
	end := "end of data — q quits"
	if f.replay {
		end = "replay finished, last frame held — q quits"
	}
	return topview.Run(ctx, scr, src, m, topview.RunOptions{EndMessage: end})
}

// newTopReplay builds the replay source from the flags: the same pipeline
// and detector configuration as `hotsniff replay`.
func newTopReplay(f *topFlags, paths []string) (*topview.ReplaySource, error) {
	ports, err := f.cfg.Stream.PortMap()
	if err != nil {
		return nil, usageError{err}
	}
	dcfg := f.cfg.Detect.Config
	delay := 100 * time.Millisecond
	if f.speed > 0 {
		delay = time.Duration(float64(f.interval) / f.speed)
	}
	rs, err := topview.NewReplaySource(topview.ReplayConfig{
		Paths: paths, Ports: ports, Stream: f.cfg.Stream.Config,
		Detect: dcfg, Interval: f.interval, FrameDelay: delay, TopN: f.top,
	})
	if err != nil {
		return nil, usageError{err}
	}
	return rs, nil
}

// topOnce prints one plain table: the daemon's current hot set, or the
// last frame of a replay run to its end.
func topOnce(ctx context.Context, src topview.Source, m *topview.Model, out io.Writer) error {
	switch s := src.(type) {
	case *topview.HTTPSource:
		snap, err := s.Fetch(ctx)
		if err != nil {
			return err
		}
		m.Apply(snap)
	case *topview.ChannelSource:
		select {
		case <-s.Synced():
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("read the channel snapshot: no answer in 10s")
		}
		m.Apply(s.Fetch())
	case *topview.ReplaySource:
		s.NoDelay()
		for {
			snap, err := s.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			m.Apply(snap)
		}
	}
	return m.WritePlain(out)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
