package tair

import (
	"fmt"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
	w "github.com/hotsniff/hotsniff/internal/testing/tairwire"
)

// countSink counts keys so the benchmark's sink work is realistic but tiny.
type countSink struct {
	decode.Discard
	keys, weight uint64
}

func (*countSink) Request(*decode.Flow, *decode.Request) {}
func (c *countSink) Key(_ *decode.Flow, _ *decode.Request, k decode.Key) {
	c.keys++
	c.weight += uint64(k.Weight)
}
func (*countSink) Error(*decode.Flow, string) {}

// benchStream builds a pipelined buffer of 64 packets made by mk.
func benchStream(mk func(chid uint32) []byte) []byte {
	var b []byte
	for i := range 64 {
		b = append(b, mk(uint32(i))...)
	}
	return b
}

func runBench(b *testing.B, buf []byte, keysPerPacket int) {
	p := newReqParser(false)
	var f decode.Flow
	s := &countSink{}
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if n := p.Parse(buf, &f, s); n != len(buf) {
			b.Fatalf("consumed %d of %d", n, len(buf))
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)*64*float64(keysPerPacket)/b.Elapsed().Seconds(), "keys/s")
}

// BenchmarkMGet: pcode 2 with 10 plain keys per packet; keys/s counts key
// occurrences.
func BenchmarkMGet(b *testing.B) {
	buf := benchStream(func(chid uint32) []byte {
		var keys []w.Entry
		for k := range 10 {
			keys = append(keys, w.Plain(fmt.Sprintf("item:%d:%d", chid, k)))
		}
		return w.AppendGet(nil, chid, 3, keys...)
	})
	runBench(b, buf, 10)
}

// BenchmarkPrefixGets: pcode 29 with 10 Java-style skeys under one pkey;
// keys/s counts skeys (entries decoded), which become one weighted Key.
func BenchmarkPrefixGets(b *testing.B) {
	buf := benchStream(func(chid uint32) []byte {
		pk := w.JavaStr(fmt.Sprintf("shop:%d", chid))
		var keys []w.Entry
		for k := range 10 {
			keys = append(keys, w.JavaMixed(pk, w.JavaStr(fmt.Sprintf("sku:%d", k))))
		}
		return w.AppendPrefixGets(nil, chid, 12, keys...)
	})
	runBench(b, buf, 10)
}

// BenchmarkGet: single-key gets, the per-request overhead.
func BenchmarkGet(b *testing.B) {
	buf := benchStream(func(chid uint32) []byte {
		return w.AppendGet(nil, chid, 3, w.Plain(fmt.Sprintf("user:%d", chid)))
	})
	runBench(b, buf, 1)
}
