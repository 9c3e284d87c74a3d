package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/decode/memcache"
	"github.com/hotsniff/hotsniff/decode/redis"
	"github.com/hotsniff/hotsniff/decode/tair"
	"github.com/hotsniff/hotsniff/stream"
)

// registry builds the protocol decoders explicitly, in one place.
func registry() *decode.Registry {
	var r decode.Registry
	r.Register(redis.New(redis.Config{}))
	r.Register(memcache.New())
	r.Register(tair.New(tair.Config{}))
	return &r
}

// requestsOnly hides a decoder's reply parser: used when the capture does
// not copy replies (eBPF by default), so a reply direction that carries
// only SYN/FIN records is not mistaken for lost bytes.
type requestsOnly struct{ decode.Decoder }

func (r requestsOnly) NewParser(dir decode.Dir, midStream bool) decode.Parser {
	if dir == decode.ToClient {
		return nil
	}
	return r.Decoder.NewParser(dir, midStream)
}

// withoutReplies wraps every decoder of reg in requestsOnly.
func withoutReplies(reg *decode.Registry) *decode.Registry {
	var out decode.Registry
	for _, p := range decode.Protos() {
		if d := reg.Get(p); d != nil {
			out.Register(requestsOnly{d})
		}
	}
	return &out
}

// fileTotals is what reading capture files saw, for the summary line.
type fileTotals struct {
	capture.Stats
	Files int
	ports *portTally
}

// readOpts are readFiles' optional parts.
type readOpts struct {
	prog *progress
	pace *pacer
	// flush is called whenever the input is about to wait for more data
	// (a pipe from tcpdump -w -): output written so far goes out then.
	flush func()
}

// readFiles feeds every segment of the files, in order, to asm and flushes
// it at the end. A corrupt or truncated file stops the run with an error
// naming it, after everything before the damage was processed.
func readFiles(ctx context.Context, paths []string, asm *stream.Assembler, o readOpts) (fileTotals, error) {
	tot := fileTotals{ports: new(portTally)}
	var seg capture.Segment
	defer asm.Flush()
	for _, path := range paths {
		f, err := capture.OpenFileOptions(path, capture.Options{BeforeRead: o.flush})
		if err != nil {
			return tot, err
		}
		tot.Files++
		if o.prog != nil {
			o.prog.startFile(path, f.Size())
		}
		err = drain(ctx, f, &seg, asm, o.prog, o.pace, tot.ports)
		st := f.Stats()
		tot.Packets += st.Packets
		tot.Segments += st.Segments
		tot.Skipped += st.Skipped
		tot.Malformed += st.Malformed
		tot.Bytes += st.Bytes
		f.Close()
		if o.prog != nil {
			o.prog.finishFile(st)
		}
		if !errors.Is(err, io.EOF) {
			return tot, err
		}
	}
	return tot, nil
}

// drain feeds every segment of src to asm until the source ends (io.EOF)
// or fails, or ctx is cancelled. This is the per-packet loop: it allocates
// nothing. ports, when set, counts the segments seen per TCP port.
func drain(ctx context.Context, src capture.Source, seg *capture.Segment, asm *stream.Assembler, prog *progress, pace *pacer, ports *portTally) error {
	for n := 1; ; n++ {
		if err := src.Next(seg); err != nil {
			return err
		}
		if pace != nil {
			if err := pace.wait(ctx, seg.TS); err != nil {
				return err
			}
		}
		if ports != nil {
			ports.add(seg)
		}
		asm.Add(seg)
		if n&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if prog != nil {
				prog.update(src.Stats())
			}
		}
	}
}

// pacer replays packets at a multiple of their recorded pace (demos, and
// tests that need wall time to pass during a replay).
type pacer struct {
	speed       float64
	first, base int64 // first packet time, and the wall time it was replayed
}

func (p *pacer) wait(ctx context.Context, ts int64) error {
	now := time.Now().UnixNano()
	if p.base == 0 {
		p.first, p.base = ts, now
		return nil
	}
	due := p.base + int64(float64(ts-p.first)/p.speed)
	if d := time.Duration(due - now); d > time.Millisecond {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// summary is the one-line account of a decode or replay run on stderr,
// followed by a hint when nothing in the files was on a mapped port. A run
// that failed before reading a packet prints only its error.
func summary(w io.Writer, tot fileTotals, c *decode.Counter, st stream.Stats, elapsed time.Duration, runErr error) bool {
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
	if hint := noMatchHint(tot, st); hint != "" {
		fmt.Fprintf(w, "hotsniff: %s\n", hint)
	}
	return true
}
