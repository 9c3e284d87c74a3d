package redis

import (
	"strconv"
	"strings"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
)

// countSink counts what it is told; it allocates nothing.
type countSink struct {
	decode.Discard
	reqs, keys, weight, errs int
}

func (c *countSink) Request(*decode.Flow, *decode.Request) { c.reqs++ }
func (c *countSink) Key(_ *decode.Flow, _ *decode.Request, k decode.Key) {
	c.keys++
	c.weight += int(k.Weight)
}
func (c *countSink) Error(*decode.Flow, string) { c.errs++ }

// benchParse parses buf (whole requests) b.N times and reports requests/s.
func benchParse(b *testing.B, buf []byte, reqsPerBuf int) {
	b.Helper()
	p := New(Config{}).NewParser(decode.ToServer, false)
	s := &countSink{}
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if n := p.Parse(buf, testFlow, s); n != len(buf) {
			b.Fatalf("consumed %d of %d", n, len(buf))
		}
	}
	b.StopTimer()
	if s.errs != 0 || s.reqs != b.N*reqsPerBuf {
		b.Fatalf("errors %d, requests %d", s.errs, s.reqs)
	}
	b.ReportMetric(float64(s.reqs)/b.Elapsed().Seconds(), "req/s")
}

func BenchmarkGETPipelined(b *testing.B) {
	var sb strings.Builder
	for i := range 16 {
		sb.WriteString(resp("GET", "item:"+strconv.Itoa(100000+i)))
	}
	benchParse(b, []byte(sb.String()), 16)
}

func BenchmarkGETSingle(b *testing.B) {
	benchParse(b, []byte(resp("GET", "item:100000")), 1)
}

func BenchmarkMGET10(b *testing.B) {
	args := []string{"MGET"}
	for i := range 10 {
		args = append(args, "item:"+strconv.Itoa(100000+i))
	}
	benchParse(b, []byte(resp(args...)), 1)
}

func BenchmarkHMGET(b *testing.B) {
	benchParse(b, []byte(resp("HMGET", "user:1000", "name", "email", "age", "city")), 1)
}

func BenchmarkSET1K(b *testing.B) {
	benchParse(b, []byte(resp("SET", "item:100000", strings.Repeat("v", 1024))), 1)
}

func BenchmarkInlineGET(b *testing.B) {
	benchParse(b, []byte("GET item:100000\r\n"), 1)
}

// BenchmarkSplitMGET feeds a 100-key MGET in 64-byte segments the way the
// stream layer does (tail kept, new bytes appended).
func BenchmarkSplitMGET(b *testing.B) {
	args := []string{"MGET"}
	for i := range 100 {
		args = append(args, "item:"+strconv.Itoa(100000+i))
	}
	in := []byte(resp(args...))
	p := New(Config{}).NewParser(decode.ToServer, false)
	s := &countSink{}
	buf := make([]byte, 0, 256)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for off := 0; off < len(in); off += 64 {
			buf = append(buf, in[off:min(off+64, len(in))]...)
			n := p.Parse(buf, testFlow, s)
			buf = append(buf[:0], buf[n:]...)
		}
	}
	b.StopTimer()
	if s.errs != 0 || s.keys != 100*b.N || len(buf) != 0 {
		b.Fatalf("errors %d keys %d tail %d", s.errs, s.keys, len(buf))
	}
	b.ReportMetric(float64(s.keys)/b.Elapsed().Seconds(), "keys/s")
}

var keepParser decode.Parser

func TestZeroAllocs(t *testing.T) {
	d := New(Config{})
	if n := testing.AllocsPerRun(100, func() { keepParser = d.NewParser(decode.ToServer, false) }); n != 1 {
		t.Errorf("NewParser: %v allocations, want 1", n)
	}
	// Steady state over real mixed traffic, inline with quotes included,
	// split into segments as the stream layer delivers them.
	var in []byte
	for _, s := range recordedStreams(t) {
		in = append(in, s...)
	}
	in = append(in, "HMGET \"h \\x41\" f1 'f 2'\r\nGET k\r\n"...)
	p := d.NewParser(decode.ToServer, false)
	s := &countSink{}
	buf := make([]byte, 0, 64<<10)
	run := func() {
		skip := 0
		for off := 0; off < len(in); off += 1000 {
			chunk := in[off:min(off+1000, len(in))]
			if skip >= len(chunk) {
				skip -= len(chunk)
				continue
			}
			buf = append(buf, chunk[skip:]...)
			skip = 0
			n := p.Parse(buf, testFlow, s)
			if n > len(buf) {
				skip = n - len(buf)
				n = len(buf)
			}
			buf = append(buf[:0], buf[n:]...)
		}
	}
	run() // warm up: the inline scratch buffer grows once
	if n := testing.AllocsPerRun(20, run); n != 0 {
		t.Errorf("Parse: %v allocations per pass, want 0", n)
	}
	if s.errs != 0 {
		t.Errorf("%d decode errors", s.errs)
	}
}
