// Package pipeline assembles hotsniff's stages, capture → stream → decode →
// detect, in one place. Every command that reads traffic builds it the same
// way: `run` feeds it a live capture, `replay`, `decode` and `top --replay`
// feed it capture files, the accuracy and performance harnesses feed it
// whichever they measure. A new stage or side channel is added here once.
//
// A Pipeline is not safe for concurrent use: one goroutine feeds it and
// ticks it; readers of its state take copies (HotSet, Stats) on that
// goroutine.
package pipeline

import (
	"github.com/hotsniff/hotsniff/bpf/samplelevel"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/decode/memcache"
	"github.com/hotsniff/hotsniff/decode/redis"
	"github.com/hotsniff/hotsniff/decode/tair"
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/stream"
)

// Config is what a pipeline is built from.
type Config struct {
	// Ports maps server ports to protocols (nil: stream.DefaultPorts).
	Ports *stream.Ports
	// Stream bounds the reassembly.
	Stream stream.Config
	// Registry holds the decoders (nil: Registry()).
	Registry *decode.Registry
	// RequestsOnly hides the decoders' reply parsers, for captures that do
	// not copy replies: a reply direction carrying only SYN/FIN records is
	// then not mistaken for lost bytes.
	RequestsOnly bool
	// Detect, when set, adds the hot-key detector, emitting to Emitter
	// (nil: events are dropped, the hot set is still kept). Without it the
	// pipeline only decodes (`hotsniff decode`).
	Detect  *detect.Config
	Emitter detect.Emitter
	// Tap, when set, is put between the counter and the detector: it gets
	// every call the decoders make and must pass on to next what the
	// detector should see (embed decode.Forward). next is decode.Discard
	// when there is no detector.
	Tap func(next decode.Sink) decode.Sink
}

// Registry returns the protocol decoders, built explicitly in one place.
func Registry() *decode.Registry {
	var r decode.Registry
	r.Register(redis.New(redis.Config{}))
	r.Register(memcache.New())
	r.Register(tair.New(tair.Config{}))
	return &r
}

// requestsOnly hides a decoder's reply parser.
type requestsOnly struct{ decode.Decoder }

func (r requestsOnly) NewParser(dir decode.Dir, midStream bool) decode.Parser {
	if dir == decode.ToClient {
		return nil
	}
	return r.Decoder.NewParser(dir, midStream)
}

func withoutReplies(reg *decode.Registry) *decode.Registry {
	var out decode.Registry
	for _, p := range decode.Protos() {
		if d := reg.Get(p); d != nil {
			out.Register(requestsOnly{d})
		}
	}
	return &out
}

// Pipeline is one assembled pipeline: the stream assembler, the decoders,
// the counter and (optionally) the detector.
type Pipeline struct {
	asm     *stream.Assembler
	counter *decode.Counter
	det     *detect.Detector
	ports   *stream.Ports
	level   uint8 // flow sampling level of the segments last fed
	lastTS  int64 // latest packet time fed
	// Truncated counts segments whose payload the capture did not copy
	// whole (excluding reply segments when reply heads are copied on
	// purpose: see SkipReplyHeads).
	truncated      uint64
	skipReplyHeads bool
}

// New builds a pipeline. Its errors are configuration errors.
func New(cfg Config) (*Pipeline, error) {
	if cfg.Ports == nil {
		cfg.Ports = stream.DefaultPorts()
	}
	if err := cfg.Stream.Validate(); err != nil {
		return nil, err
	}
	reg := cfg.Registry
	if reg == nil {
		reg = Registry()
	}
	if cfg.RequestsOnly {
		reg = withoutReplies(reg)
		cfg.Stream.Replies = false // no reply parser drains the queues
	}
	p := &Pipeline{ports: cfg.Ports}
	var next decode.Sink = decode.Discard{}
	if cfg.Detect != nil {
		det, err := detect.New(*cfg.Detect, cfg.Emitter)
		if err != nil {
			return nil, err // already "configure detector: ..."
		}
		p.det = det
		next = det
	}
	if cfg.Tap != nil {
		next = cfg.Tap(next)
	}
	p.counter = decode.NewCounter(next)
	p.asm = stream.NewAssembler(cfg.Stream, cfg.Ports, reg, p.counter)
	return p, nil
}

// SkipReplyHeads tells the pipeline that the capture copies only the heads
// of reply segments on purpose, so their missing bytes are not truncation.
func (p *Pipeline) SkipReplyHeads() { p.skipReplyHeads = true }

// Add feeds one segment. It allocates nothing.
func (p *Pipeline) Add(seg *capture.Segment) {
	if seg.Missing > 0 && (!p.skipReplyHeads || p.ports.Lookup(seg.Src.Port()) == decode.ProtoUnknown) {
		p.truncated++
	}
	if seg.SampleLevel != p.level && p.det != nil {
		p.level = seg.SampleLevel
		p.det.SetSampleRate(samplelevel.Rate(p.level))
	}
	if seg.TS > p.lastTS {
		p.lastTS = seg.TS
	}
	p.asm.Add(seg)
}

// Tick lets time pass (Unix ns, the stream layer's and the detector's
// clock) without traffic: flows expire, keys no longer read turn cold.
func (p *Pipeline) Tick(clock int64) {
	p.asm.Tick(clock)
	if p.det != nil {
		p.det.Tick(clock)
	}
}

// Flush delivers what the stream layer still buffers, lets the detector
// see the time of the last packet (so every view of the same input ends
// with the same rates), then sends the merged invalidates still waiting
// for their interval. Call it at the end of the input.
func (p *Pipeline) Flush() {
	p.asm.Flush()
	if p.det != nil {
		if p.lastTS > 0 {
			p.det.Tick(p.lastTS)
		}
		p.det.Flush()
	}
}

// Detector is the detector, or nil when the pipeline only decodes.
func (p *Pipeline) Detector() *detect.Detector { return p.det }

// Counter holds the request, key, error and reply-byte counts.
func (p *Pipeline) Counter() *decode.Counter { return p.counter }

// StreamStats are the stream layer's counters.
func (p *Pipeline) StreamStats() stream.Stats { return p.asm.Stats() }

// Truncated is how many segments the capture did not copy whole.
func (p *Pipeline) Truncated() uint64 { return p.truncated }

// HotSet is the detector's current hot set (nil without a detector).
func (p *Pipeline) HotSet() []event.Event {
	if p.det == nil {
		return nil
	}
	return p.det.HotSet()
}
