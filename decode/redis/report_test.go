package redis

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
)

// reportString renders a report compactly: [reject:]hits/window@ns key.
func reportString(a *decode.Absorbed) string {
	s := fmt.Sprintf("%d/%d@%d %s", a.Hits, a.WindowMS, a.NS, strconv.Quote(string(a.Key)))
	if a.Reject != "" {
		s = a.Reject + ":" + s
	}
	return s
}

func echo(hits, win int, key string) string {
	return resp("ECHO", fmt.Sprintf("hotsniff:absorbed:1 %d %d %s", hits, win, key))
}

func TestAbsorbedReports(t *testing.T) {
	tests := []struct {
		name string
		in   string
		gap  int // feed a Gap after this many bytes (0: none)
		want []string
	}{
		{"paired get", resp("GET", "item:1") + echo(120, 50, "item:1"), 0, []string{`120/50@0 "item:1"`}},
		{"paired hgetall", resp("HGETALL", "h") + echo(7, 1000, "h"), 0, []string{`7/1000@0 "h"`}},
		{"key with spaces and bytes", resp("GET", "a b\x00\xff") + echo(3, 9, "a b\x00\xff"), 0, []string{`3/9@0 "a b\x00\xff"`}},
		{"empty key", resp("GET", "") + echo(1, 1, ""), 0, []string{`1/1@0 ""`}},
		{"select sets ns", resp("SELECT", "3") + resp("GET", "k") + echo(5, 5, "k"), 0, []string{`5/5@3 "k"`}},
		{"lower-case echo", resp("get", "k") + resp("echo", "hotsniff:absorbed:1 2 3 k"), 0, []string{`2/3@0 "k"`}},
		{"other key", resp("GET", "a") + echo(5, 5, "b"), 0, []string{`unpaired:5/5@0 "b"`}},
		{"prefix of key", resp("GET", "ab") + echo(5, 5, "a"), 0, []string{`unpaired:5/5@0 "a"`}},
		{"mget", resp("MGET", "a", "b") + echo(5, 5, "a"), 0, []string{`unpaired:5/5@0 "a"`}},
		{"mget of one key", resp("MGET", "a") + echo(5, 5, "a"), 0, []string{`5/5@0 "a"`}},
		{"hmget reads its hash", resp("HMGET", "h", "f1", "f2") + echo(5, 5, "h"), 0, []string{`5/5@0 "h"`}},
		{"write", resp("SET", "a", "v") + echo(5, 5, "a"), 0, []string{`unpaired:5/5@0 "a"`}},
		{"not immediately", resp("GET", "a") + resp("PING") + echo(5, 5, "a"), 0, []string{`unpaired:5/5@0 "a"`}},
		{"second report", resp("GET", "a") + echo(5, 5, "a") + echo(5, 5, "a"), 0, []string{`5/5@0 "a"`, `unpaired:5/5@0 "a"`}},
		{"first on connection", echo(5, 5, "a"), 0, []string{`unpaired:5/5@0 "a"`}},
		{"gap between", resp("GET", "a") + echo(5, 5, "a"), len(resp("GET", "a")), []string{`unpaired:5/5@0 "a"`}},
		{"zero hits", resp("GET", "a") + echo(0, 5, "a"), 0, []string{`malformed:0/0@0 ""`}},
		{"zero window", resp("GET", "a") + echo(5, 0, "a"), 0, []string{`malformed:0/0@0 ""`}},
		{"leading zero", resp("GET", "a") + resp("ECHO", "hotsniff:absorbed:1 05 5 a"), 0, []string{`malformed:0/0@0 ""`}},
		{"other version", resp("GET", "a") + resp("ECHO", "hotsniff:absorbed:2 5 5 a"), 0, []string{`malformed:0/0@0 ""`}},
		{"no key separator", resp("GET", "a") + resp("ECHO", "hotsniff:absorbed:1 5 5"), 0, []string{`malformed:0/0@0 ""`}},
		{"20 digits", resp("GET", "a") + resp("ECHO", "hotsniff:absorbed:1 12345678901234567890 5 a"), 0, []string{`malformed:0/0@0 ""`}},
		{"19 digits", resp("GET", "a") + resp("ECHO", "hotsniff:absorbed:1 9999999999999999999 5 a"), 0, []string{`9999999999999999999/5@0 "a"`}},
		{"application echo", resp("GET", "a") + resp("ECHO", "hello"), 0, nil},
		{"echo with two args", resp("GET", "a") + resp("ECHO", "hotsniff:absorbed:1 5 5 a", "x"), 0, nil},
		{"inline", "GET a\r\nECHO \"hotsniff:absorbed:1 5 5 a\"\r\n", 0, []string{`5/5@0 "a"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &checkSink{t: t}
			p := New(Config{}).NewParser(decode.ToServer, false)
			in := []byte(tc.in)
			if tc.gap > 0 {
				p.Parse(in[:tc.gap], testFlow, s)
				p.Gap()
				in = in[tc.gap:]
			}
			if n := p.Parse(in, testFlow, s); n != len(in) {
				t.Fatalf("consumed %d of %d", n, len(in))
			}
			if !reflect.DeepEqual(s.abs, tc.want) {
				t.Errorf("reports %q, want %q", s.abs, tc.want)
			}
			// Split at every byte: the same reports, paired the same way
			// (the remembered key then crosses Parse calls as a hash).
			if tc.gap == 0 {
				for cut := 1; cut < len(tc.in); cut++ {
					s2 := &checkSink{t: t}
					p2 := New(Config{}).NewParser(decode.ToServer, false)
					n := p2.Parse([]byte(tc.in[:cut]), testFlow, s2)
					rest := []byte(tc.in[n:])
					if m := p2.Parse(rest, testFlow, s2); m != len(rest) {
						t.Fatalf("cut %d: consumed %d of %d", cut, m, len(rest))
					}
					if !reflect.DeepEqual(s2.abs, s.abs) {
						t.Fatalf("cut %d: reports %q, want %q", cut, s2.abs, s.abs)
					}
				}
			}
		})
	}
}

// A sink that does not take reports sees the ECHO as a request and nothing
// else.
func TestAbsorbedPlainSink(t *testing.T) {
	s := &recSink{}
	p := New(Config{}).NewParser(decode.ToServer, false)
	in := resp("GET", "a") + echo(5, 5, "a")
	p.Parse([]byte(in), testFlow, s)
	if len(s.reqs) != 2 || s.reqs[1].String() != "ECHO" || len(s.errs) != 0 {
		t.Errorf("got %v %v", s.reqs, s.errs)
	}
}

// A report whose key is longer than MaxKeyLen cannot pair with any read
// (such keys are not reported) and is malformed.
func TestAbsorbedKeyTooLong(t *testing.T) {
	s := &checkSink{t: t}
	p := New(Config{MaxKeyLen: 4}).NewParser(decode.ToServer, false)
	in := resp("GET", "abcde") + echo(5, 5, "abcde") + resp("GET", "abcd") + echo(1, 2, "abcd")
	p.Parse([]byte(in), testFlow, s)
	want := []string{`malformed:0/0@0 ""`, `1/2@0 "abcd"`}
	if !reflect.DeepEqual(s.abs, want) {
		t.Errorf("reports %q, want %q", s.abs, want)
	}
}

// Reports pipelined with many reads, fed in random pieces, pair exactly.
func TestAbsorbedPipelineRandomSplit(t *testing.T) {
	var in []byte
	want := 0
	for i := range 500 {
		k := "key:" + strconv.Itoa(i%7)
		in = append(in, resp("GET", k)...)
		if i%3 == 0 {
			in = append(in, echo(i+1, 50, k)...)
			want++
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		s := fuzzFeed(t, in, false, func() int { return 1 + rng.IntN(40) })
		if len(s.abs) != want {
			t.Fatalf("%d reports, want %d", len(s.abs), want)
		}
		for _, a := range s.abs {
			if a[0] < '0' || a[0] > '9' {
				t.Fatalf("report rejected: %s", a)
			}
		}
	}
}
