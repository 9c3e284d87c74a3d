package main

import (
	"fmt"
	"time"

	w "github.com/hotsniff/hotsniff/internal/testing/tairwire"
)

// prefixGets builds a C++-style prefix read (pcode 29 or 34, or 2 / 22 for a
// single key) of pkey pk with the given skeys.
func (fx *fixture) prefixGets(pcode int32, ns uint16, pk string, skeys ...string) req {
	keys := make([]w.Entry, len(skeys))
	for i, sk := range skeys {
		keys[i] = w.Mixed(pk, sk)
	}
	return read(w.AppendGetFamily(nil, fx.nextChid(), pcode, w.GetFamily{Area: ns, Keys: keys}), ns, keys...)
}

// javaPrefixGets builds a Java-client prefix_gets: MixedKey entries of
// String pkey and skeys.
func (fx *fixture) javaPrefixGets(ns uint16, pk string, skeys ...string) req {
	keys := make([]w.Entry, len(skeys))
	for i, sk := range skeys {
		keys[i] = w.JavaMixed(w.JavaStr(pk), w.JavaStr(sk))
	}
	return read(w.AppendPrefixGets(nil, fx.nextChid(), ns, keys...), ns, keys...)
}

func (fx *fixture) mget(ns uint16, keys ...w.Entry) req {
	return read(w.AppendGet(nil, fx.nextChid(), ns, keys...), ns, keys...)
}

func (fx *fixture) skeys(n, of int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("s%d", fx.rng.IntN(of))
	}
	return s
}

func (fx *fixture) shuffle(r []req) {
	fx.rng.Shuffle(len(r), func(i, j int) { r[i], r[j] = r[j], r[i] })
}

// genPrefixHot: prefix_gets-heavy traffic in area 12 over 1.35 s from four
// connections. Pkey "hot:item" is read 8 skeys per request every 3 ms
// (about 2,700 weighted reads/s); 300 other pkeys share about 350 weighted
// reads/s, none above 10/s.
func genPrefixHot(fx *fixture) {
	const ns = 12
	conns := make([]*conn, 4)
	for i := range conns {
		conns[i] = fx.conn(i+1, uint16(40001+i))
		conns[i].open(time.Duration(i) * time.Millisecond)
	}
	ts := 10 * time.Millisecond
	for range 450 {
		c := conns[fx.rng.IntN(len(conns))]
		reqs := []req{fx.prefixGets(w.PcodePrefixGets, ns, "hot:item", fx.skeys(8, 40)...)}
		bg := func() string { return fmt.Sprintf("item:%d", fx.rng.IntN(300)) }
		if fx.rng.Float64() < 0.4 {
			reqs = append(reqs, fx.prefixGets(w.PcodePrefixGets, ns, bg(), fx.skeys(1+fx.rng.IntN(2), 20)...))
		}
		if fx.rng.Float64() < 0.1 {
			reqs = append(reqs, fx.prefixGets(w.PcodeGet, ns, bg(), fx.skeys(1, 20)...))
		}
		if fx.rng.Float64() < 0.05 {
			reqs = append(reqs, fx.prefixGets(w.PcodePrefixGetHiddens, ns, bg(), fx.skeys(2, 20)...))
		}
		if fx.rng.Float64() < 0.05 {
			reqs = append(reqs, fx.javaPrefixGets(ns, bg(), fx.skeys(2, 20)...))
		}
		fx.shuffle(reqs)
		c.send(ts, reqs...)
		ts += 3 * time.Millisecond
	}
	for i, c := range conns {
		c.close(ts + time.Duration(i)*time.Millisecond)
	}
}

// genMGetHot: mget-heavy traffic in area 3 over 1.5 s from three
// connections. Every 1.5 ms an mget names plain key "user:hot" with one or
// two of 400 other keys (about 670 reads/s on the hot key, under 3/s on each
// other); a few gets and puts are mixed in.
func genMGetHot(fx *fixture) {
	const ns = 3
	conns := make([]*conn, 3)
	for i := range conns {
		conns[i] = fx.conn(i+1, uint16(41001+i))
		conns[i].open(time.Duration(i) * time.Millisecond)
	}
	other := func() w.Entry { return w.Plain(fmt.Sprintf("user:%d", fx.rng.IntN(400))) }
	ts := 10 * time.Millisecond
	for range 1000 {
		c := conns[fx.rng.IntN(len(conns))]
		keys := []w.Entry{w.Plain("user:hot"), other()}
		if fx.rng.IntN(2) == 0 {
			keys = append(keys, other())
		}
		fx.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		reqs := []req{fx.mget(ns, keys...)}
		if fx.rng.Float64() < 0.1 {
			reqs = append(reqs, fx.mget(ns, other()))
		}
		if fx.rng.Float64() < 0.03 {
			reqs = append(reqs, writeReq(w.AppendPut(nil, fx.nextChid(), ns, 0, 0, other(), w.Plain("v"))))
		}
		c.send(ts, reqs...)
		ts += 1500 * time.Microsecond
	}
	for i, c := range conns {
		c.close(ts + time.Duration(i)*time.Millisecond)
	}
}

