package main

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hotsniff/hotsniff/decode"
	w "github.com/hotsniff/hotsniff/internal/testing/tairwire"
)

// genBytes: two connections in area 4 pipeline batches of a get of one key,
// an mget of three keys (one of them missing) and a prefix_gets of four
// skeys, and the server answers each batch in a shuffled order (Tair pairs
// responses by channel id, not by position), responses cut at the MSS.
// Values have known sizes (item:big 4 000 bytes, item:N 10×(N+1)). The
// reply-bytes truth gives each response frame (16-byte header and body) to
// the request with its channel id, split evenly between the request's read
// lines (an mget's keys; a prefix_gets' one pkey line).
func genBytes(fx *fixture) {
	const ns = 4
	val := func(n int) w.Entry { return w.Plain(strings.Repeat("t", n)) }
	size := func(k string) int {
		if k == "item:big" {
			return 4000
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(k, "item:"))
		return 10 * (n + 1)
	}
	conns := []*conn{fx.conn(1, 44001), fx.conn(2, 44002)}
	for i, c := range conns {
		c.open(time.Duration(i) * time.Millisecond)
	}
	ts := 5 * time.Millisecond
	for i := range 120 {
		c := conns[i%2]
		var reqs []req
		var resps [][]byte
		one := fmt.Sprintf("item:%d", fx.rng.IntN(30))
		if i%4 == 0 {
			one = "item:big"
		}
		r := fx.mget(ns, w.Plain(one))
		reqs = append(reqs, r)
		resps = append(resps, w.AppendRespGet(nil, fx.chid, 1, 0, [2]w.Entry{w.Plain(one), val(size(one))}))
		fx.replyBytes(r, len(resps[len(resps)-1]))

		a, b := fmt.Sprintf("item:%d", fx.rng.IntN(30)), fmt.Sprintf("item:%d", 30+fx.rng.IntN(10))
		m := fx.mget(ns, w.Plain(a), w.Plain("absent"), w.Plain(b))
		reqs = append(reqs, m)
		resps = append(resps, w.AppendRespGet(nil, fx.chid, 1, 0,
			[2]w.Entry{w.Plain(a), val(size(a))}, [2]w.Entry{w.Plain(b), val(size(b))}))
		fx.replyBytes(m, len(resps[len(resps)-1]))

		skeys := fx.skeys(4, 6)
		p := fx.prefixGets(w.PcodePrefixGets, ns, "pfx", skeys...)
		reqs = append(reqs, p)
		var found []w.SKeyResult
		for _, sk := range skeys {
			found = append(found, w.SKeyResult{SKey: w.Plain(sk), Value: val(25)})
		}
		resps = append(resps, w.AppendRespPrefixGets(nil, fx.chid, 1, 0, w.Plain("pfx"), found, nil))
		fx.replyBytes(p, len(resps[len(resps)-1]))

		fx.rng.Shuffle(len(resps), func(i, j int) { resps[i], resps[j] = resps[j], resps[i] })
		ts = c.send(ts, reqs...)
		buf := bytes.Join(resps, nil)
		var cuts []int
		for n := mss; n < len(buf); n += mss {
			cuts = append(cuts, n)
		}
		cuts = append(cuts, len(buf))
		ts = c.segments(ts+200*time.Microsecond, false, buf, cuts)
		ts += 3 * time.Millisecond
	}
	for i, c := range conns {
		c.close(ts + time.Duration(i)*time.Millisecond)
	}
}

// replyBytes adds a response frame of n bytes to the truth of request r.
func (fx *fixture) replyBytes(r req, n int) {
	if fx.bytes == nil {
		fx.bytes = map[line]*[2]uint64{}
	}
	k := uint64(len(r.reads))
	for i, l := range r.reads {
		v := fx.bytes[l]
		if v == nil {
			v = new([2]uint64)
			fx.bytes[l] = v
		}
		share := uint64(n) / k
		if uint64(i) < uint64(n)%k {
			share++
		}
		v[0] += share
		v[1]++
	}
}

// bytesGolden writes the reply-bytes truth in `decode --bytes` form.
func (fx *fixture) bytesGolden() []byte {
	type row struct {
		by, rd  uint64
		ns, key string
	}
	var rows []row
	for l, v := range fx.bytes {
		rows = append(rows, row{v[0], v[1], strconv.Itoa(int(l.ns)), l.key})
	}
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(b.by, a.by), cmp.Compare(b.rd, a.rd),
			strings.Compare(a.ns, b.ns), strings.Compare(a.key, b.key))
	})
	var sb strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&sb, "%d\t%d\ttair\t%s\t%s\n", r.by, r.rd, r.ns, decode.CountKey(r.key))
	}
	return []byte(sb.String())
}
