package stream

import (
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"testing"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/decode"
)

// Test parsers. Each records what it was given, so tests compare the
// reassembled stream with the bytes they sent, an independent truth.

type parseMode int

const (
	consumeAll   parseMode = iota // consumes everything
	consumeLines                  // consumes whole '\n'-terminated lines only
	consumeSkip                   // "V<n>\n" headers followed by n value bytes it asks to skip
	consumeChunk                  // consumes whole chunks of chunkSize bytes
	consumeNone                   // never consumes anything
)

// Event kinds a fake parser records.
const (
	evData = 'd' // bytes consumed
	evGap  = 'g' // Gap called
	evSkip = 's' // the parser asked to skip n bytes it had not seen
)

type parseEvent struct {
	kind byte
	data []byte
	n    int
	ts   int64
}

type fakeParser struct {
	dir       decode.Dir
	midStream bool
	mode      parseMode
	chunkSize int
	flow      decode.Flow // as seen at the last Parse
	events    []parseEvent
	lines     []string
}

func (p *fakeParser) Parse(b []byte, f *decode.Flow, s decode.Sink) int {
	p.flow = *f
	switch p.mode {
	case consumeAll:
		p.record(b, f.TS)
		return len(b)
	case consumeLines:
		i := bytes.LastIndexByte(b, '\n')
		if i < 0 {
			return 0
		}
		p.record(b[:i+1], f.TS)
		for _, l := range bytes.SplitAfter(b[:i+1], []byte("\n")) {
			if len(l) > 0 {
				p.lines = append(p.lines, string(l))
			}
		}
		return i + 1
	case consumeSkip:
		return p.parseSkip(b, f.TS)
	case consumeChunk:
		c := len(b) - len(b)%p.chunkSize
		p.record(b[:c], f.TS)
		return c
	default:
		return 0
	}
}

// parseSkip reads "V<n>\n<n bytes>" messages, asking the assembler to skip the
// part of a value it does not have yet. It records headers as lines.
func (p *fakeParser) parseSkip(b []byte, ts int64) int {
	pos := 0
	for pos < len(b) {
		i := bytes.IndexByte(b[pos:], '\n')
		if i < 0 {
			return pos
		}
		hdr := b[pos : pos+i]
		p.lines = append(p.lines, string(hdr))
		if len(hdr) == 0 || hdr[0] != 'V' {
			pos += i + 1
			continue
		}
		n, err := strconv.Atoi(string(hdr[1:]))
		if err != nil {
			pos += i + 1
			continue
		}
		end := pos + i + 1 + n
		if end > len(b) {
			p.events = append(p.events, parseEvent{kind: evSkip, n: end - len(b)})
			return end
		}
		pos = end
	}
	return pos
}

func (p *fakeParser) record(b []byte, ts int64) {
	if len(b) == 0 {
		return
	}
	if n := len(p.events); n > 0 && p.events[n-1].kind == evData {
		p.events[n-1].data = append(p.events[n-1].data, b...)
		return
	}
	p.events = append(p.events, parseEvent{kind: evData, data: append([]byte(nil), b...), ts: ts})
}

func (p *fakeParser) Gap() {
	p.events = append(p.events, parseEvent{kind: evGap})
}

// stream renders the events as the consumed bytes with "|" for each gap.
func (p *fakeParser) stream() string {
	var b bytes.Buffer
	for _, e := range p.events {
		switch e.kind {
		case evData:
			b.Write(e.data)
		case evGap:
			b.WriteString("|")
		}
	}
	return b.String()
}

func (p *fakeParser) gaps() int {
	n := 0
	for _, e := range p.events {
		if e.kind == evGap {
			n++
		}
	}
	return n
}

// fakeDecoder makes fakeParsers and remembers them in creation order.
type fakeDecoder struct {
	proto     decode.Proto
	mode      parseMode
	chunkSize int
	noClient  bool // NewParser returns nil for ToClient
	parsers   []*fakeParser
}

func (d *fakeDecoder) Proto() decode.Proto { return d.proto }

func (d *fakeDecoder) NewParser(dir decode.Dir, midStream bool) decode.Parser {
	if d.noClient && dir == decode.ToClient {
		return nil
	}
	p := &fakeParser{dir: dir, midStream: midStream, mode: d.mode, chunkSize: max(d.chunkSize, 1)}
	d.parsers = append(d.parsers, p)
	return p
}

