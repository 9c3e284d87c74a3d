package tair

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
	w "github.com/hotsniff/hotsniff/internal/testing/tairwire"
)

const bound = DefaultMaxFrame + 16 + 4096

// TestSpecExamples decodes the hex dumps of spec §10 and checks the result
// the spec states for each.
func TestSpecExamples(t *testing.T) {
	jpk := "\x00\x18\x00\x04shop1"
	cases := []struct {
		name, dump string
		ops        []string
		want       []rec
	}{
		{"10.1", w.Ex101Get, []string{"get"}, []rec{read("get", 3, "user:42", 1, false)}},
		{"10.2", w.Ex102MGet, []string{"mget"}, []rec{read("mget", 3, "k1", 1, false), read("mget", 3, "k2", 1, false)}},
		{"10.3", w.Ex103PrefixGets, []string{"prefix_gets"}, []rec{read("prefix_gets", 7, jpk, 2, true)}},
		{"10.4", w.Ex104SimpleGet, []string{"simple_prefix_gets"}, []rec{read("simple_prefix_gets", 7, jpk, 2, true)}},
		{"10.5 feedback sent to a server", w.Ex105Feedback, nil, nil},
	}
	for _, c := range cases {
		b, err := w.ParseDump(c.dump)
		if err != nil {
			t.Fatal(err)
		}
		s := newSink()
		var f decode.Flow
		if n := newReqParser(false).Parse(b, &f, s); n != len(b) {
			t.Errorf("%s: consumed %d of %d", c.name, n, len(b))
		}
		sameRecs(t, c.name, s.keys, c.want)
		if len(s.reqs) != len(c.ops) || (len(c.ops) > 0 && s.reqs[0].Op != c.ops[0]) {
			t.Errorf("%s: requests %+v, want ops %v", c.name, s.reqs, c.ops)
		}
		if s.nerrs() != 0 {
			t.Errorf("%s: errors %v", c.name, s.errs)
		}
		if d, ok := Display([]byte(jpk)); !ok || d != "shop1" {
			t.Errorf("Display(pkey region) = %q, %v", d, ok)
		}
	}
	// The feedback push is also accepted (silently) by a response parser.
	b, _ := w.ParseDump(w.Ex105Feedback)
	s := newSink()
	if n := New(Config{}).NewParser(decode.ToClient, false).Parse(b, &decode.Flow{}, s); n != len(b) || s.nerrs() != 0 || len(s.reqs) != 0 {
		t.Errorf("response parser on feedback: n=%d errs=%v reqs=%v", n, s.errs, s.reqs)
	}
}

// TestEveryPcode decodes each corpus frame alone.
func TestEveryPcode(t *testing.T) {
	for _, it := range corpus() {
		s := newSink()
		var f decode.Flow
		if n := newReqParser(false).Parse(it.frame, &f, s); n != len(it.frame) {
			t.Errorf("%s: consumed %d of %d", it.name, n, len(it.frame))
		}
		if s.nerrs() != 0 {
			t.Errorf("%s: errors %v", it.name, s.errs)
		}
		switch {
		case it.op == "" && len(s.reqs) != 0:
			t.Errorf("%s: reported %+v, want nothing", it.name, s.reqs)
		case it.op != "" && (len(s.reqs) != 1 || s.reqs[0].Op != it.op):
			t.Errorf("%s: requests %+v, want one %q", it.name, s.reqs, it.op)
		}
		sameRecs(t, it.name, s.keys, it.keys)
	}
}

// TestPartialFrame checks that an incomplete frame is left unconsumed.
func TestPartialFrame(t *testing.T) {
	fr := w.AppendGet(nil, 1, 3, w.Plain("k1"), w.Plain("k2"))
	for cut := range len(fr) {
		s := newSink()
		if n := newReqParser(false).Parse(fr[:cut], &decode.Flow{}, s); n != 0 || len(s.keys) != 0 || s.nerrs() != 0 {
			t.Fatalf("cut %d: consumed %d, keys %v, errs %v", cut, n, s.keys, s.errs)
		}
	}
}

