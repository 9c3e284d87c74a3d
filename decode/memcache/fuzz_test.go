package memcache

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the fuzz seed corpora from the fixture captures")

// checkParse is the property all three fuzzers share. On any input the
// parser must not panic, must consume within bounds, and must report keys of
// 1..250 bytes. When the input decodes without a single error (a well-formed
// stream), cutting it anywhere, or into single bytes, must not change what is
// reported. A parser joining mid-stream must not panic either.
func checkParse(t *testing.T, in []byte) {
	whole := decodeAll(in)
	for _, e := range whole.ev {
		if e.isKey && (len(e.key) == 0 || len(e.key) > maxKeyLen) {
			t.Fatalf("key of %d bytes", len(e.key))
		}
	}
	decodeChunks(true, in)
	if len(whole.errors()) > 0 {
		return
	}
	want := strings.Join(evStrings(whole), "\n")
	cut := 0
	if len(in) > 0 {
		cut = int(in[len(in)-1]) % (len(in) + 1)
	}
	if got := strings.Join(evStrings(decodeChunks(false, in[:cut], in[cut:])), "\n"); got != want {
		t.Fatalf("cut at %d changes the result:\n got %s\nwant %s", cut, got, want)
	}
	var ones [][]byte
	for i := range in {
		ones = append(ones, in[i:i+1])
	}
	if got := strings.Join(evStrings(decodeChunks(false, ones...)), "\n"); got != want {
		t.Fatalf("byte-by-byte changes the result:\n got %s\nwant %s", got, want)
	}
}

// The three fuzzers differ in their seeds (one grammar each, taken from the
// fixture captures) so the mutator explores each grammar from real traffic.
func FuzzText(f *testing.F) {
	f.Add([]byte("get a b c\r\nset k 0 0 5\r\nhello\r\ngat 10 x\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) { checkParse(t, in) })
}

func FuzzMeta(f *testing.F) {
	f.Add([]byte("mg a v q\r\nms k 2 T0\r\nhi\r\nmg YQ== b k v\r\nmn\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) { checkParse(t, in) })
}

func FuzzBinary(f *testing.F) {
	f.Add([]byte(cat(binReq(0x0d, "a", nil, nil), binReq(0x01, "k", make([]byte, 8), []byte("v")), binReq(0x0a, "", nil, nil))))
	f.Fuzz(func(t *testing.T, in []byte) { checkParse(t, in) })
}

// TestWriteSeeds rewrites testdata/fuzz/Fuzz*/ from the fixture captures
// when run with -update-seeds: pieces of real client streams, cut at request
// boundaries and in the middle of requests.
func TestWriteSeeds(t *testing.T) {
	if !*updateSeeds {
		t.Skip("run with -update-seeds to rewrite the seed corpora")
	}
	targets := map[string][]string{
		"FuzzText":   {"gomemcache", "libmemcached", "midstream"},
		"FuzzMeta":   {"meta"},
		"FuzzBinary": {"binary", "libmemcached"},
	}
	for target, fixtures := range targets {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, name := range fixtures {
			for ci, c := range readPcap(t, fixturePath(name+".pcap")) {
				stream := bytes.Join(c.segments, nil)
				if ci >= 3 {
					break // a few connections per fixture are variety enough
				}
				binaryConn := len(stream) > 0 && stream[0] == binMagicReq
				if (target == "FuzzBinary") != binaryConn {
					continue
				}
				for _, at := range []int{0, len(stream) / 2} {
					piece := stream[at:min(len(stream), at+400)]
					body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", piece)
					file := filepath.Join(dir, fmt.Sprintf("%s-%d", name, n))
					if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
						t.Fatal(err)
					}
					n++
				}
			}
		}
		if n == 0 {
			t.Fatalf("%s: no seeds", target)
		}
	}
}
