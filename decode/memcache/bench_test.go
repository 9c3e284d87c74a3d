package memcache

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
)

// countSink counts what it receives, as cheaply as a sink can.
type countSink struct {
	decode.Discard
	reqs, keys, errs int
}

func (s *countSink) Request(*decode.Flow, *decode.Request)         { s.reqs++ }
func (s *countSink) Key(*decode.Flow, *decode.Request, decode.Key) { s.keys++ }
func (s *countSink) Error(*decode.Flow, string)                    { s.errs++ }

// benchParse parses buf (a pipeline of reqs requests) b.N times and reports
// requests and keys per second of one core.
func benchParse(b *testing.B, buf []byte, reqs int) {
	b.Helper()
	p := NewParser(false)
	var f decode.Flow
	s := &countSink{}
	if n := p.Parse(buf, &f, s); n != len(buf) || s.reqs != reqs || s.errs != 0 {
		b.Fatalf("setup: consumed %d of %d, %d requests (want %d), %d errors", n, len(buf), s.reqs, reqs, s.errs)
	}
	*s = countSink{}
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		p.Parse(buf, &f, s)
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(s.reqs)/sec, "requests/s")
	b.ReportMetric(float64(s.keys)/sec, "keys/s")
}

func BenchmarkTextGet10(b *testing.B) {
	var buf bytes.Buffer
	for i := range 100 {
		buf.WriteString("get")
		for j := range 10 {
			fmt.Fprintf(&buf, " user:%d:%d", i, j)
		}
		buf.WriteString("\r\n")
	}
	benchParse(b, buf.Bytes(), 100)
}

func BenchmarkTextGet1(b *testing.B) {
	var buf bytes.Buffer
	for i := range 100 {
		fmt.Fprintf(&buf, "get user:%d\r\n", i)
	}
	benchParse(b, buf.Bytes(), 100)
}

func BenchmarkTextSet(b *testing.B) {
	var buf bytes.Buffer
	for i := range 100 {
		fmt.Fprintf(&buf, "set user:%d 0 0 32\r\n%032d\r\n", i, i)
	}
	benchParse(b, buf.Bytes(), 100)
}

func BenchmarkBinaryGETKQ(b *testing.B) {
	var buf []byte
	for i := range 99 {
		buf = append(buf, binReq(0x0d, fmt.Sprintf("user:%d", i), nil, nil)...)
	}
	buf = append(buf, binReq(0x0a, "", nil, nil)...)
	benchParse(b, buf, 100)
}

func BenchmarkMetaMg(b *testing.B) {
	var buf bytes.Buffer
	for i := range 99 {
		fmt.Fprintf(&buf, "mg user:%d v f t q\r\n", i)
	}
	buf.WriteString("mn\r\n")
	benchParse(b, buf.Bytes(), 100)
}

func BenchmarkMetaMgBase64(b *testing.B) {
	var buf bytes.Buffer
	for i := range 100 {
		fmt.Fprintf(&buf, "mg %s b v\r\n", base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("user:%d", i))))
	}
	benchParse(b, buf.Bytes(), 100)
}

// BenchmarkResync measures the cost of a mid-stream join into binary-looking
// garbage: it must stay linear.
func BenchmarkResyncGarbage(b *testing.B) {
	buf := bytes.Repeat([]byte("\x80\x00zzzz garbage get\r"), 500)
	p := NewParser(true)
	var f decode.Flow
	s := &countSink{}
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for range b.N {
		p.Gap()
		p.Parse(buf, &f, s)
	}
}
