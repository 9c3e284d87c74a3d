package topview

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/pipeline"
	"github.com/hotsniff/hotsniff/stream"
)

// ReplayConfig sets up a ReplaySource.
type ReplayConfig struct {
	// Paths are the capture files (pcap or pcapng, gzipped or not), read in
	// order as one stream.
	Paths []string
	// Ports and Stream build the pipeline as `hotsniff replay` does.
	Ports  *stream.Ports
	Stream stream.Config
	// Detect configures the detector (HotQPS is required).
	Detect detect.Config
	// Interval is the packet time between two snapshots.
	Interval time.Duration
	// FrameDelay is the wall time between two snapshots: Interval/speed for
	// a replay at a given speed, 100ms for "as fast as 10 frames a second".
	// 0 does not wait at all (tests, --once).
	FrameDelay time.Duration
	// TopN, when positive, adds to every snapshot the TopN keys with the
	// highest read rate over the interval that are not hot (Warm), so the
	// view can list the hottest keys whether or not they cross a threshold.
	TopN int
}

// ReplaySource runs capture files through the replay pipeline in process and
// samples the detector's hot set every Interval of packet time. Packet time
// is the detector's only clock, so the frames are the same on every run.
// After the last frame (taken at the last packet) Next returns io.EOF.
type ReplaySource struct {
	cfg   ReplayConfig
	label string
	det   *detect.Detector
	pl    *pipeline.Pipeline
	files *pipeline.Files

	seg     capture.Segment
	held    bool  // seg was read but not yet fed: it lies past the sample
	sample  int64 // packet time of the next snapshot; 0 before the first packet
	lastTS  int64
	done    bool
	lastOut time.Time
	top     *topCounter // with TopN
	first   int64       // packet time of the first packet
	prevAt  int64       // packet time of the previous snapshot
	topLast []event.Event
}

// NewReplaySource builds the pipeline. Errors are configuration errors.
func NewReplaySource(cfg ReplayConfig) (*ReplaySource, error) {
	if len(cfg.Paths) == 0 {
		return nil, errors.New("no capture files")
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("interval %v: must be positive", cfg.Interval)
	}
	names := make([]string, len(cfg.Paths))
	for i, p := range cfg.Paths {
		names[i] = filepath.Base(p)
	}
	label := "replay " + strings.Join(names, ",")
	rs := &ReplaySource{cfg: cfg, label: label}
	pc := pipeline.Config{Ports: cfg.Ports, Stream: cfg.Stream, Detect: &cfg.Detect}
	if cfg.TopN > 0 {
		pc.Tap = func(next decode.Sink) decode.Sink {
			rs.top = newTopCounter(next, cfg.TopN)
			return rs.top
		}
	}
	pl, err := pipeline.New(pc)
	if err != nil {
		return nil, err
	}
	rs.pl, rs.det = pl, pl.Detector()
	rs.files = pipeline.OpenFiles(cfg.Paths, pipeline.FileOptions{})
	return rs, nil
}

// Detector is the detector the replay feeds.
func (r *ReplaySource) Detector() *detect.Detector { return r.det }

// Next reads packets up to the next sample time and returns the hot set then.
func (r *ReplaySource) Next(ctx context.Context) (Snapshot, error) {
	if r.done {
		return Snapshot{}, io.EOF
	}
	if !r.lastOut.IsZero() && r.cfg.FrameDelay > 0 {
		if err := sleepUntil(ctx, r.lastOut.Add(r.cfg.FrameDelay)); err != nil {
			return Snapshot{}, err
		}
	}
	s, err := r.advance(ctx)
	r.lastOut = time.Now()
	return s, err
}

// advance feeds segments until the next sample time passes or the files end.
func (r *ReplaySource) advance(ctx context.Context) (Snapshot, error) {
	iv := int64(r.cfg.Interval)
	for n := 1; ; n++ {
		if !r.held {
			if err := r.read(); err != nil {
				if errors.Is(err, io.EOF) {
					// The end: deliver what is buffered, take the last frame
					// at the last packet.
					r.pl.Flush()
					r.done = true
					if r.sample == 0 {
						return Snapshot{}, &FatalError{errors.New("replay: no packets in the capture files")}
					}
					return r.snap(r.lastTS), nil
				}
				r.done = true
				return Snapshot{}, &FatalError{err}
			}
			r.held = true
		}
		ts := r.seg.TS
		if r.sample == 0 {
			r.sample = ts + iv
			r.first = ts
		}
		if ts >= r.sample {
			at := r.sample
			r.sample += iv
			if ts >= r.sample+iv { // a long silence: skip the empty frames
				r.sample = ts - (ts-r.sample)%iv
			}
			return r.snap(at), nil
		}
		r.pl.Add(&r.seg)
		r.held = false
		if ts > r.lastTS {
			r.lastTS = ts
		}
		if n&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return Snapshot{}, err
			}
		}
	}
}

// read fills r.seg with the next segment of the files, or returns io.EOF
// after the last one.
func (r *ReplaySource) read() error { return r.files.Next(&r.seg) }

func (r *ReplaySource) snap(at int64) Snapshot {
	r.pl.Tick(at)
	s := Snapshot{
		Source: r.label,
		TS:     time.Unix(0, at).UTC(),
		HotQPS: r.det.Config().HotQPS,
		Keys:   r.det.HotSet(),
	}
	if r.top != nil {
		from := r.prevAt
		if from == 0 {
			from = r.first
		}
		iv := max(time.Duration(at-from), time.Millisecond)
		hot := make(map[string]bool, len(s.Keys))
		for i := range s.Keys {
			hot[rowID(&s.Keys[i])] = true
		}
		top := r.top.take(r.cfg.TopN, iv, s.TS)
		if len(top) == 0 {
			// No read since the last frame (the tail of a capture is
			// often only connection closes): the last rates stand.
			top = r.topLast
		}
		r.topLast = top
		for _, e := range top {
			if !hot[rowID(&e)] {
				s.Warm = append(s.Warm, e)
			}
		}
	}
	r.prevAt = at
	return s
}

// Close releases the open file, if any.
func (r *ReplaySource) Close() error { return r.files.Close() }

// NoDelay makes Next return frames as fast as they are computed.
func (r *ReplaySource) NoDelay() { r.cfg.FrameDelay = 0 }