// only returns the single parser made for dir, failing otherwise.
func (d *fakeDecoder) only(t *testing.T, dir decode.Dir) *fakeParser {
	t.Helper()
	var found []*fakeParser
	for _, p := range d.parsers {
		if p.dir == dir {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		t.Fatalf("got %d parsers for dir %d, want 1", len(found), dir)
	}
	return found[0]
}

type nopSink struct{ decode.Discard }

// fixture is an assembler over a redis-mapped fake decoder.
type fixture struct {
	t   *testing.T
	dec *fakeDecoder
	a   *Assembler
}

func newFixture(t *testing.T, cfg Config, mode parseMode) *fixture {
	t.Helper()
	dec := &fakeDecoder{proto: decode.ProtoRedis, mode: mode}
	var reg decode.Registry
	reg.Register(dec)
	return &fixture{t: t, dec: dec, a: NewAssembler(cfg, DefaultPorts(), &reg, nopSink{})}
}

var (
	cliAddr = netip.MustParseAddrPort("10.0.0.1:40000")
	srvAddr = netip.MustParseAddrPort("10.0.0.2:6379")
)

// clientAddr returns the i-th test client address.
func clientAddr(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), uint16(1024+i%50000))
}

const ms = int64(1e6)

// send adds one segment from client to server (toServer) or back.
func (fx *fixture) send(ts int64, toServer bool, seq uint32, flags uint8, payload string) {
	fx.sendFrom(cliAddr, ts, toServer, seq, flags, payload, 0)
}

func (fx *fixture) sendFrom(client netip.AddrPort, ts int64, toServer bool, seq uint32, flags uint8, payload string, missing uint32) {
	seg := capture.Segment{TS: ts, Src: client, Dst: srvAddr, Seq: seq, Flags: flags | capture.FlagACK, Payload: []byte(payload), Missing: missing}
	if !toServer {
		seg.Src, seg.Dst = srvAddr, client
	}
	fx.a.Add(&seg)
	fx.check()
}

// check asserts the bounds the assembler promises after every call.
func (fx *fixture) check() {
	fx.t.Helper()
	if err := checkInvariants(fx.a); err != nil {
		fx.t.Fatal(err)
	}
}

// checkInvariants verifies the buffer bounds and the bookkeeping behind them.
func checkInvariants(a *Assembler) error {
	if a.held > a.cfg.MaxBufferBytes {
		return fmt.Errorf("held %d bytes > MaxBufferBytes %d", a.held, a.cfg.MaxBufferBytes)
	}
	if len(a.flows) > a.cfg.MaxFlows {
		return fmt.Errorf("%d flows > MaxFlows %d", len(a.flows), a.cfg.MaxFlows)
	}
	if len(a.flows) != a.lru.len+a.closed.len {
		return fmt.Errorf("%d flows in table, %d open + %d closed on lists", len(a.flows), a.lru.len, a.closed.len)
	}
	held, holders := 0, 0
	for _, fl := range a.flows {
		fh := 0
		for d := range fl.h {
			h := &fl.h[d]
			if n := len(h.tail) + h.oooBytes; n > a.cfg.MaxFlowBuffer {
				return fmt.Errorf("direction buffers %d bytes > MaxFlowBuffer %d", n, a.cfg.MaxFlowBuffer)
			}
			if len(h.ooo) > a.cfg.MaxOutOfOrder {
				return fmt.Errorf("%d out-of-order segments > MaxOutOfOrder %d", len(h.ooo), a.cfg.MaxOutOfOrder)
			}
			if h.skip > 0 && len(h.tail) > 0 {
				return fmt.Errorf("skip %d with a %d-byte tail", h.skip, len(h.tail))
			}
			ob := 0
			fh += cap(h.tail)
			for i, s := range h.ooo {
				ob += len(s.data)
				fh += cap(s.data)
				if i > 0 && seqDiff(s.seq, h.ooo[i-1].seq) < 0 {
					return fmt.Errorf("out-of-order segments not sorted")
				}
			}
			if ob != h.oooBytes {
				return fmt.Errorf("oooBytes %d, segments hold %d", h.oooBytes, ob)
			}
			hb := 0
			for _, s := range h.held {
				hb += len(s.data)
				fh += cap(s.data)
			}
			if hb != h.heldBytes || len(h.tail)+h.oooBytes+hb > a.cfg.MaxFlowBuffer {
				return fmt.Errorf("heldBytes %d, segments hold %d (tail %d, ooo %d)", h.heldBytes, hb, len(h.tail), h.oooBytes)
			}
		}
		if fh != fl.held {
			return fmt.Errorf("flow holds %d, accounted %d", fh, fl.held)
		}
		if (fh > 0) != a.holders.contains(fl) {
			return fmt.Errorf("flow holding %d bytes: on holders list %v", fh, a.holders.contains(fl))
		}
		if fh > 0 {
			holders++
		}
		held += fh
	}
	if held != a.held {
		return fmt.Errorf("flows hold %d, accounted %d", held, a.held)
	}
	if holders != a.holders.len {
		return fmt.Errorf("%d holders, list has %d", holders, a.holders.len)
	}
	return nil
}