// TestSplitting feeds the corpus stream byte by byte and in random chunks,
// as the stream layer would, and expects exactly the whole-stream result.
func TestSplitting(t *testing.T) {
	b, _, want := stream(corpus())
	s := newSink()
	feed(t, newReqParser(false), b, one, s, bound)
	sameRecs(t, "byte by byte", s.keys, want)
	if s.nerrs() != 0 {
		t.Errorf("errors %v", s.errs)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		s := newSink()
		max := 1 + rng.IntN(300)
		feed(t, newReqParser(false), b, func() int { return 1 + rng.IntN(max) }, s, bound)
		sameRecs(t, "random chunks", s.keys, want)
		if s.nerrs() != 0 {
			t.Fatalf("round %d: errors %v", i, s.errs)
		}
	}
}

// TestMidStream starts a parser at every offset of the corpus stream. It
// must report exactly the keys of the frames starting at or after that
// offset: nothing from the cut frame, no phantom keys from its bytes.
func TestMidStream(t *testing.T) {
	items := corpus()
	b, starts, _ := stream(items)
	rng := rand.New(rand.NewPCG(3, 4))
	for k := range len(b) {
		var want []rec
		for i, st := range starts {
			if st >= k {
				want = append(want, items[i].keys...)
			}
		}
		s := newSink()
		chunk := whole
		if k%7 == 0 {
			chunk = func() int { return 1 + rng.IntN(64) }
		}
		feed(t, newReqParser(true), b[k:], chunk, s, bound)
		if len(s.keys) != len(want) {
			t.Fatalf("offset %d: got %v\nwant %v", k, s.keys, want)
		}
		sameRecs(t, "mid-stream", s.keys, want)
		// The bytes before the first frame the parser can validate are
		// dropped and counted once (a join at the start of a frame it cannot
		// validate, such as an unknown pcode, drops that frame too).
		if s.nerrs() != s.errs[ReasonResync] || s.errs[ReasonResync] > 1 {
			t.Fatalf("offset %d: errors %v, want at most one resync and nothing else", k, s.errs)
		}
		if k > 0 && !slices.Contains(starts, k) && s.errs[ReasonResync] != 1 && len(b)-k > 3 {
			t.Fatalf("offset %d: joined inside a frame, errors %v, want one resync", k, s.errs)
		}
	}
}

// TestMidStreamMagicInKeys plants whole fake frames inside keys and values.
// Starting anywhere, every key reported must be a key of a real frame: a
// resync candidate must be followed by another magic. (A fake frame that
// ends exactly where its carrier frame ends is indistinguishable from a real
// one; the package doc says so.)
func TestMidStreamMagicInKeys(t *testing.T) {
	fake := w.AppendGet(nil, 1, 1, w.Plain("PHANTOM"))
	var b []byte
	real := map[string]bool{}
	for i := range 20 {
		key := append([]byte("k"), fake...)
		key = append(key, byte(i))
		real[string(key)] = true
		b = w.AppendGet(b, uint32(i), 1, w.Entry{Bytes: key})
		b = w.AppendPut(b, uint32(i), 1, 0, 0, w.Plain("pk"), w.Entry{Bytes: append(bytes.Clone(fake), 'x')})
	}
	for k := range len(b) {
		s := newSink()
		feed(t, newReqParser(true), b[k:], whole, s, bound)
		for _, r := range s.keys {
			if r.Key != "pk" && !real[r.Key] {
				t.Fatalf("offset %d: phantom key %q", k, r.Key)
			}
		}
	}
}

// TestResyncAfterGarbage puts random junk (without the magic) between
// groups of frames and around them: all frames must still be found, and the
// junk counted.
func TestResyncAfterGarbage(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	junk := func() []byte {
		j := make([]byte, 1+rng.IntN(200))
		for i := range j {
			j[i] = byte(rng.UintN(256))
		}
		for bytes.Contains(j, magic) {
			j[bytes.Index(j, magic)] = 0
		}
		return j
	}
	var b []byte
	var want []rec
	for i, it := range corpus() {
		// Junk before every third frame: a resync candidate needs the next
		// frame's magic right after it, so a lone frame between two junk
		// runs would (by design) be dropped.
		if i%3 == 0 {
			b = append(b, junk()...)
		}
		b = append(b, it.frame...)
		want = append(want, it.keys...)
	}
	b = append(b, junk()...)
	for _, chunk := range []func() int{whole, one, func() int { return 1 + rng.IntN(100) }} {
		s := newSink()
		feed(t, newReqParser(false), b, chunk, s, bound)
		sameRecs(t, "after garbage", s.keys, want)
		if s.errs[ReasonBadMagic]+s.errs[ReasonBadLength]+s.errs[ReasonBadPcode] == 0 {
			t.Errorf("garbage not counted: %v", s.errs)
		}
	}
}

