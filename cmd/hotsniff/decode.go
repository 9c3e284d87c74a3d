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
	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/pipeline"
)

func newDecodeCmd() *cobra.Command {
	var (
		cfg      *config.Config
		count    bool
		bytes    bool
		countMax int
	)
	cmd := &cobra.Command{
		Use:   "decode [flags] FILE...",
		Short: "Print every request decoded from pcap/pcapng files (gzip too), one JSON object per key",
		Long: `Prints one JSON line per key that a request names (fields: docs/events.md):
reads and writes, with the pick-key rules deciding "key" and "weight". With --count, prints
one line per (proto, ns, key) over reads only:
COUNT<TAB>WEIGHT<TAB>PROTO<TAB>NS<TAB>KEY, sorted by WEIGHT descending.
With --bytes, prints one line per (proto, ns, key) over reads:
BYTES<TAB>READS<TAB>PROTO<TAB>NS<TAB>KEY, sorted by BYTES descending, where
BYTES is the reply bytes (TCP payload, framing included) attributed to the key
and READS its occurrences in requests.
A summary line goes to stderr. "-" reads standard input.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := loadSettings(cmd, cfg); err != nil {
				return err
			}
			ports, err := cfg.Stream.PortMap()
			if err != nil {
				return usageError{err}
			}
			prog := newProgress(cmd.ErrOrStderr(), cfg.Stream.Progress)
			var stdout io.Writer = cmd.OutOrStdout()
			if prog != nil {
				bw := prog.writer(stdout)
				defer bw.Flush()
				stdout = bw
			}
			out := bufio.NewWriterSize(stdout, 256<<10)
			defer out.Flush()
			var sink decode.Sink
			var counts *countSink
			var bsink *bytesSink
			switch {
			case count && bytes:
				return usagef("--count and --bytes: choose one")
			case bytes:
				bsink = newBytesSink()
				sink = bsink
			case count:
				if countMax < 0 {
					return usagef("--count-max-bytes %d: must be 0 (no bound) or a number of bytes", countMax)
				}
				counts = newCountSink(countMax)
				sink = counts
			default:
				sink = newJSONSink(out)
			}
			pl, err := pipeline.New(pipeline.Config{Ports: ports, Stream: cfg.Stream.Config,
				Tap: func(decode.Sink) decode.Sink { return sink }})
			if err != nil {
				return usageError{err}
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			start := time.Now()
			// Output goes out whenever the input runs dry, so decode -
			// behind tcpdump -w - streams.
			tally := new(pipeline.PortTally)
			tot, err := pl.ReadFiles(ctx, args, fileOptions(prog, func() { out.Flush() }, 0, tally))
			// A header for a reader at a terminal; none in a pipe, where
			// scripts sort and cut the columns.
			header := isTerminal(cmd.OutOrStdout())
			if counts != nil {
				if header {
					out.WriteString("# COUNT\tWEIGHT\tPROTO\tNS\tKEY\n")
				}
				counts.write(out)
				if n := counts.note(); n != "" {
					fmt.Fprintln(cmd.ErrOrStderr(), n)
				}
			}
			if bsink != nil {
				if header {
					out.WriteString("# BYTES\tREADS\tPROTO\tNS\tKEY\n")
				}
				bsink.write(out)
			}
			summary(cmd.ErrOrStderr(), tot, tally, pl.Counter(), pl.StreamStats(), time.Since(start), err)
			return err
		},
	}
	cfg = registerSettings(cmd.Flags(), streamSettings)
	cmd.Flags().BoolVar(&count, "count", false, "print per-key read counts instead of one line per key")
	cmd.Flags().IntVar(&countMax, "count-max-bytes", DefaultCountMaxBytes, "--count: most memory the key table holds (keys and their entries); keys first seen once it is full are left out, and a line on stderr says how many reads that was (0: no bound)")
	cmd.Flags().BoolVar(&bytes, "bytes", false, "print per-key reply bytes and reads instead of one line per key")
	return cmd
}
