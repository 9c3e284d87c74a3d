package stream

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hotsniff/hotsniff/decode"
)

// Config bounds what the Assembler tracks and buffers. Start from
// DefaultConfig and change fields: every field must be valid (see Validate).
type Config struct {
	// MaxFlows bounds the flow table: open connections plus closed markers.
	// A new connection beyond it first displaces the oldest closed marker,
	// else evicts the least recently active flow (counted).
	MaxFlows int
	// MaxBufferBytes bounds the buffer memory (capacity, not just length)
	// held by all flows for unparsed tails and out-of-order data. Beyond it
	// the least recently active flow holding buffers is evicted (counted).
	MaxBufferBytes int
	// MaxFlowBuffer bounds, per direction, the unparsed tail plus the
	// out-of-order bytes. A parser that leaves a longer tail loses it (a gap,
	// counted as an overflow); out-of-order data beyond it forces a gap.
	MaxFlowBuffer int
	// MaxOutOfOrder bounds the out-of-order segments held per direction.
	// Zero means none: any hole is declared a gap at once.
	MaxOutOfOrder int
	// IdleTimeout expires flows without a segment for this long (packet time).
	IdleTimeout time.Duration
	// GapTimeout is how long (packet time) out-of-order data waits for the
	// missing segment before the hole is declared a gap.
	GapTimeout time.Duration
	// ClosedTimeout is how long (packet time) a connection closed by FIN or
	// RST is remembered, so late retransmissions are dropped instead of
	// opening a mid-stream flow that decodes junk.
	ClosedTimeout time.Duration
	// Replies pairs replies with requests: every connection gets a
	// decode.Pending queue (bounded by Pending) that the request direction
	// records into and the reply parser reads, so reply bytes can be
	// attributed to keys. Off, reply parsers see no queue and pass the
	// bytes over.
	Replies bool
	Pending decode.PendingConfig
	// OnSkip, when set, is called when a reply parser asks to skip at
	// least SkipNotify bytes (the rest of a value): the reply bytes of
	// f with sequence numbers in [start, end) will not be looked at. The
	// eBPF capture uses it to stop copying them. It runs on the
	// assembler's goroutine and must be quick.
	OnSkip     func(f *decode.Flow, start, end uint32)
	SkipNotify int
	// Verify rejects, before any parser, segments that cannot belong to a
	// connection the server accepted (see accept.go): requests are decoded
	// only once the server answered the client's SYN, or (joined
	// mid-stream) once a segment from the server acknowledged where the
	// client's stream is; after that, segments whose sequence or
	// acknowledgment numbers are further than Window from the stream are
	// dropped, so they neither decode nor count as lost bytes. For live
	// capture, where anyone on the wire can send a segment; a capture
	// file is the operator's own.
	Verify bool
	// Window is Verify's window in bytes (0: DefaultWindow).
	Window uint32
}

// DefaultConfig returns bounds fit for one busy cache node.
func DefaultConfig() Config {
	return Config{
		MaxFlows:       65536,
		MaxBufferBytes: 64 << 20,
		MaxFlowBuffer:  256 << 10,
		MaxOutOfOrder:  16,
		IdleTimeout:    2 * time.Minute,
		GapTimeout:     250 * time.Millisecond,
		ClosedTimeout:  10 * time.Second,
	}
}

// Validate reports every field that is out of range.
func (c Config) Validate() error {
	var errs []error
	if c.MaxFlows < 1 {
		errs = append(errs, fmt.Errorf("max flows %d: must be at least 1", c.MaxFlows))
	}
	if c.MaxFlowBuffer < 1 {
		errs = append(errs, fmt.Errorf("max flow buffer %d: must be at least 1", c.MaxFlowBuffer))
	}
	if c.MaxBufferBytes < c.MaxFlowBuffer {
		errs = append(errs, fmt.Errorf("max buffer bytes %d: must be at least max flow buffer (%d)", c.MaxBufferBytes, c.MaxFlowBuffer))
	}
	if c.MaxOutOfOrder < 0 {
		errs = append(errs, fmt.Errorf("max out of order %d: must not be negative", c.MaxOutOfOrder))
	}
	if c.IdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("idle timeout %v: must be positive", c.IdleTimeout))
	}
	if c.GapTimeout <= 0 {
		errs = append(errs, fmt.Errorf("gap timeout %v: must be positive", c.GapTimeout))
	}
	if c.Window > 1<<30 {
		errs = append(errs, fmt.Errorf("window %d: must be at most 1 GiB", c.Window))
	}
	if c.ClosedTimeout <= 0 {
		errs = append(errs, fmt.Errorf("closed timeout %v: must be positive", c.ClosedTimeout))
	}
	return errors.Join(errs...)
}

// Ports maps server ports to protocols. Lookup is one array index because it
// runs for every captured segment. The zero value maps nothing.
type Ports struct {
	proto [1 << 16]decode.Proto
}

// DefaultPorts returns the contract's default mapping: redis=6379,
// memcache=11211, tair=5191.
func DefaultPorts() *Ports {
	p := new(Ports)
	p.Set(6379, decode.ProtoRedis)
	p.Set(11211, decode.ProtoMemcache)
	p.Set(5191, decode.ProtoTair)
	return p
}

// Set maps a server port to a protocol; decode.ProtoUnknown, or a value
// that is no protocol, unmaps it.
func (p *Ports) Set(port uint16, proto decode.Proto) {
	if int(proto) >= numProtos {
		proto = decode.ProtoUnknown
	}
	p.proto[port] = proto
}

// Lookup returns the protocol served on port, or decode.ProtoUnknown.
func (p *Ports) Lookup(port uint16) decode.Proto { return p.proto[port] }

// List returns the mapped ports in ascending order (for capture filters).
func (p *Ports) List() []uint16 {
	var out []uint16
	for i, pr := range p.proto {
		if pr != decode.ProtoUnknown {
			out = append(out, uint16(i))
		}
	}
	return out
}

// ParsePorts builds a mapping from the CLI's repeatable --port PROTO=PORT
// values ("redis=6379"). It holds only what is given: the caller decides
// whether DefaultPorts applies when no flag is set. Mapping one port to two
// protocols is an error.
func ParsePorts(specs []string) (*Ports, error) {
	p := new(Ports)
	for _, spec := range specs {
		name, num, ok := strings.Cut(spec, "=")
		if !ok {
			return nil, fmt.Errorf("parse port %q: want PROTO=PORT, e.g. redis=6379", spec)
		}
		proto, ok := decode.ParseProto(strings.TrimSpace(name))
		if !ok {
			return nil, fmt.Errorf("parse port %q: unknown protocol %q (want %s)", spec, name, protoNames())
		}
		n, err := strconv.ParseUint(strings.TrimSpace(num), 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("parse port %q: port %q is not a number from 1 to 65535", spec, num)
		}
		if old := p.Lookup(uint16(n)); old != decode.ProtoUnknown && old != proto {
			return nil, fmt.Errorf("parse port %q: port %d is already mapped to %s", spec, n, old)
		}
		p.Set(uint16(n), proto)
	}
	return p, nil
}

func protoNames() string {
	var names []string
	for _, p := range decode.Protos() {
		names = append(names, p.String())
	}
	return strings.Join(names, ", ")
}
