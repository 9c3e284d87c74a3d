package redis

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
)

// fuzzCfg has small bounds so the fuzzer reaches them.
var fuzzCfg = Config{MaxKeyLen: 64, MaxBulkLen: 1 << 16, MaxArrayLen: 1000, MaxInlineLen: 256}

var reasons = map[string]bool{
	ReasonResync: true, ReasonBadType: true, ReasonBadLength: true, ReasonTooLong: true,
	ReasonBadFormat: true, ReasonBadInline: true, ReasonKeyTooLong: true,
}

// checkSink records like recSink and checks every callback's invariants.
type checkSink struct {
	decode.Discard
	recSink
	t   testing.TB
	abs []string // absorbed-demand reports, as reportString
}

func (c *checkSink) Absorbed(f *decode.Flow, a *decode.Absorbed) {
	switch a.Reject {
	case "", decode.AbsorbedUnpaired:
		if a.Hits < 1 || a.WindowMS < 1 || len(a.Key) > fuzzCfg.MaxKeyLen {
			c.t.Fatalf("report %+v out of bounds", a)
		}
	case decode.AbsorbedMalformed:
	default:
		c.t.Fatalf("report reject reason %q not in the fixed set", a.Reject)
	}
	c.abs = append(c.abs, reportString(a))
}

func (c *checkSink) Request(f *decode.Flow, q *decode.Request) {
	if q.Op != "UNKNOWN" && lookupUpper([]byte(q.Op)) < 0 {
		c.t.Fatalf("op %q not from the table", q.Op)
	}
	if q.NS < 0 {
		c.t.Fatalf("negative ns %d", q.NS)
	}
	c.recSink.Request(f, q)
}

func (c *checkSink) Key(f *decode.Flow, q *decode.Request, k decode.Key) {
	if len(c.reqs) == 0 {
		c.t.Fatal("key before any request")
	}
	if len(k.Bytes) > fuzzCfg.MaxKeyLen {
		c.t.Fatalf("key of %d bytes beyond MaxKeyLen", len(k.Bytes))
	}
	if k.Weight < 1 {
		c.t.Fatalf("weight %d", k.Weight)
	}
	c.recSink.Key(f, q, k)
}

func (c *checkSink) Error(f *decode.Flow, reason string) {
	if !reasons[reason] {
		c.t.Fatalf("reason %q not in the fixed set", reason)
	}
	c.recSink.Error(f, reason)
}

// fuzzFeed feeds data in chunks drawn from seed and checks what Parse
// returns against the contract.
func fuzzFeed(t *testing.T, data []byte, mid bool, sizes func() int) *checkSink {
	s := &checkSink{t: t}
	p := New(fuzzCfg).NewParser(decode.ToServer, mid)
	var buf []byte
	skip := 0
	for len(data) > 0 {
		n := min(sizes(), len(data))
		chunk := data[:n]
		data = data[n:]
		if skip > 0 {
			d := min(skip, len(chunk))
			skip -= d
			chunk = chunk[d:]
			if len(chunk) == 0 {
				continue
			}
		}
		buf = append(buf, chunk...)
		got := p.Parse(buf, testFlow, s)
		switch {
		case got < 0:
			t.Fatalf("Parse returned %d", got)
		case got > len(buf):
			if got-len(buf) > fuzzCfg.MaxBulkLen+2 {
				t.Fatalf("skip of %d beyond MaxBulkLen", got-len(buf))
			}
			skip = got - len(buf)
			buf = buf[:0]
		default:
			buf = append(buf[:0], buf[got:]...)
			if limit := max(fuzzCfg.MaxKeyLen+reportOverhead+2, fuzzCfg.MaxInlineLen, 64); len(buf) > limit {
				t.Fatalf("left %d bytes unconsumed, bound %d", len(buf), limit)
			}
		}
	}
	return s
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(resp("GET", "k")+resp("MGET", "a", "b")), uint64(0))
	f.Add([]byte("GET \"a\\x41\" 'b'\r\n*1\r\n$4\r\nPING\r\n"), uint64(7))
	f.Add([]byte(resp("GET", "k")+resp("ECHO", "hotsniff:absorbed:1 120 50 k")+resp("ECHO", "hotsniff:absorbed:1 1 1 k")), uint64(9))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		mid := seed&1 == 1
		whole := fuzzFeed(t, data, mid, func() int { return len(data) })
		rng := rand.New(rand.NewPCG(seed, seed>>32))
		maxChunk := 1 + int(seed>>1)%64
		split := fuzzFeed(t, data, mid, func() int { return 1 + rng.IntN(maxChunk) })
		// On input without garbage, however it is split, the result is the
		// same as whole.
		clean := true
		for _, e := range whole.errs {
			clean = clean && e == ReasonResync
		}
		if clean && (!reflect.DeepEqual(whole.reqs, split.reqs) || !reflect.DeepEqual(whole.errs, split.errs) || !reflect.DeepEqual(whole.abs, split.abs)) {
			t.Fatalf("split decode differs:\nwhole %v %q %q\nsplit %v %q %q", whole.reqs, whole.errs, whole.abs, split.reqs, split.errs, split.abs)
		}
	})
}

// TestWriteFuzzSeeds writes seed corpus files cut from the recorded real
// traffic (go test -run TestWriteFuzzSeeds -update).
func TestWriteFuzzSeeds(t *testing.T) {
	if !*update {
		t.Skip("needs -update")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzParse")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte, seed uint64) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\nuint64(%d)\n", strconv.Quote(string(data)), seed)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, stream := range recordedStreams(t) {
		bounds := boundaries(t, stream)
		// Windows of a few requests, some starting mid-request.
		for i := 0; i+4 < len(bounds); i += 3 {
			piece := stream[bounds[i]:bounds[i+4]]
			if len(piece) > 4096 {
				continue
			}
			write(fmt.Sprintf("%s-%03d", name, i), piece, uint64(i*2))
			if len(piece) > 10 {
				write(fmt.Sprintf("%s-%03d-mid", name, i), piece[5:], uint64(i*2+1))
			}
		}
	}
	write("inline", []byte("SET \"a b\\x00\" 'c\\'d'\r\nGET k\n\r\nHMGET h a b\r\n"), 4)
	write("garbage", []byte("*2\r\n$3\r\nGET\r\n$-1\r\n*x\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$99999\r\n"), 6)
	write("absorbed-paired", []byte(resp("GET", "item:hot")+resp("ECHO", "hotsniff:absorbed:1 4213 50 item:hot")+resp("HGETALL", "h k")+resp("ECHO", "hotsniff:absorbed:1 7 1000 h k")), 10)
	write("absorbed-rejected", []byte(resp("MGET", "a", "b")+resp("ECHO", "hotsniff:absorbed:1 5 5 a")+resp("GET", "a")+resp("ECHO", "hotsniff:absorbed:1 0 5 a")+resp("ECHO", "hotsniff:absorbed:2 5 5 a")+resp("ECHO", "hello")), 11)
	write("eval-xread-sort", []byte(resp("EVAL", "s", "2", "a", "b", "c")+resp("XREAD", "COUNT", "1", "STREAMS", "x", "y", "0", "0")+resp("SORT", "k", "LIMIT", "0", "1", "STORE", "d")+resp("SELECT", "3")+resp("GET", "k")), 8)
}
