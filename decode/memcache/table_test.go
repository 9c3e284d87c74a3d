package memcache

import (
	"encoding/base64"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
)

// ev builders keep the tables short.
func rq(op string, write bool) string { return event{op: op, write: write}.String() }
func ky(op, key string, write bool) string {
	return event{op: op, write: write, key: key, isKey: true}.String()
}
func er(reason string) string { return event{reason: reason}.String() }

func evStrings(s *recSink) []string {
	out := []string{}
	for _, e := range s.ev {
		out = append(out, e.String())
	}
	return out
}

type tcase struct {
	name string
	in   string
	want []string
}

func runTable(t *testing.T, cases []tcase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := evStrings(decodeAll([]byte(tc.in)))
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("input %q\n got: %q\nwant: %q", tc.in, got, tc.want)
			}
			// The same bytes fed one at a time must give the same events.
			var chunks [][]byte
			for i := range len(tc.in) {
				chunks = append(chunks, []byte{tc.in[i]})
			}
			got1 := evStrings(decodeChunks(false, chunks...))
			if strings.Join(got1, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("byte by byte %q\n got: %q\nwant: %q", tc.in, got1, tc.want)
			}
		})
	}
}

func TestText(t *testing.T) {
	long := strings.Repeat("k", 250)
	tooLong := strings.Repeat("k", 251)
	runTable(t, []tcase{
		{"get one", "get a\r\n", []string{rq("get", false), ky("get", "a", false)}},
		{"get three", "get a b c\r\n", []string{rq("get", false), ky("get", "a", false), ky("get", "b", false), ky("get", "c", false)}},
		{"gets", "gets x:1 y:2\r\n", []string{rq("gets", false), ky("gets", "x:1", false), ky("gets", "y:2", false)}},
		{"bare LF and extra spaces", "get  a   b \n", []string{rq("get", false), ky("get", "a", false), ky("get", "b", false)}},
		{"gat", "gat 100 a b\r\n", []string{rq("gat", false), ky("gat", "a", false), ky("gat", "b", false)}},
		{"gats negative exptime", "gats -1 a\r\n", []string{rq("gats", false), ky("gats", "a", false)}},
		{"gat without keys", "gat 100\r\n", []string{er(ReasonBadLine)}},
		{"gat bad exptime", "gat x a\r\n", []string{er(ReasonBadLine)}},
		{"get without keys", "get\r\n", []string{er(ReasonBadLine)}},
		{"key of 250", "get " + long + "\r\n", []string{rq("get", false), ky("get", long, false)}},
		{"key of 251", "get " + tooLong + "\r\n", []string{er(ReasonKeyTooLong)}},
		{"second key too long", "get a " + tooLong + " b\r\n", []string{rq("get", false), ky("get", "a", false), er(ReasonKeyTooLong)}},
		{"set", "set k 0 0 5\r\nhello\r\nget k\r\n", []string{rq("set", true), ky("set", "k", true), rq("get", false), ky("get", "k", false)}},
		{"set value looks like get", "set k 1 2 10 noreply\r\nget evil\r\n\r\nget k\r\n", []string{rq("set", true), ky("set", "k", true), rq("get", false), ky("get", "k", false)}},
		{"add replace append prepend", "add a 0 0 1\r\nx\r\nreplace b 0 0 1\r\nx\r\nappend c 0 0 1\r\nx\r\nprepend d 0 0 0\r\n\r\n",
			[]string{rq("add", true), ky("add", "a", true), rq("replace", true), ky("replace", "b", true), rq("append", true), ky("append", "c", true), rq("prepend", true), ky("prepend", "d", true)}},
		{"cas", "cas k 0 0 2 99 noreply\r\nab\r\n", []string{rq("cas", true), ky("cas", "k", true)}},
		{"cas missing unique", "cas k 0 0 2\r\nab\r\n", []string{er(ReasonBadLine), er(ReasonUnknownCommand)}},
		{"set bad data terminator", "set k 0 0 2\r\nabcd\r\nget z\r\n", []string{rq("set", true), ky("set", "k", true), er(ReasonBadData), er(ReasonBadLine), rq("get", false), ky("get", "z", false)}},
		{"set negative length", "set k 0 0 -1\r\n", []string{er(ReasonBadLength)}},
		{"set huge length", "set k 0 0 99999999999\r\n", []string{er(ReasonBadLength)}},
		{"set bad flags", "set k x 0 1\r\nx\r\n", []string{er(ReasonBadLine), er(ReasonUnknownCommand)}},
		{"set key too long", "set " + tooLong + " 0 0 1\r\n", []string{er(ReasonKeyTooLong)}},
		{"delete", "delete k\r\ndelete k noreply\r\ndelete k 0\r\ndelete k 0 noreply\r\n", []string{
			rq("delete", true), ky("delete", "k", true), rq("delete", true), ky("delete", "k", true),
			rq("delete", true), ky("delete", "k", true), rq("delete", true), ky("delete", "k", true)}},
		{"delete with time", "delete k 10\r\n", []string{er(ReasonBadLine)}},
		{"incr decr", "incr n 5\r\ndecr n 2 noreply\r\n", []string{rq("incr", true), ky("incr", "n", true), rq("decr", true), ky("decr", "n", true)}},
		{"incr bad delta", "incr n x\r\n", []string{er(ReasonBadLine)}},
		{"touch", "touch k 10\r\n", []string{rq("touch", true), ky("touch", "k", true)}},
		{"others", "stats\r\nstats slabs\r\nversion\r\nflush_all 0\r\nverbosity 1\r\nquit\r\n", []string{
			rq("stats", false), rq("stats", false), rq("version", false), rq("flush_all", true), rq("verbosity", false), rq("quit", false)}},
		{"unknown command", "bogus a b\r\nget a\r\n", []string{er(ReasonUnknownCommand), rq("get", false), ky("get", "a", false)}},
		{"empty line", "\r\n", []string{er(ReasonBadLine)}},
		{"upper case is unknown", "GET a\r\n", []string{er(ReasonUnknownCommand)}},
	})
}