// TestLyingLengths corrupts body_len and key counts: the lying frame yields
// nothing, an error is counted, and every following frame is decoded.
func TestLyingLengths(t *testing.T) {
	good := w.AppendGet(nil, 1, 3, w.Plain("k1"), w.Plain("k2"))
	var tail []byte
	var tailWant []rec
	for i := range 200 {
		tail = w.AppendGet(tail, uint32(i), 3, w.Plain("after"))
		tailWant = append(tailWant, read("get", 3, "after", 1, false))
	}
	setLen := func(v int) []byte {
		b := bytes.Clone(good)
		binary.BigEndian.PutUint32(b[12:], uint32(v))
		return b
	}
	n := len(good) - 16
	cases := map[string][]byte{
		"longer by 1":   setLen(n + 1),
		"longer by 500": setLen(n + 500),
		"shorter by 1":  setLen(n - 1),
		"shorter by 40": setLen(n - 40),
		"zero":          setLen(0),
		"negative":      setLen(-5),
		"huge":          setLen(0x7FFFFFFF),
		"above frame":   setLen(DefaultMaxFrame + 1),
		"key_count":     func() []byte { b := bytes.Clone(good); b[22] = 3; return b }(),
		"key_count max": func() []byte { b := bytes.Clone(good); b[19] = 0xFF; return b }(),
		"msize":         func() []byte { b := bytes.Clone(good); b[16+7+36] = 0x7F; return b }(),
		"prefix > n":    func() []byte { b := bytes.Clone(good); b[16+7+36+2] = 0x40; b[16+7+36] = 0x01; return b }(),
		"entry area":    func() []byte { b := bytes.Clone(good); b[16+7+1] = 1; return b }(),
		"merged flag":   func() []byte { b := bytes.Clone(good); b[16+7] = 7; return b }(),
	}
	for name, bad := range cases {
		for _, chunk := range []func() int{whole, one} {
			s := newSink()
			stream := append(bytes.Clone(bad), tail...)
			feed(t, newReqParser(false), stream, chunk, s, bound)
			sameRecs(t, name, s.keys, tailWant)
			if s.nerrs() == 0 {
				t.Errorf("%s: no error counted", name)
			}
		}
	}
}

// TestLargeWriteSkipped checks that a put whose value exceeds MaxFrame is
// reported from its front and skipped without buffering, and that the
// frames after it are decoded.
func TestLargeWriteSkipped(t *testing.T) {
	d := New(Config{MaxFrame: 4096})
	big := w.Entry{Bytes: bytes.Repeat([]byte("v"), 200_000)}
	var b []byte
	b = w.AppendPut(b, 1, 3, 0, 0, w.Mixed("bigp", "s"), big)
	b = w.AppendPrefixPuts(b, 2, 3, w.Plain("pp"), [2]w.Entry{w.Mixed("pp", "a"), big}, [2]w.Entry{w.Mixed("pp", "b"), big})
	b = w.AppendLock(b, 3, 3, w.LockPutAndLck, w.Plain("lk"), &big)
	b = w.AppendRaw(b, 4, 4242, make([]byte, 100_000))
	b = w.AppendGet(b, 5, 3, w.Plain("after"))
	want := []rec{write("put", 3, "bigp", 1, true), write("prefix_puts", 3, "pp", 2, true),
		write("lock", 3, "lk", 1, false), read("get", 3, "after", 1, false)}
	for _, chunk := range []func() int{func() int { return 1460 }, one} {
		s := newSink()
		feed(t, d.NewParser(decode.ToServer, false), b, chunk, s, 4096+16+1460)
		sameRecs(t, "large writes", s.keys, want)
		if s.nerrs() != 0 {
			t.Errorf("errors %v", s.errs)
		}
	}
	// A read above MaxFrame is not a legitimate frame: counted, rescanned.
	var r []byte
	r = w.AppendGet(r, 6, 3, w.Entry{Bytes: bytes.Repeat([]byte("k"), 5000)})
	r = w.AppendGet(r, 7, 3, w.Plain("after"))
	s := newSink()
	feed(t, d.NewParser(decode.ToServer, false), r, func() int { return 1000 }, s, 4096+16+1000)
	sameRecs(t, "large read", s.keys, []rec{read("get", 3, "after", 1, false)})
	if s.errs[ReasonTooLarge] != 1 {
		t.Errorf("errors %v, want one too_large", s.errs)
	}
}

