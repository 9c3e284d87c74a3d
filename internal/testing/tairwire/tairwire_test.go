package tairwire

import (
	"bytes"
	"testing"
)

func TestWorkedExamples(t *testing.T) {
	shop := JavaStr("shop1")
	cases := []struct {
		name string
		dump string
		got  []byte
	}{
		{"10.1 get", Ex101Get, AppendGet(nil, 0x65, 3, Plain("user:42"))},
		{"10.2 mget", Ex102MGet, AppendGet(nil, 0x66, 3, Plain("k1"), Plain("k2"))},
		{"10.3 prefix_gets", Ex103PrefixGets, AppendPrefixGets(nil, 0x2A, 7,
			JavaMixed(shop, JavaStr("a")), JavaMixed(shop, JavaStr("b")))},
		{"10.4 simple get", Ex104SimpleGet, AppendSimpleGet(nil, 0x2B, 7, 0,
			SimpleGroup{Prime: JavaPrime(shop), Subs: [][]byte{JavaStr("a"), JavaStr("b")}})},
		{"10.5 feedback", Ex105Feedback, AppendFeedback(nil, PcodeRespFeedback, 3, nil)},
	}
	for _, c := range cases {
		want := mustDump(t, c.dump)
		if !bytes.Equal(c.got, want) {
			t.Errorf("%s:\n got %x\nwant %x", c.name, c.got, want)
		}
	}
}

// TestJavaGet checks the Java variant of §10.1: key 00 04 "user:42",
// msize 9, body_len 0x38.
func TestJavaGet(t *testing.T) {
	got := AppendGet(nil, 0x65, 3, JavaKey(JavaStr("user:42")))
	want := mustDump(t, Ex101Get)
	want[15] = 0x38
	want = append(want[:0x3b:0x3b], append([]byte{0, 0, 0, 9, 0, 4}, "user:42"...)...)
	if !bytes.Equal(got, want) {
		t.Errorf("\n got %x\nwant %x", got, want)
	}
}

func TestEntryPrefixAndMerged(t *testing.T) {
	e := AppendEntry(nil, Mixed("pk", "sk"))
	if len(e) != 44 {
		t.Fatalf("len %d", len(e))
	}
	// meta.prefixsize at meta offset 8 (entry offset 7+8) holds P for the C++ client.
	if e[15+3] != 2 {
		t.Errorf("meta prefixsize not set: % x", e[7:36])
	}
	if ms := e[36:40]; !bytes.Equal(ms, []byte{0x00, 0x80, 0x00, 0x04}) {
		t.Errorf("msize % x", ms)
	}
	m := AppendEntry(nil, Entry{Bytes: []byte("k"), Merged: true, MergedArea: 0x0102})
	if m[0] != 1 || !bytes.Equal(m[36:], []byte{0, 0, 0, 3, 0x02, 0x01, 'k'}) {
		t.Errorf("merged entry % x", m)
	}
}

func TestFinishFrameLength(t *testing.T) {
	b := AppendRaw([]byte("junk"), 7, 4242, []byte("hello"))
	if got := b[4+12 : 4+16]; !bytes.Equal(got, []byte{0, 0, 0, 5}) {
		t.Errorf("body_len % x", got)
	}
}

func mustDump(t testing.TB, s string) []byte {
	t.Helper()
	b, err := ParseDump(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
