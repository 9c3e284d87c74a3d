package tair

import (
	"github.com/hotsniff/hotsniff/decode"
	w "github.com/hotsniff/hotsniff/internal/testing/tairwire"
)

// item is one encoded request with what the decoder must report for it,
// written from the spec's rules, not from the decoder.
type item struct {
	name  string
	frame []byte
	op    string // "" when the frame reports no request
	keys  []rec
}

func read(op string, ns int32, key string, weight uint32, prefix bool) rec {
	return rec{Op: op, NS: ns, Key: key, Weight: weight, Prefix: prefix}
}

func write(op string, ns int32, key string, weight uint32, prefix bool) rec {
	return rec{Op: op, NS: ns, Write: true, Key: key, Weight: weight, Prefix: prefix}
}

// corpus covers every read pcode, the writes, admin, unknown and feedback
// frames, in C++ and Java key styles.
func corpus() []item {
	js := w.JavaStr
	jshop := js("shop1")
	jpk := string(w.JavaPrime(jshop)) // 00 18 00 04 "shop1": the pkey region
	mixed := func(pk string, sks ...string) []w.Entry {
		var es []w.Entry
		for _, sk := range sks {
			es = append(es, w.Mixed(pk, sk))
		}
		return es
	}
	gf := func(pcode int32, g w.GetFamily) []byte { return w.AppendGetFamily(nil, 77, pcode, g) }
	val := w.Plain("some value")
	bigMixed := w.Mixed("cart:9", "line:1")

	return []item{
		{"get", w.AppendGet(nil, 1, 3, w.Plain("user:42")), "get",
			[]rec{read("get", 3, "user:42", 1, false)}},
		{"get java", w.AppendGet(nil, 2, 3, w.JavaKey(js("user:42"))), "get",
			[]rec{read("get", 3, "\x00\x04user:42", 1, false)}},
		{"get java int", w.AppendGet(nil, 2, 4, w.JavaKey(w.JavaI32(42))), "get",
			[]rec{read("get", 4, "\x00\x02\x00\x00\x00\x2a", 1, false)}},
		{"mget", w.AppendGet(nil, 3, 3, w.Plain("k1"), w.Plain("k2"), w.Plain("k1")), "mget",
			[]rec{read("mget", 3, "k1", 1, false), read("mget", 3, "k2", 1, false), read("mget", 3, "k1", 1, false)}},
		{"get empty", w.AppendGet(nil, 4, 3), "get", nil},
		{"prefix_get", w.AppendGet(nil, 5, 12, w.Mixed("p1", "s1")), "prefix_get",
			[]rec{read("prefix_get", 12, "p1", 1, true)}},
		{"get_hidden", w.AppendGetFamily(nil, 6, w.PcodeGetHidden, w.GetFamily{Area: 5, Keys: []w.Entry{w.Plain("h")}}), "get_hidden",
			[]rec{read("get_hidden", 5, "h", 1, false)}},
		{"prefix_get_hidden c++", gf(w.PcodeGetHidden, w.GetFamily{Area: 5, Keys: mixed("ph", "x")}), "prefix_get_hidden",
			[]rec{read("prefix_get_hidden", 5, "ph", 1, true)}},
		{"prefix_gets c++", w.AppendPrefixGets(nil, 7, 12, mixed("hot", "a", "b", "c", "d", "e")...), "prefix_gets",
			[]rec{read("prefix_gets", 12, "hot", 5, true)}},
		{"prefix_gets java", w.AppendPrefixGets(nil, 8, 7, w.JavaMixed(jshop, js("a")), w.JavaMixed(jshop, js("b"))), "prefix_gets",
			[]rec{read("prefix_gets", 7, jpk, 2, true)}},
		{"prefix_get_hiddens", gf(w.PcodePrefixGetHiddens, w.GetFamily{Area: 7, Keys: mixed("pgh", "1", "2", "3")}), "prefix_get_hiddens",
			[]rec{read("prefix_get_hiddens", 7, "pgh", 3, true)}},
		{"mget mixed runs", w.AppendGet(nil, 9, 2, w.Mixed("A", "a"), w.Mixed("A", "b"), w.Mixed("B", "c"), w.Plain("plain"), w.Mixed("A", "d")), "mget",
			[]rec{read("mget", 2, "A", 2, true), read("mget", 2, "B", 1, true), read("mget", 2, "plain", 1, false), read("mget", 2, "A", 1, true)}},
		{"mget merged", gf(w.PcodeGet, w.GetFamily{ServerFlag: 1, Area: 9, Keys: []w.Entry{
			{Bytes: []byte("mk"), Merged: true, MergedArea: 9},
			{Bytes: []byte("mpkmsk"), Prefix: 3, Merged: true, MergedArea: 9}}}), "mget",
			[]rec{read("mget", 9, "mk", 1, false), read("mget", 9, "mpk", 1, true)}},
		{"simple get", w.AppendSimpleGet(nil, 10, 7, 0xdeadbeef,
			w.SimpleGroup{Prime: []byte("sp"), Subs: [][]byte{[]byte("a"), []byte("b"), []byte("c")}},
			w.SimpleGroup{Prime: []byte("none")},
			w.SimpleGroup{Prime: w.JavaPrime(jshop), Subs: [][]byte{js("x")}}), "simple_prefix_gets",
			[]rec{read("simple_prefix_gets", 7, "sp", 3, true), read("simple_prefix_gets", 7, jpk, 1, true)}},
		{"get_range", w.AppendGetRange(nil, 11, w.RangeAll, 6, 0, 100, w.Mixed("rng", "a"), w.Mixed("rng", "z")), "get_range",
			[]rec{read("get_range", 6, "rng", 1, true)}},
		{"del_range", w.AppendGetRange(nil, 12, w.RangeDel, 6, 0, 100, w.Mixed("rng", "a"), w.Mixed("rng", "z")), "del_range",
			[]rec{write("del_range", 6, "rng", 1, true)}},
		{"get_expire", w.AppendGetExpire(nil, 13, w.PcodeGetExpire, 8, 60, w.Plain("e1"), w.Plain("e2")), "get_expire",
			[]rec{read("get_expire", 8, "e1", 1, false), read("get_expire", 8, "e2", 1, false)}},
		{"get_modify_date", w.AppendGetExpire(nil, 13, w.PcodeGetModifyDate, 8, 0, w.Plain("md")), "get_modify_date",
			[]rec{read("get_modify_date", 8, "md", 1, false)}},

		{"put", w.AppendPut(nil, 20, 3, 0, 0, w.Plain("user:42"), val), "put",
			[]rec{write("put", 3, "user:42", 1, false)}},
		{"put mixed", w.AppendPut(nil, 21, 3, 1, 60, bigMixed, val), "put",
			[]rec{write("put", 3, "cart:9", 1, true)}},
		{"remove", gf(w.PcodeRemove, w.GetFamily{Area: 3, Keys: []w.Entry{w.Plain("r1"), w.Plain("r2")}}), "remove",
			[]rec{write("remove", 3, "r1", 1, false), write("remove", 3, "r2", 1, false)}},
		{"hide", gf(w.PcodeHide, w.GetFamily{Area: 3, Keys: []w.Entry{w.Plain("hd")}}), "hide",
			[]rec{write("hide", 3, "hd", 1, false)}},
		{"hide_by_proxy", gf(w.PcodeHideByProxy, w.GetFamily{Area: 3, Keys: []w.Entry{w.Plain("hp")}, Group: "group_1", IsSync: 1}), "hide_by_proxy",
			[]rec{write("hide_by_proxy", 3, "hp", 1, false)}},
		{"invalidate", gf(w.PcodeInvalid, w.GetFamily{Area: 3, Keys: []w.Entry{w.Plain("iv")}, Group: "group_1"}), "invalidate",
			[]rec{write("invalidate", 3, "iv", 1, false)}},
		{"invalidate no group", gf(w.PcodeInvalid, w.GetFamily{Area: 3, Keys: []w.Entry{w.Plain("iv2")}}), "invalidate",
			[]rec{write("invalidate", 3, "iv2", 1, false)}},
		{"prefix_puts", w.AppendPrefixPuts(nil, 22, 12, w.Plain("hot"), [2]w.Entry{w.Mixed("hot", "a"), val}, [2]w.Entry{w.Mixed("hot", "b"), val}), "prefix_puts",
			[]rec{write("prefix_puts", 12, "hot", 2, true)}},
		{"prefix_removes", gf(w.PcodePrefixRemoves, w.GetFamily{Area: 12, Keys: mixed("hot", "a", "b")}), "prefix_removes",
			[]rec{write("prefix_removes", 12, "hot", 2, true)}},
		{"prefix_removes dup", gf(w.PcodePrefixRemoves, w.GetFamily{ServerFlag: 1, Area: 12, Keys: mixed("hot", "a"), PacketID: 99}), "prefix_removes",
			[]rec{write("prefix_removes", 12, "hot", 1, true)}},
		{"prefix_hides", gf(w.PcodePrefixHides, w.GetFamily{Area: 12, Keys: mixed("ph", "a")}), "prefix_hides",
			[]rec{write("prefix_hides", 12, "ph", 1, true)}},
		{"prefix_invalids", gf(w.PcodePrefixInvalids, w.GetFamily{Area: 12, Keys: mixed("pi", "a", "b"), Group: "g"}), "prefix_invalids",
			[]rec{write("prefix_invalids", 12, "pi", 2, true)}},
		{"prefix_hides_by_proxy", gf(w.PcodePrefixHidesByProxy, w.GetFamily{Area: 12, Keys: mixed("pp", "a"), Group: "g"}), "prefix_hides_by_proxy",
			[]rec{write("prefix_hides_by_proxy", 12, "pp", 1, true)}},
		{"incdec", w.AppendIncDec(nil, 23, 4, 1, 0, 0, w.Plain("ctr")), "incdec",
			[]rec{write("incdec", 4, "ctr", 1, false)}},
		{"lock", w.AppendLock(nil, 24, 4, w.LockLock, w.Plain("lk"), nil), "lock",
			[]rec{write("lock", 4, "lk", 1, false)}},
		{"lock status", w.AppendLock(nil, 25, 4, w.LockStatus, w.Plain("lk"), nil), "lock_status",
			[]rec{read("lock_status", 4, "lk", 1, false)}},
		{"put and lock", w.AppendLock(nil, 26, 4, w.LockPutAndLck, w.Plain("pl"), &val), "lock",
			[]rec{write("lock", 4, "pl", 1, false)}},
		{"expire", w.AppendKeyed(nil, 27, w.PcodeExpire, 4, 30, w.Plain("ex")), "expire",
			[]rec{write("expire", 4, "ex", 1, false)}},
		{"uniq_remove", w.AppendKeyed(nil, 28, w.PcodeUniqRemove, 4, 17, w.Plain("ur")), "uniq_remove",
			[]rec{write("uniq_remove", 4, "ur", 1, false)}},

		{"ping", w.AppendRaw(nil, 30, w.PcodePing, []byte{0, 0, 0, 1, 0, 0, 0, 0}), "ping", nil},
		{"get_group", w.AppendRaw(nil, 31, w.PcodeGetGroup, []byte{0, 0, 0, 1, 0, 0, 0, 2, 'g', 0}), "get_group", nil},
		{"prefix_incdec", w.AppendRaw(nil, 32, w.PcodePrefixIncDec, []byte("opaque body")), "prefix_incdec", nil},
		{"unknown", w.AppendRaw(nil, 33, 4242, []byte("who knows")), opUnknown, nil},
		{"feedback", w.AppendFeedback(nil, w.PcodeRespFeedback, 3, &bigMixed), "", nil},
		{"feedback java", w.AppendFeedback(nil, w.PcodeRespFeedbackJava, 3, nil), "", nil},
	}
}

// stream concatenates the corpus and returns each frame's start offset.
func stream(items []item) (b []byte, starts []int, want []rec) {
	for _, it := range items {
		starts = append(starts, len(b))
		b = append(b, it.frame...)
		want = append(want, it.keys...)
	}
	return b, starts, want
}

func newReqParser(mid bool) decode.Parser {
	return New(Config{}).NewParser(decode.ToServer, mid)
}