// TestResponses runs a response stream through the ToClient parser: it is
// framed and validated silently; garbage is counted.
func TestResponses(t *testing.T) {
	k, v := w.Plain("user:42"), w.Plain("value")
	var b []byte
	b = w.AppendFeedback(b, w.PcodeRespFeedback, 3, &k)
	b = w.AppendFlowControl(b, 1, 3)
	b = w.AppendRespGet(b, 1, 7, 0, [2]w.Entry{k, v})
	b = w.AppendRespGet(b, 2, 7, 0, [2]w.Entry{k, v}, [2]w.Entry{k, v})
	b = w.AppendRespGet(b, 3, 7, -3998)
	b = w.AppendRespReturn(b, 4, 7, 0, "")
	b = w.AppendRespReturn(b, 5, 7, -1, "error text")
	b = w.AppendRespPrefixGets(b, 6, 7, 0, w.Plain("pk"),
		[]w.SKeyResult{{SKey: w.Plain("a"), Value: v}}, []w.SKeyResult{{SKey: w.Plain("b"), Code: -3998}})
	b = w.AppendRespMReturn(b, 9, 7, -3983, "partial", []w.Entry{k, v}, []int32{0, -3998})
	b = w.AppendRaw(b, 7, w.PcodeRespSimpleGet, []byte("opaque"))
	b = w.AppendRaw(b, 8, 31337, []byte("unknown response"))
	d := New(Config{})
	for _, chunk := range []func() int{whole, one} {
		s := newSink()
		feed(t, d.NewParser(decode.ToClient, false), b, chunk, s, bound)
		if len(s.reqs) != 0 || len(s.keys) != 0 || s.nerrs() != 0 {
			t.Errorf("responses: reqs %v keys %v errs %v", s.reqs, s.keys, s.errs)
		}
	}
	bad := bytes.Clone(b)
	bad[16+4] = 9 // feedback has_key byte... now the body does not add up
	s := newSink()
	feed(t, d.NewParser(decode.ToClient, false), append([]byte("garbage!"), bad...), whole, s, bound)
	if s.nerrs() == 0 {
		t.Errorf("garbage in responses not counted")
	}
}

// TestGap checks that after Gap the parser drops the partial frame it was
// given and picks up at the next frame.
func TestGap(t *testing.T) {
	a := w.AppendGet(nil, 1, 3, w.Plain("lost"))
	b := w.AppendGet(nil, 2, 3, w.Plain("found"))
	p := newReqParser(false)
	s := newSink()
	var f decode.Flow
	if n := p.Parse(a[:20], &f, s); n != 0 {
		t.Fatalf("consumed %d of a partial frame", n)
	}
	p.Gap()
	in := append(bytes.Clone(a[30:]), b...)
	n := p.Parse(in, &f, s)
	if n != len(in) {
		t.Errorf("consumed %d of %d", n, len(in))
	}
	sameRecs(t, "gap", s.keys, []rec{read("get", 3, "found", 1, false)})
}

func TestConfigDefaults(t *testing.T) {
	d := New(Config{MaxBody: 1 << 30, MaxFrame: 1 << 30})
	if d.maxBody != DefaultMaxBody || d.maxFrame != DefaultMaxBody {
		t.Errorf("limits %d %d", d.maxBody, d.maxFrame)
	}
	if d.Proto() != decode.ProtoTair {
		t.Errorf("proto %v", d.Proto())
	}
}

