package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hotsniff/hotsniff/capture"
)

// FileOptions are the optional parts of reading capture files.
type FileOptions struct {
	// BeforeRead is called whenever the input is about to wait for more
	// data (a pipe from tcpdump -w -): output written so far goes out then.
	BeforeRead func()
	// OnOpen and OnClose bracket each file (progress display); OnProgress
	// is called every few thousand segments with the open file's counts.
	OnOpen     func(path string, size int64)
	OnClose    func(st capture.Stats)
	OnProgress func(st capture.Stats)
	// Speed replays packets at this multiple of their recorded pace
	// (1: real time); 0 reads as fast as possible.
	Speed float64
	// Ports, when set, counts the segments seen per TCP port, so an empty
	// result can name the ports the traffic was on.
	Ports *PortTally
}

// Files reads capture files (pcap or pcapng, gzipped or not) in order as
// one capture.Source. A corrupt or truncated file ends it with an error
// naming the file, after everything before the damage was returned.
type Files struct {
	paths []string
	o     FileOptions
	next  int
	f     *capture.File
	tot   FileTotals
	n     int
}

// FileTotals is what reading the files saw.
type FileTotals struct {
	capture.Stats
	Files int
}

// OpenFiles returns a source over paths; files are opened as they are
// reached.
func OpenFiles(paths []string, o FileOptions) *Files {
	return &Files{paths: paths, o: o}
}

// Next fills seg with the next segment of the files, or returns io.EOF
// after the last one.
func (fs *Files) Next(seg *capture.Segment) error {
	for {
		if fs.f == nil {
			if fs.next >= len(fs.paths) {
				return io.EOF
			}
			path := fs.paths[fs.next]
			fs.next++
			f, err := capture.OpenFileOptions(path, capture.Options{BeforeRead: fs.o.BeforeRead})
			if err != nil {
				return err
			}
			fs.f = f
			fs.tot.Files++
			if fs.o.OnOpen != nil {
				fs.o.OnOpen(path, f.Size())
			}
		}
		err := fs.f.Next(seg)
		if err == nil {
			if fs.o.Ports != nil {
				fs.o.Ports.Add(seg)
			}
			if fs.n++; fs.n&4095 == 0 && fs.o.OnProgress != nil {
				fs.o.OnProgress(fs.f.Stats())
			}
			return nil
		}
		name := fs.f.Name()
		fs.closeFile()
		if !errors.Is(err, io.EOF) {
			if !strings.Contains(err.Error(), name) {
				err = fmt.Errorf("%s: %w", name, err)
			}
			return err
		}
	}
}

func (fs *Files) closeFile() {
	st := fs.f.Stats()
	fs.tot.Packets += st.Packets
	fs.tot.Segments += st.Segments
	fs.tot.Skipped += st.Skipped
	fs.tot.Malformed += st.Malformed
	fs.tot.Bytes += st.Bytes
	fs.f.Close()
	fs.f = nil
	if fs.o.OnClose != nil {
		fs.o.OnClose(st)
	}
}

// Stats sums the counts of the files read so far, the open one included.
func (fs *Files) Stats() capture.Stats {
	st := fs.tot.Stats
	if fs.f != nil {
		o := fs.f.Stats()
		st.Packets += o.Packets
		st.Segments += o.Segments
		st.Skipped += o.Skipped
		st.Malformed += o.Malformed
		st.Bytes += o.Bytes
	}
	return st
}

// Totals is what the files saw, with the number of files opened.
func (fs *Files) Totals() FileTotals {
	return FileTotals{Stats: fs.Stats(), Files: fs.tot.Files}
}

// Close releases the open file, if any.
func (fs *Files) Close() error {
	if fs.f != nil {
		err := fs.f.Close()
		fs.f = nil
		return err
	}
	return nil
}

// ReadFiles feeds every segment of the files, in order, to the pipeline
// and flushes it at the end (Flush). Packet time is the only clock, so the
// same files give the same output.
func (p *Pipeline) ReadFiles(ctx context.Context, paths []string, o FileOptions) (FileTotals, error) {
	fs := OpenFiles(paths, o)
	defer fs.Close()
	defer p.Flush()
	err := p.Feed(ctx, fs, o.Speed)
	return fs.Totals(), err
}

// Feed feeds every segment of src to the pipeline until src ends (then it
// returns nil) or fails, or ctx is cancelled; speed > 0 paces the segments
// at that multiple of their recorded pace. This is the per-packet loop of
// every file command: it allocates nothing.
func (p *Pipeline) Feed(ctx context.Context, src capture.Source, speed float64) error {
	pace := pacer{speed: speed}
	var seg capture.Segment
	for n := 1; ; n++ {
		if err := src.Next(&seg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if speed > 0 {
			if err := pace.wait(ctx, seg.TS); err != nil {
				return err
			}
		}
		p.Add(&seg)
		if n&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return err
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
