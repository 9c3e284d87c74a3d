package stream

import (
	"net/netip"
	"testing"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/decode"
)

// countParser consumes whole messages of msgSize bytes and counts them; it
// allocates nothing, so benchmarks measure the assembler alone.
type countParser struct {
	msgSize int
	msgs    int
}

func (p *countParser) Parse(b []byte, f *decode.Flow, s decode.Sink) int {
	n := len(b) / p.msgSize
	p.msgs += n
	return n * p.msgSize
}

func (p *countParser) Gap() {}

type countDecoder struct{ msgSize int }

func (d countDecoder) Proto() decode.Proto { return decode.ProtoRedis }

func (d countDecoder) NewParser(dir decode.Dir, midStream bool) decode.Parser {
	return &countParser{msgSize: d.msgSize}
}

func benchAssembler(msgSize int) *Assembler {
	var reg decode.Registry
	reg.Register(countDecoder{msgSize: msgSize})
	return NewAssembler(DefaultConfig(), DefaultPorts(), &reg, nopSink{})
}

// BenchmarkInOrder: one flow, 64-byte segments, the parser consumes all.
func BenchmarkInOrder(b *testing.B) {
	a := benchAssembler(64)
	seg := capture.Segment{Src: cliAddr, Dst: srvAddr, Seq: 1, Flags: capture.FlagACK, Payload: make([]byte, 64)}
	a.Add(&seg)
	b.SetBytes(64)
	b.ReportAllocs()
	for b.Loop() {
		seg.Seq += 64
		seg.TS += 1000
		a.Add(&seg)
	}
	if st := a.Stats(); st.TotalGaps() != 0 || st.FlowsCreated != 1 {
		b.Fatalf("stats %+v", st)
	}
}

// BenchmarkManyFlows: 10k flows in round robin, 64-byte segments.
func BenchmarkManyFlows(b *testing.B) {
	const flows = 10000
	a := benchAssembler(64)
	segs := make([]capture.Segment, flows)
	for i := range segs {
		segs[i] = capture.Segment{
			Src:     netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), uint16(20000+i)),
			Dst:     srvAddr,
			Seq:     uint32(i) * 7919,
			Flags:   capture.FlagACK,
			Payload: make([]byte, 64),
		}
		a.Add(&segs[i]) // create the flows before timing
	}
	b.SetBytes(64)
	b.ReportAllocs()
	i, ts := 0, int64(0)
	for b.Loop() {
		s := &segs[i]
		s.Seq += 64
		ts += 100
		s.TS = ts
		a.Add(s)
		if i++; i == flows {
			i = 0
		}
	}
	if st := a.Stats(); st.TotalGaps() != 0 || st.FlowsCreated != flows {
		b.Fatalf("stats %+v", st)
	}
}

// BenchmarkSplit: 64-byte messages in 48-byte segments, so every message
// straddles two segments and the tail path runs on every segment.
func BenchmarkSplit(b *testing.B) {
	a := benchAssembler(64)
	seg := capture.Segment{Src: cliAddr, Dst: srvAddr, Seq: 1, Flags: capture.FlagACK, Payload: make([]byte, 48)}
	a.Add(&seg)
	b.SetBytes(48)
	b.ReportAllocs()
	for b.Loop() {
		seg.Seq += 48
		seg.TS += 1000
		a.Add(&seg)
	}
	if st := a.Stats(); st.TotalGaps() != 0 || st.BufferOverflows != 0 {
		b.Fatalf("stats %+v", st)
	}
}

// BenchmarkOutOfOrder: segments arrive in swapped pairs, so every other one
// is copied, held and delivered when its predecessor arrives.
func BenchmarkOutOfOrder(b *testing.B) {
	a := benchAssembler(64)
	seg := capture.Segment{Src: cliAddr, Dst: srvAddr, Seq: 1, Flags: capture.FlagACK, Payload: make([]byte, 64)}
	a.Add(&seg)
	base := seg.Seq + 64
	b.SetBytes(64)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		// Pair k is sent as segment 2k+1, then 2k.
		if n%2 == 0 {
			seg.Seq = base + 64
		} else {
			seg.Seq = base
			base += 128
		}
		n++
		seg.TS += 1000
		a.Add(&seg)
	}
	if st := a.Stats(); st.TotalGaps() != 0 || st.OutOfOrder == 0 {
		b.Fatalf("stats %+v", st)
	}
}

// BenchmarkConnection: a whole short connection per op (SYN, request,
// response, FIN both ways), on 1000 client ports in turn, so flows are
// created, closed, remembered as closed markers and recycled.
func BenchmarkConnection(b *testing.B) {
	a := benchAssembler(64)
	payload := make([]byte, 64)
	ts := int64(0)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		cli := netip.AddrPortFrom(cliAddr.Addr(), uint16(20000+i%1000))
		isn := uint32(i) * 7919
		i++
		for _, s := range []capture.Segment{
			{Src: cli, Dst: srvAddr, Seq: isn, Flags: capture.FlagSYN},
			{Src: srvAddr, Dst: cli, Seq: 5000, Flags: capture.FlagSYN | capture.FlagACK},
			{Src: cli, Dst: srvAddr, Seq: isn + 1, Flags: capture.FlagACK, Payload: payload},
			{Src: srvAddr, Dst: cli, Seq: 5001, Flags: capture.FlagACK, Payload: payload},
			{Src: cli, Dst: srvAddr, Seq: isn + 65, Flags: capture.FlagFIN | capture.FlagACK},
			{Src: srvAddr, Dst: cli, Seq: 5065, Flags: capture.FlagFIN | capture.FlagACK},
		} {
			ts += 1000
			s.TS = ts
			a.Add(&s)
		}
	}
	if st := a.Stats(); st.TotalGaps() != 0 || st.FlowsClosed != uint64(i) {
		b.Fatalf("stats %+v", st)
	}
}