func TestDisplay(t *testing.T) {
	cases := []struct {
		key  []byte
		want string
		ok   bool
	}{
		{w.JavaStr("user:42"), "user:42", true},
		{w.JavaI32(-7), "-7", true},
		{w.JavaI64(1 << 40), "1099511627776", true},
		{w.JavaF64(1.5), "1.5", true},
		{w.JavaEnc(w.JavaBool, []byte{1}), "true", true},
		{w.JavaEnc(w.JavaByteArray, []byte{0xde, 0xad}), "0xdead", true},
		{w.JavaEnc(w.JavaDate, binary.BigEndian.AppendUint64(nil, 0)), "1970-01-01T00:00:00.000Z", true},
		{w.JavaPrime(w.JavaStr("shop1")), "shop1", true},
		{w.JavaMixed(w.JavaStr("shop1"), w.JavaStr("a")).Bytes, "shop1|a", true},
		{w.JavaMixed(w.JavaI32(5), w.JavaI64(6)).Bytes, "5|6", true},
		{[]byte("user:42"), "", false},
		{[]byte{0, 2, 1}, "", false},
		{[]byte{0, 4, 0xff}, "", false},
		{[]byte{0, 4, 'a', '\n'}, "", false},
		{[]byte{0}, "", false},
		{nil, "", false},
		{[]byte{0, 0x18}, "", false},
	}
	for _, c := range cases {
		got, ok := Display(c.key)
		if got != c.want || ok != c.ok {
			t.Errorf("Display(% x) = %q, %v; want %q, %v", c.key, got, ok, c.want, c.ok)
		}
	}
}

// TestNoAllocs checks the steady state allocates nothing per request.
func TestNoAllocs(t *testing.T) {
	var b []byte
	for _, it := range corpus() {
		b = append(b, it.frame...)
	}
	p := newReqParser(false)
	var f decode.Flow
	s := nopSink{}
	if a := testing.AllocsPerRun(100, func() { p.Parse(b, &f, s) }); a != 0 {
		t.Errorf("%v allocs per run", a)
	}
}

type nopSink struct{ decode.Discard }

// responseCorpus is one of each validated response.
func responseCorpus() [][]byte {
	k, v := w.Plain("user:42"), w.Plain("value")
	return [][]byte{
		w.AppendFeedback(nil, w.PcodeRespFeedback, 3, &k),
		w.AppendFeedback(nil, w.PcodeRespFeedbackJava, 3, nil),
		w.AppendFlowControl(nil, 1, 3),
		w.AppendRespGet(nil, 1, 7, 0, [2]w.Entry{k, v}),
		w.AppendRespGet(nil, 2, 7, 0, [2]w.Entry{k, v}, [2]w.Entry{k, v}),
		w.AppendRespReturn(nil, 5, 7, -1, "error text"),
		w.AppendRespPrefixGets(nil, 6, 7, 0, w.Plain("pk"),
			[]w.SKeyResult{{SKey: w.Plain("a"), Value: v}}, []w.SKeyResult{{SKey: w.Plain("b"), Code: -3998}}),
		w.AppendRespMReturn(nil, 9, 7, -3983, "partial", []w.Entry{k, v}, []int32{0, -3998}),
	}
}

// TestTruncatedBodies cuts every frame at every length and patches body_len
// to match, so the header is plausible but the layout inside lies. No key
// may come out, an error must be counted, and the parser must not stall.
func TestTruncatedBodies(t *testing.T) {
	check := func(dir decode.Dir, name string, fr []byte) {
		for c := 16; c < len(fr); c++ {
			b := bytes.Clone(fr[:c])
			binary.BigEndian.PutUint32(b[12:], uint32(c-16))
			s := newSink()
			n := New(Config{}).NewParser(dir, false).Parse(b, &decode.Flow{}, s)
			if len(s.keys) != 0 {
				t.Fatalf("%s cut at %d: keys %v", name, c, s.keys)
			}
			if s.nerrs() == 0 {
				t.Fatalf("%s cut at %d: no error counted", name, c)
			}
			if n > len(b) || n < len(b)-3 {
				t.Fatalf("%s cut at %d: consumed %d of %d", name, c, n, len(b))
			}
		}
	}
	for _, it := range corpus() {
		pc := int32(binary.BigEndian.Uint32(it.frame[8:]))
		if k := requestTable.get(pc).kind; k == kindOpaque || k == kindUnknown {
			continue // no layout to violate
		}
		check(decode.ToServer, it.name, it.frame)
	}
	for i, fr := range responseCorpus() {
		check(decode.ToClient, fmt.Sprintf("response %d", i), fr)
	}
}