func TestMeta(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	runTable(t, []tcase{
		{"mg plain", "mg k\r\n", []string{rq("mg", false), ky("mg", "k", false)}},
		{"mg flags", "mg k s v t f h l k c O123 N30 R10 T60 q u\r\n", []string{rq("mg", false), ky("mg", "k", false)}},
		{"mg base64", "mg " + b64("a b\x00c") + " b v\r\n", []string{rq("mg", false), ky("mg", "a b\x00c", false)}},
		{"mg base64 flag first", "mg " + b64("zz") + " v b\r\n", []string{rq("mg", false), ky("mg", "zz", false)}},
		{"mg bad base64", "mg !!!! b\r\n", []string{er(ReasonBadBase64)}},
		{"mg unpadded base64", "mg YWJj\r\nmg YWI b\r\n", []string{rq("mg", false), ky("mg", "YWJj", false), er(ReasonBadBase64)}},
		{"mg bad flag", "mg k 1\r\n", []string{er(ReasonBadLine)}},
		{"mg no key", "mg\r\n", []string{er(ReasonBadLine)}},
		{"quiet pipeline", "mg a v q\r\nmg b v q\r\nmn\r\n", []string{rq("mg", false), ky("mg", "a", false), rq("mg", false), ky("mg", "b", false), rq("mn", false)}},
		{"ms", "ms k 2 T0 F5\r\nhi\r\nmg k\r\n", []string{rq("ms", true), ky("ms", "k", true), rq("mg", false), ky("mg", "k", false)}},
		{"ms base64", "ms " + b64("k\xff") + " 1 b\r\nx\r\n", []string{rq("ms", true), ky("ms", "k\xff", true)}},
		{"ms bad flag swallows data", "ms k 7 5\r\nmg evil\r\nmg k\r\n", []string{er(ReasonBadLine), rq("mg", false), ky("mg", "k", false)}},
		{"ms bad length", "ms k x\r\n", []string{er(ReasonBadLength)}},
		{"ms missing length", "ms k\r\n", []string{er(ReasonBadLine)}},
		{"md ma", "md k q\r\nma n N0 J13 D5 MI\r\n", []string{rq("md", true), ky("md", "k", true), rq("ma", true), ky("ma", "n", true)}},
		{"me has no key", "me k\r\n", []string{rq("me", false)}},
		{"mn", "mn\r\n", []string{rq("mn", false)}},
		{"mixed with text", "get a\r\nmg b v\r\ngets c\r\n", []string{rq("get", false), ky("get", "a", false), rq("mg", false), ky("mg", "b", false), rq("gets", false), ky("gets", "c", false)}},
	})
}

