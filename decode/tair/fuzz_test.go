package tair

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
	w "github.com/hotsniff/hotsniff/internal/testing/tairwire"
)

var writeSeeds = flag.Bool("write-seeds", false, "rewrite testdata/fuzz/FuzzParse from the encoder")

// FuzzParse feeds arbitrary bytes, split in two at an arbitrary point, to
// request and response parsers, fresh and mid-stream. Whatever the input:
// no panic, no unbounded buffering, and every key reported is non-empty,
// weighted >= 1 and made of bytes present in the input (nothing invented).
func FuzzParse(f *testing.F) {
	for _, it := range corpus() {
		f.Add(it.frame, uint16(len(it.frame)/2))
	}
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		d := New(Config{MaxFrame: 1 << 16})
		for _, dir := range []decode.Dir{decode.ToServer, decode.ToClient} {
			for _, mid := range []bool{false, true} {
				s := &fuzzSink{data: data, t: t}
				cut := int(split)
				feed(t, d.NewParser(dir, mid), data, func() int {
					n := max(cut, 1)
					cut = len(data)
					return n
				}, s, 1<<16+16+len(data))
				if dir == decode.ToClient && s.n > 0 {
					t.Fatalf("response parser reported %d keys", s.n)
				}
			}
		}
	})
}

type fuzzSink struct {
	decode.Discard
	data []byte
	t    *testing.T
	n    int
}

func (*fuzzSink) Request(*decode.Flow, *decode.Request) {}
func (s *fuzzSink) Key(_ *decode.Flow, r *decode.Request, k decode.Key) {
	s.n++
	if len(k.Bytes) == 0 || k.Weight < 1 || r.Op == "" {
		s.t.Fatalf("bad key %+v in %+v", k, r)
	}
	if !bytes.Contains(s.data, k.Bytes) {
		s.t.Fatalf("key %q is not in the input", k.Bytes)
	}
}
func (*fuzzSink) Error(*decode.Flow, string) {}

// TestWriteFuzzSeeds rewrites the committed seed corpus when run with
// -write-seeds: the corpus frames, a pipelined stream, and damaged copies.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*writeSeeds {
		t.Skip("run with -write-seeds to rewrite testdata/fuzz/FuzzParse")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzParse")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	seeds := map[string][]byte{}
	for i, it := range corpus() {
		seeds[fmt.Sprintf("frame-%02d", i)] = it.frame
	}
	all, _, _ := stream(corpus())
	seeds["stream"] = all
	seeds["stream-midway"] = all[len(all)/3:]
	for _, name := range []string{"Ex101Get", "Ex102MGet", "Ex103PrefixGets", "Ex104SimpleGet", "Ex105Feedback"} {
		dump := map[string]string{"Ex101Get": w.Ex101Get, "Ex102MGet": w.Ex102MGet,
			"Ex103PrefixGets": w.Ex103PrefixGets, "Ex104SimpleGet": w.Ex104SimpleGet, "Ex105Feedback": w.Ex105Feedback}[name]
		b, err := w.ParseDump(dump)
		if err != nil {
			t.Fatal(err)
		}
		seeds["spec-"+name] = b
	}
	lie := w.AppendGet(nil, 1, 3, w.Plain("k1"), w.Plain("k2"))
	lie[15]++
	seeds["lying-length"] = append(lie, w.AppendGet(nil, 2, 3, w.Plain("k3"))...)
	for name, b := range seeds {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\nuint16(%d)\n", strconv.Quote(string(b)), len(b)/2)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
