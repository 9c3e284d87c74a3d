package redis

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
)

func TestSplitRecorded(t *testing.T) {
	for name, stream := range recordedStreams(t) {
		t.Run(name, func(t *testing.T) {
			whole := decodeWhole(t, stream)
			check := func(how string, r *recSink) {
				t.Helper()
				if !reflect.DeepEqual(r.reqs, whole.reqs) || !reflect.DeepEqual(r.errs, whole.errs) {
					t.Fatalf("%s: %d requests, errors %q; whole: %d requests, errors %q",
						how, len(r.reqs), r.errs, len(whole.reqs), whole.errs)
				}
			}
			check("byte by byte", decodeChunks(t, Config{}, false, stream, func() int { return 1 }))
			rng := rand.New(rand.NewPCG(1, 2))
			for _, maxChunk := range []int{2, 3, 7, 16, 100, 1500, 9000} {
				for range 20 {
					check("random chunks up to "+strconv.Itoa(maxChunk), decodeChunks(t, Config{}, false, stream, randomSizes(rng, maxChunk)))
				}
			}
		})
	}
}

// boundaries frames a RESP request stream independently of the parser:
// *N\r\n then N times $L\r\n<L bytes>\r\n. It returns the start offset of
// every request and the end of the stream.
func boundaries(t testing.TB, b []byte) []int {
	t.Helper()
	line := func(pos int, typ byte) (int, int) {
		if b[pos] != typ {
			t.Fatalf("offset %d: want %q, got %q", pos, typ, b[pos])
		}
		end := pos
		for b[end] != '\r' {
			end++
		}
		n, err := strconv.Atoi(string(b[pos+1 : end]))
		if err != nil {
			t.Fatalf("offset %d: %v", pos, err)
		}
		return n, end + 2
	}
	var out []int
	for pos := 0; pos < len(b); {
		out = append(out, pos)
		n, next := line(pos, '*')
		pos = next
		for range n {
			l, next := line(pos, '$')
			pos = next + l + 2
		}
	}
	return append(out, len(b))
}

func TestMidStreamRecorded(t *testing.T) {
	for name, stream := range recordedStreams(t) {
		t.Run(name, func(t *testing.T) {
			whole := decodeWhole(t, stream)
			sent := map[string]bool{}
			for _, q := range whole.reqs {
				for _, k := range q.Keys {
					sent[k.Key] = true
				}
			}
			bounds := boundaries(t, stream)
			// suffix[i] is what a parser in sync reports from request i on.
			suffix := make([]*recSink, len(bounds))
			for i, b := range bounds {
				suffix[i] = decodeWhole(t, stream[b:])
			}
			rng := rand.New(rand.NewPCG(3, 4))
			bi := 0
			for off := 0; off < len(stream); off++ {
				for bounds[bi] < off {
					bi++
				}
				sizes := func() int { return len(stream) }
				if off%7 == 0 {
					sizes = randomSizes(rng, 64)
				}
				r := decodeChunks(t, Config{}, true, stream[off:], sizes)
				for _, q := range r.reqs {
					for _, k := range q.Keys {
						if !sent[k.Key] {
							t.Fatalf("offset %d: phantom key %q in %s", off, k.Key, q)
						}
					}
				}
				// One resync when bytes had to be skipped, none when the
				// join fell on a request boundary.
				if atBoundary := bounds[bi] == off; atBoundary && len(r.errs) != 0 ||
					!atBoundary && (len(r.errs) != 1 || r.errs[0] != ReasonResync) {
					t.Fatalf("offset %d (boundary %v): errors %q", off, atBoundary, r.errs)
				}
				// After the first boundary, exactly what a parser in sync
				// reports, except namespaces: a SELECT before the join is
				// unknown.
				want := suffix[bi].reqs
				if len(r.reqs) != len(want) {
					t.Fatalf("offset %d (boundary %d): %d requests, want %d", off, bounds[bi], len(r.reqs), len(want))
				}
				for i := range want {
					g, w := r.reqs[i], want[i]
					g.NS, w.NS = 0, 0
					if !reflect.DeepEqual(g, w) {
						t.Fatalf("offset %d request %d: got %s, want %s", off, i, g, w)
					}
				}
			}
		})
	}
}