// binReq builds one binary request.
func binReq(op byte, key string, extras, value []byte) []byte {
	h := make([]byte, 24, 24+len(extras)+len(key)+len(value))
	h[0] = 0x80
	h[1] = op
	binary.BigEndian.PutUint16(h[2:], uint16(len(key)))
	h[4] = byte(len(extras))
	binary.BigEndian.PutUint32(h[8:], uint32(len(extras)+len(key)+len(value)))
	h = append(h, extras...)
	h = append(h, key...)
	return append(h, value...)
}

func cat(parts ...[]byte) string {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return string(b)
}

func TestBinary(t *testing.T) {
	e4, e8, e20 := make([]byte, 4), make([]byte, 8), make([]byte, 20)
	var cases []tcase
	for _, r := range []struct {
		op   byte
		name string
		ext  []byte
	}{{0x00, "GET", nil}, {0x09, "GETQ", nil}, {0x0c, "GETK", nil}, {0x0d, "GETKQ", nil},
		{0x1d, "GAT", e4}, {0x1e, "GATQ", e4}, {0x23, "GATK", e4}, {0x24, "GATKQ", e4}} {
		cases = append(cases, tcase{r.name, cat(binReq(r.op, "key:1", r.ext, nil)), []string{rq(r.name, false), ky(r.name, "key:1", false)}})
	}
	for _, w := range []struct {
		op   byte
		name string
		ext  []byte
		val  []byte
	}{{0x01, "SET", e8, []byte("v")}, {0x02, "ADD", e8, []byte("v")}, {0x03, "REPLACE", e8, nil},
		{0x04, "DELETE", nil, nil}, {0x05, "INCREMENT", e20, nil}, {0x06, "DECREMENT", e20, nil},
		{0x0e, "APPEND", nil, []byte("x")}, {0x0f, "PREPEND", nil, []byte("x")},
		{0x11, "SETQ", e8, []byte("v")}, {0x12, "ADDQ", e8, nil}, {0x13, "REPLACEQ", e8, nil},
		{0x14, "DELETEQ", nil, nil}, {0x15, "INCREMENTQ", e20, nil}, {0x16, "DECREMENTQ", e20, nil},
		{0x19, "APPENDQ", nil, []byte("x")}, {0x1a, "PREPENDQ", nil, []byte("x")}, {0x1c, "TOUCH", e4, nil}} {
		cases = append(cases, tcase{w.name, cat(binReq(w.op, "w", w.ext, w.val)), []string{rq(w.name, true), ky(w.name, "w", true)}})
	}
	cases = append(cases,
		tcase{"GETKQ batch + NOOP", cat(binReq(0x0d, "a", nil, nil), binReq(0x0d, "b", nil, nil), binReq(0x0d, "c", nil, nil), binReq(0x0a, "", nil, nil)),
			[]string{rq("GETKQ", false), ky("GETKQ", "a", false), rq("GETKQ", false), ky("GETKQ", "b", false), rq("GETKQ", false), ky("GETKQ", "c", false), rq("NOOP", false)}},
		tcase{"others", cat(binReq(0x0b, "", nil, nil), binReq(0x10, "", nil, nil), binReq(0x10, "slabs", nil, nil), binReq(0x08, "", e4, nil), binReq(0x1b, "", e4, nil), binReq(0x20, "", nil, nil), binReq(0x21, "PLAIN", nil, []byte("\x00u\x00p")), binReq(0x07, "", nil, nil)),
			[]string{rq("VERSION", false), rq("STAT", false), rq("STAT", false), rq("FLUSH", false), rq("VERBOSITY", false), rq("SASL_LIST_MECHS", false), rq("SASL_AUTH", false), rq("QUIT", false)}},
		tcase{"large value skipped", cat(binReq(0x01, "big", e8, make([]byte, 100000)), binReq(0x00, "after", nil, nil)),
			[]string{rq("SET", true), ky("SET", "big", true), rq("GET", false), ky("GET", "after", false)}},
		tcase{"binary key bytes", cat(binReq(0x00, "\x00\xff ", nil, nil)), []string{rq("GET", false), ky("GET", "\x00\xff ", false)}},
	)
	// Lies: each is refused at the header and the parser resynchronises on
	// the GET that follows.
	bad := func(mut func(h []byte)) string {
		h := binReq(0x00, "k", nil, nil)
		mut(h)
		return cat(h, binReq(0x00, "next", nil, nil))
	}
	next := []string{er(ReasonBadHeader), er(ReasonResync), rq("GET", false), ky("GET", "next", false)}
	cases = append(cases,
		tcase{"unknown opcode", bad(func(h []byte) { h[1] = 0x99 }), next},
		tcase{"datatype", bad(func(h []byte) { h[5] = 1 }), next},
		tcase{"GET with extras", bad(func(h []byte) { h[4] = 1 }), next},
		tcase{"GET body longer than key", bad(func(h []byte) { h[11] = 9 }), next},
		tcase{"body shorter than key", bad(func(h []byte) { h[3] = 5 }), next},
		tcase{"key too long", bad(func(h []byte) { h[2], h[3] = 1, 0; h[11] = 0 }), next},
		tcase{"huge body", cat(binReq(0x01, "k", e8, nil)[:8], []byte{0x7f, 0xff, 0xff, 0xff}, make([]byte, 12), binReq(0x00, "next", nil, nil)), next},
	)
	runTable(t, cases)
}

