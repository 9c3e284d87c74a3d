package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/pipeline"
	"github.com/hotsniff/hotsniff/stream"
)

// fileOptions wires the progress bar and the output flush into reading
// capture files.
func fileOptions(prog *progress, flush func(), speed float64, ports *pipeline.PortTally) pipeline.FileOptions {
	o := pipeline.FileOptions{BeforeRead: flush, Speed: speed, Ports: ports}
	if prog != nil {
		o.OnOpen, o.OnClose, o.OnProgress = prog.startFile, prog.finishFile, prog.update
	}
	return o
}

// summary is the one-line account of a decode or replay run on stderr,
// followed by a hint when nothing in the files was on a mapped port. A run
// that failed before reading a packet prints only its error.
func summary(w io.Writer, tot pipeline.FileTotals, ports *pipeline.PortTally, c *decode.Counter, st stream.Stats, elapsed time.Duration, runErr error) bool {
	if runErr != nil && tot.Packets == 0 {
		return false
	}
	req, keys, reads, writes, errs := c.Totals()
	var rb, ru uint64
	for i := range c.ReplyBytes {
		rb += c.ReplyBytes[i]
		ru += c.Unpaired[i]
	}
	replies := ""
	if rb > 0 {
		replies = fmt.Sprintf(", %d reply bytes (%d unpaired)", rb, ru)
	}
	fmt.Fprintf(w, "hotsniff: %d packets (%d tcp segments, %d skipped, %d malformed), %d requests, %d keys (%d reads, %d writes)%s, %d decode errors, %d stream gaps, %d flows in %s\n",
		tot.Packets, tot.Segments, tot.Skipped, tot.Malformed, req, keys, reads, writes, replies, errs, st.TotalGaps(), st.FlowsCreated, elapsed.Round(time.Millisecond))
	if hint := noMatchHint(tot.Packets, tot.Segments, ports, st); hint != "" {
		fmt.Fprintf(w, "hotsniff: %s\n", hint)
	}
	return true
}

// noMatchHint explains an empty result: no TCP at all, or TCP on no port
// of the port map (naming the busiest ports seen and how to map one).
func noMatchHint(packets, segments uint64, ports *pipeline.PortTally, st stream.Stats) string {
	switch {
	case packets == 0:
		return ""
	case segments == 0:
		return "no TCP packet in the input (nothing to decode)"
	case st.Segments > 0 || ports == nil:
		return ""
	}
	busiest := ports.Busiest(3)
	if len(busiest) == 0 {
		return ""
	}
	var seen []string
	for _, port := range busiest {
		seen = append(seen, fmt.Sprintf("%d (%d segments)", port, ports[port]))
	}
	top := busiest[0]
	example := fmt.Sprintf("PROTO=%d (PROTO: redis, memcache or tair)", top)
	if pr := stream.DefaultPorts().Lookup(top); pr != decode.ProtoUnknown {
		example = fmt.Sprintf("%s=%d", pr, top)
	}
	return fmt.Sprintf("no packet matched the port map; busiest TCP ports seen: %s; map one with --port %s",
		strings.Join(seen, ", "), example)
}