// genMixed: every request kind the decoder knows, C++ and Java key styles,
// with the server's responses, flow-control and hot-key feedback pushes, and
// a feedback frame sent towards the server.
func genMixed(fx *fixture) {
	conns := make([]*conn, 3)
	for i := range conns {
		conns[i] = fx.conn(i+1, uint16(42001+i))
		conns[i].open(time.Duration(i) * time.Millisecond)
	}
	val := w.Plain("value-bytes")
	jv := w.JavaKey(w.JavaStr("java value"))
	kinds := []func(ns uint16) (req, []byte){
		func(ns uint16) (req, []byte) { // get
			k := w.Plain(fmt.Sprintf("k%d", fx.rng.IntN(30)))
			return fx.mget(ns, k), w.AppendRespGet(nil, fx.chid, 9, 0, [2]w.Entry{k, val})
		},
		func(ns uint16) (req, []byte) { // Java get of String, Integer and Long keys
			keys := []w.Entry{w.JavaKey(w.JavaStr(fmt.Sprintf("jk%d", fx.rng.IntN(10)))),
				w.JavaKey(w.JavaI32(int32(fx.rng.IntN(5)))), w.JavaKey(w.JavaI64(int64(fx.rng.IntN(5))))}
			return fx.mget(ns, keys[:1+fx.rng.IntN(3)]...), w.AppendRespGet(nil, fx.chid, 9, -3998)
		},
		func(ns uint16) (req, []byte) { // mget with a miss
			return fx.mget(ns, w.Plain("m1"), w.Plain("m2"), w.Plain(fmt.Sprintf("m%d", 3+fx.rng.IntN(5)))),
				w.AppendRespGet(nil, fx.chid, 9, 0, [2]w.Entry{w.Plain("m1"), val}, [2]w.Entry{w.Plain("m2"), val})
		},
		func(ns uint16) (req, []byte) { // get_hidden
			k := w.Plain(fmt.Sprintf("hid%d", fx.rng.IntN(5)))
			r := read(w.AppendGetFamily(nil, fx.nextChid(), w.PcodeGetHidden, w.GetFamily{Area: ns, Keys: []w.Entry{k}}), ns, k)
			return r, w.AppendRespGet(nil, fx.chid, 9, -3969)
		},
		func(ns uint16) (req, []byte) { // prefix_get (pcode 2), prefix_get_hidden (22)
			pc := []int32{w.PcodeGet, w.PcodeGetHidden}[fx.rng.IntN(2)]
			return fx.prefixGets(pc, ns, fmt.Sprintf("pk%d", fx.rng.IntN(8)), fx.skeys(1, 9)...), w.AppendRespGet(nil, fx.chid, 9, -3998)
		},
		func(ns uint16) (req, []byte) { // prefix_gets, C++
			pk := fmt.Sprintf("pk%d", fx.rng.IntN(8))
			r := fx.prefixGets(w.PcodePrefixGets, ns, pk, fx.skeys(1+fx.rng.IntN(6), 9)...)
			return r, w.AppendRespPrefixGets(nil, fx.chid, 9, 0, w.Plain(pk),
				[]w.SKeyResult{{SKey: w.Plain("s1"), Value: val}}, []w.SKeyResult{{SKey: w.Plain("s2"), Code: -3998}})
		},
		func(ns uint16) (req, []byte) { // prefix_gets, Java (mprefix_gets sends one per pkey)
			return fx.javaPrefixGets(ns, fmt.Sprintf("shop%d", fx.rng.IntN(4)), fx.skeys(1+fx.rng.IntN(4), 9)...), w.AppendRespReturn(nil, fx.chid, 9, -3998, "")
		},
		func(ns uint16) (req, []byte) { // prefix_get_hiddens
			return fx.prefixGets(w.PcodePrefixGetHiddens, ns, fmt.Sprintf("ph%d", fx.rng.IntN(4)), fx.skeys(2, 9)...), w.AppendRespReturn(nil, fx.chid, 9, 0, "")
		},
		func(ns uint16) (req, []byte) { // simple prefix gets (36), Java primes
			pk := fmt.Sprintf("shop%d", fx.rng.IntN(4))
			subs := [][]byte{w.JavaStr("a"), w.JavaStr("b"), w.JavaStr("c")}[:1+fx.rng.IntN(3)]
			prime := w.JavaPrime(w.JavaStr(pk))
			r := req{b: w.AppendSimpleGet(nil, fx.nextChid(), ns, fx.rng.Uint64(), w.SimpleGroup{Prime: prime, Subs: subs}),
				reads: []line{{ns, string(prime)}}, w: []uint64{uint64(len(subs))}}
			return r, w.AppendRaw(nil, fx.chid, w.PcodeRespSimpleGet, []byte{0, 0, 0, 9, 0, 0, 0, 0})
		},
		func(ns uint16) (req, []byte) { // get_range, read or delete
			pk := fmt.Sprintf("rng%d", fx.rng.IntN(3))
			cmd := []uint16{w.RangeAll, w.RangeAll, w.RangeDel}[fx.rng.IntN(3)]
			b := w.AppendGetRange(nil, fx.nextChid(), cmd, ns, 0, 50, w.Mixed(pk, "a"), w.Mixed(pk, "z"))
			r := writeReq(b)
			if cmd == w.RangeAll {
				r = req{b: b, reads: []line{{ns, pk}}, w: []uint64{1}}
			}
			return r, w.AppendRaw(nil, fx.chid, w.PcodeRespGetRange, []byte{0, 0, 0, 9, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
		},
		func(ns uint16) (req, []byte) { // Java get-with-expire (1600)
			k := w.JavaKey(w.JavaStr(fmt.Sprintf("ttl%d", fx.rng.IntN(3))))
			return read(w.AppendGetExpire(nil, fx.nextChid(), w.PcodeGetExpire, ns, 60, k), ns, k), w.AppendRespGet(nil, fx.chid, 9, -3998)
		},
		func(ns uint16) (req, []byte) { // lock status is a read of its key
			k := w.Plain(fmt.Sprintf("lock%d", fx.rng.IntN(3)))
			return read(w.AppendLock(nil, fx.nextChid(), ns, w.LockStatus, k, nil), ns, k), w.AppendRespReturn(nil, fx.chid, 9, 0, "")
		},
		// Writes: recognised and reported as writes, never counted here.
		func(ns uint16) (req, []byte) {
			return writeReq(w.AppendPut(nil, fx.nextChid(), ns, 0, 0, w.Plain(fmt.Sprintf("k%d", fx.rng.IntN(30))), val)), w.AppendRespReturn(nil, fx.chid, 9, 0, "")
		},
		func(ns uint16) (req, []byte) {
			return writeReq(w.AppendPut(nil, fx.nextChid(), ns, 0, 0, w.JavaMixed(w.JavaStr("shop1"), w.JavaStr("a")), jv)), w.AppendRespReturn(nil, fx.chid, 9, 0, "")
		},
		func(ns uint16) (req, []byte) {
			return writeReq(w.AppendGetFamily(nil, fx.nextChid(), w.PcodeRemove, w.GetFamily{Area: ns, Keys: []w.Entry{w.Plain("k1"), w.Plain("k2")}})),
				w.AppendRespReturn(nil, fx.chid, 9, 0, "")
		},
		func(ns uint16) (req, []byte) {
			return writeReq(w.AppendGetFamily(nil, fx.nextChid(), w.PcodeInvalid, w.GetFamily{Area: ns, Keys: []w.Entry{w.Plain("k3")}, Group: "group_1"})),
				w.AppendRespReturn(nil, fx.chid, 9, 0, "")
		},
		func(ns uint16) (req, []byte) {
			return writeReq(w.AppendPrefixPuts(nil, fx.nextChid(), ns, w.Plain("pk1"), [2]w.Entry{w.Mixed("pk1", "s1"), val}, [2]w.Entry{w.Mixed("pk1", "s2"), val})),
				w.AppendRespReturn(nil, fx.chid, 9, 0, "")
		},
		func(ns uint16) (req, []byte) {
			pc := []int32{w.PcodePrefixRemoves, w.PcodePrefixHides, w.PcodeHide}[fx.rng.IntN(3)]
			return writeReq(w.AppendGetFamily(nil, fx.nextChid(), pc, w.GetFamily{Area: ns, Keys: []w.Entry{w.Mixed("pk2", "s1")}})),
				w.AppendRespReturn(nil, fx.chid, 9, 0, "")
		},
		func(ns uint16) (req, []byte) {
			return writeReq(w.AppendIncDec(nil, fx.nextChid(), ns, 1, 0, 0, w.Plain("counter"))), w.AppendRaw(nil, fx.chid, 105, []byte{0, 0, 0, 9, 0, 0, 0, 1})
		},
		func(ns uint16) (req, []byte) {
			return writeReq(w.AppendLock(nil, fx.nextChid(), ns, w.LockLock, w.Plain("lock1"), nil)), w.AppendRespReturn(nil, fx.chid, 9, 0, "")
		},
		func(ns uint16) (req, []byte) {
			return writeReq(w.AppendKeyed(nil, fx.nextChid(), w.PcodeExpire, ns, 30, w.Plain("k5"))), w.AppendRespReturn(nil, fx.chid, 9, 0, "")
		},
		// Traffic without keys: admin, an unknown pcode, and a feedback
		// frame towards the server (spec §8.1: seen in either direction).
		func(ns uint16) (req, []byte) {
			return writeReq(w.AppendRaw(nil, fx.nextChid(), w.PcodePing, []byte{0, 0, 0, 9, 0, 0, 0, 0})), w.AppendRespReturn(nil, fx.chid, 9, 0, "")
		},
		func(ns uint16) (req, []byte) {
			return writeReq(w.AppendRaw(nil, fx.nextChid(), 4711, []byte("opaque future request"))), w.AppendRespReturn(nil, fx.chid, 9, -4001, "not supported")
		},
		func(ns uint16) (req, []byte) {
			return writeReq(w.AppendFeedback(nil, w.PcodeRespFeedbackJava, ns, nil)), nil
		},
	}
	ts := 10 * time.Millisecond
	for i := range 240 {
		c := conns[fx.rng.IntN(len(conns))]
		ns := []uint16{0, 3, 7, 12}[fx.rng.IntN(4)]
		var reqs []req
		var resps [][]byte
		for range 1 + fx.rng.IntN(3) {
			r, resp := kinds[(i+fx.rng.IntN(3))%len(kinds)](ns)
			reqs = append(reqs, r)
			if fx.rng.Float64() < 0.1 {
				k := w.Plain("k1")
				resps = append(resps, w.AppendFeedback(nil, []int32{w.PcodeRespFeedback, w.PcodeRespFeedbackJava}[fx.rng.IntN(2)], ns, &k))
			}
			if fx.rng.Float64() < 0.05 {
				resps = append(resps, w.AppendFlowControl(nil, 1, uint32(ns)))
			}
			if resp != nil {
				resps = append(resps, resp)
			}
		}
		ts = c.send(ts, reqs...)
		ts = c.reply(ts+200*time.Microsecond, resps...)
		ts += 4 * time.Millisecond
	}
	for i, c := range conns {
		c.close(ts + time.Duration(i)*time.Millisecond)
	}
}

// genMidStream: one connection seen from its handshake and one joined
// mid-stream (no SYN; the capture starts inside a request and inside a
// response). Only requests whose first byte was captured are counted.
func genMidStream(fx *fixture) {
	const ns = 5
	a := fx.conn(1, 43001)
	a.open(0)
	b := fx.conn(2, 43002)
	b.chide, b.shide = 1234, 321
	ts := 5 * time.Millisecond
	for i := range 150 {
		c := []*conn{a, b}[i%2]
		var reqs []req
		var resps [][]byte
		for range 1 + fx.rng.IntN(3) {
			switch fx.rng.IntN(3) {
			case 0:
				k := w.Plain(fmt.Sprintf("mid:%d", fx.rng.IntN(20)))
				reqs = append(reqs, fx.mget(ns, k, w.Plain("mid:shared")))
				resps = append(resps, w.AppendRespGet(nil, fx.chid, 3, 0, [2]w.Entry{k, w.Plain("v")}))
			case 1:
				reqs = append(reqs, fx.prefixGets(w.PcodePrefixGets, ns, "midp", fx.skeys(3, 9)...))
				resps = append(resps, w.AppendRespReturn(nil, fx.chid, 3, -3998, ""))
			default:
				reqs = append(reqs, writeReq(w.AppendPut(nil, fx.nextChid(), ns, 0, 0, w.Plain("mid:shared"), w.Plain("value"))))
				resps = append(resps, w.AppendRespReturn(nil, fx.chid, 3, 0, ""))
			}
		}
		ts = c.send(ts, reqs...)
		ts = c.reply(ts+100*time.Microsecond, resps...)
		ts += 2 * time.Millisecond
	}
	a.close(ts)
	b.close(ts + time.Millisecond)
}