// TestLongGet: a multi-get line longer than maxLine is decoded key by key as
// it arrives, whatever the chunking.
func TestLongGet(t *testing.T) {
	var b strings.Builder
	var want []string
	b.WriteString("gets")
	for i := range 600 {
		k := "key:" + strings.Repeat("x", i%40) + ":" + string(rune('a'+i%26))
		b.WriteString(" " + k)
		want = append(want, k)
	}
	b.WriteString("\r\nget after\r\n")
	want = append(want, "after")
	in := []byte(b.String())
	for _, size := range []int{1, 7, 100, 1000, 4096, len(in)} {
		var chunks [][]byte
		for rest := in; len(rest) > 0; {
			n := min(size, len(rest))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		s := decodeChunks(false, chunks...)
		if got := s.keys(); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("chunk %d: got %d keys, want %d", size, len(got), len(want))
		}
		if len(s.errors()) != 0 {
			t.Errorf("chunk %d: errors %v", size, s.errors())
		}
	}
	// A long non-get line is refused.
	s := decodeAll([]byte("stats " + strings.Repeat("x", maxLine) + "\r\nget a\r\n"))
	if got := evStrings(s); strings.Join(got, ",") != strings.Join([]string{er(ReasonLineTooLong), er(ReasonResync), rq("get", false), ky("get", "a", false)}, ",") {
		t.Errorf("long stats line: %q", got)
	}
}

func TestDecoder(t *testing.T) {
	d := New()
	if d.Proto() != decode.ProtoMemcache {
		t.Errorf("Proto = %v", d.Proto())
	}
	if p := d.NewParser(decode.ToClient, false); p == nil {
		t.Error("ToClient parser is nil, want the reply parser")
	}
	if p := d.NewParser(decode.ToServer, true); p == nil {
		t.Error("ToServer parser is nil")
	}
}
