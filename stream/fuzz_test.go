package stream

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/decode"
)

// fuzzSrcLen is the length of each direction's source stream in FuzzAssembler.
const fuzzSrcLen = 1500

// srcByte is the byte at stream offset i of direction dir of flow f: a
// pseudo-random function, so a run of delivered bytes pins its offset.
func srcByte(f, dir, i int) byte {
	x := uint64(f)<<40 ^ uint64(dir)<<32 ^ uint64(i)
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return byte(x)
}

// mixedParser consumes a data-dependent amount: everything, whole 5-byte
// chunks (leaving a tail), nothing, or everything plus a skip. It records
// what it consumed, the skips it asked for and the gaps it was told of.
type mixedParser struct {
	flow, dir int
	events    []parseEvent
}

func (p *mixedParser) Parse(b []byte, f *decode.Flow, s decode.Sink) int {
	if len(b) == 0 {
		return 0
	}
	c := len(b)
	switch h := b[0]; {
	case h < 40:
		c = len(b) + int(h)*4
	case h < 140:
		c = len(b) - len(b)%5
	case h < 150:
		c = 0
	}
	if n := min(c, len(b)); n > 0 {
		p.events = append(p.events, parseEvent{kind: evData, data: append([]byte(nil), b[:n]...)})
	}
	if c > len(b) {
		p.events = append(p.events, parseEvent{kind: evSkip, n: c - len(b)})
	}
	return c
}

func (p *mixedParser) Gap() { p.events = append(p.events, parseEvent{kind: evGap}) }

type mixedDecoder struct {
	parsers []*mixedParser
	flowOf  func() int // which flow the assembler is creating a parser for
}

func (d *mixedDecoder) Proto() decode.Proto { return decode.ProtoTair }

func (d *mixedDecoder) NewParser(dir decode.Dir, midStream bool) decode.Parser {
	p := &mixedParser{flow: d.flowOf(), dir: int(dir)}
	d.parsers = append(d.parsers, p)
	return p
}

// verifyEvents checks that what a parser consumed is the source stream in
// order, each byte at most once: runs between gaps sit at one offset (skips
// included), at or after where the previous run ended.
func verifyEvents(events []parseEvent, f, dir int) error {
	lb := 0
	for start := 0; start < len(events); {
		end := start
		for end < len(events) && events[end].kind != evGap {
			end++
		}
		group := events[start:end]
		start = end + 1
		if len(group) == 0 {
			continue
		}
		p := lb
		for ; p <= fuzzSrcLen; p++ {
			if matchAt(group, f, dir, p) {
				break
			}
		}
		if p > fuzzSrcLen {
			return fmt.Errorf("flow %d dir %d: run of %d events after offset %d matches no source offset", f, dir, len(group), lb)
		}
		for _, e := range group {
			p += len(e.data) + e.n
		}
		lb = p
	}
	return nil
}

func matchAt(group []parseEvent, f, dir, p int) bool {
	for _, e := range group {
		for _, c := range e.data {
			if p >= fuzzSrcLen || c != srcByte(f, dir, p) {
				return false
			}
			p++
		}
		p += e.n
	}
	return true
}

// FuzzAssembler drives the assembler with segments cut from known source
// streams: offsets, lengths, flags, duplicates, holes and uncaptured bytes
// all come from the input. The header picks the bounds.
func FuzzAssembler(f *testing.F) {
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 4 {
			return
		}
		cfg := Config{
			MaxFlows:      1 + int(in[0]%3),
			MaxOutOfOrder: int(in[1] % 6),
			MaxFlowBuffer: 32 + int(in[2])*4,
			IdleTimeout:   time.Second,
			GapTimeout:    250 * time.Millisecond,
			ClosedTimeout: 2 * time.Second,
		}
		cfg.MaxBufferBytes = cfg.MaxFlowBuffer * (1 + int(in[3]%4))
		cfg.Verify = in[3]&0x80 != 0
		// Wider than the streams: honest segments are never out of
		// window (what is, is tested in accept_test.go).
		cfg.Window = 4096 << (in[3] & 0x1f % 16)
		in = in[4:]

		const nflows = 3
		isn := [nflows][2]uint32{{1, 1 << 31}, {1<<32 - 700, 5}, {77, 1<<32 - 3}}
		cursor := [nflows][2]int{}
		var cur int
		dec := &mixedDecoder{flowOf: func() int { return cur }}
		var reg decode.Registry
		reg.Register(dec)
		ports := new(Ports)
		ports.Set(5191, decode.ProtoTair)
		a := NewAssembler(cfg, ports, &reg, nopSink{})
		srv := netip.MustParseAddrPort("[fd00::1]:5191")
		payload := make([]byte, 256)
		ts := int64(0)

		for ; len(in) >= 5; in = in[5:] {
			op, delta, n, miss, adv := in[0], int8(in[1]), int(in[2]), in[3], in[4]
			cur = int(op&3) % nflows
			dir := int(op>>2) & 1
			var flags uint8
			switch op >> 3 & 7 {
			case 1:
				flags = capture.FlagSYN
			case 2:
				flags = capture.FlagFIN
			case 3:
				flags = capture.FlagRST
			case 4, 5:
				ts += int64(adv) * int64(4*time.Millisecond)
				if op>>3&7 == 4 {
					a.Tick(ts)
				} else {
					a.Flush()
				}
				if err := checkInvariants(a); err != nil {
					t.Fatal(err)
				}
				continue
			}
			off := max(cursor[cur][dir]+int(delta), 0)
			n = min(n, fuzzSrcLen-off)
			if n < 0 {
				n = 0
			}
			var missing uint32
			if miss >= 0xf0 {
				missing = uint32(miss & 0x0f)
			}
			seq := isn[cur][dir] + 1 + uint32(off)
			if flags == capture.FlagSYN {
				off, seq = 0, isn[cur][dir]
				n = min(n, fuzzSrcLen)
			}
			for i := range n {
				payload[i] = srcByte(cur, dir, off+i)
			}
			cursor[cur][dir] = max(cursor[cur][dir], off+n)
			ts += int64(adv) * int64(4*time.Millisecond)

			client := netip.AddrPortFrom(netip.MustParseAddr("fd00::2"), uint16(40000+cur))
			seg := capture.Segment{TS: ts, Src: client, Dst: srv, Seq: seq, Flags: flags, Payload: payload[:n], Missing: missing}
			if miss&1 != 0 {
				// Acknowledge what the other direction has sent so far.
				seg.Flags |= capture.FlagACK
				seg.Ack = isn[cur][1-dir] + 1 + uint32(cursor[cur][1-dir]) - uint32(miss>>1&0x0f)
			}
			if dir == 1 {
				seg.Src, seg.Dst = srv, client
			}
			times := 1
			if op>>6 == 3 {
				times = 2 // duplicate
			}
			for range times {
				a.Add(&seg)
				if err := checkInvariants(a); err != nil {
					t.Fatal(err)
				}
			}
		}
		a.Flush()
		if err := checkInvariants(a); err != nil {
			t.Fatal(err)
		}
		if st := a.Stats(); st.BufferedBytes != 0 || st.FlowsActive != 0 || len(a.flows) != 0 {
			t.Fatalf("after Flush: %+v", st)
		}
		for _, p := range dec.parsers {
			if err := verifyEvents(p.events, p.flow, p.dir); err != nil {
				for _, e := range p.events {
					t.Logf("%c n=%d len=%d first=%x", e.kind, e.n, len(e.data), e.data[:min(4, len(e.data))])
				}
				t.Fatal(err)
			}
		}
	})
}
