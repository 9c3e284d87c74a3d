package main

import (
	"bufio"
	"sort"
	"strconv"

	"github.com/hotsniff/hotsniff/decode"
)

// bytesSink sums, per (proto, ns, key) over reads, the reply bytes
// attributed to the key and its occurrences in requests, for --bytes.
type bytesSink struct {
	decode.Discard                                   // only keys (and reply bytes) matter here
	byNS           map[bytesNS]map[string]*[2]uint64 // [bytes, reads]
}

// bytesNS is a protocol and namespace.
type bytesNS struct {
	proto decode.Proto
	ns    int32
}

func newBytesSink() *bytesSink { return &bytesSink{byNS: map[bytesNS]map[string]*[2]uint64{}} }

func (c *bytesSink) slot(p decode.Proto, ns int32, k []byte) *[2]uint64 {
	nk := bytesNS{p, ns}
	m := c.byNS[nk]
	if m == nil {
		m = map[string]*[2]uint64{}
		c.byNS[nk] = m
	}
	v := m[string(k)]
	if v == nil {
		v = new([2]uint64)
		m[string(k)] = v
	}
	return v
}

func (c *bytesSink) Key(f *decode.Flow, r *decode.Request, k decode.Key) {
	if !r.Write {
		c.slot(f.Proto, r.NS, k.Bytes)[1]++
	}
}

func (c *bytesSink) ReplyKey(f *decode.Flow, ns int32, k decode.Key, n uint64) {
	c.slot(f.Proto, ns, k.Bytes)[0] += n
}

func (c *bytesSink) write(w *bufio.Writer) {
	type row struct {
		proto, ns, key string
		bytes, reads   uint64
	}
	var rows []row
	for nk, m := range c.byNS {
		p, ns := nk.proto.String(), decode.NSString(nk.ns)
		for k, v := range m {
			rows = append(rows, row{p, ns, k, v[0], v[1]})
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		a, b := &rows[i], &rows[j]
		switch {
		case a.bytes != b.bytes:
			return a.bytes > b.bytes
		case a.reads != b.reads:
			return a.reads > b.reads
		case a.proto != b.proto:
			return a.proto < b.proto
		case a.ns != b.ns:
			return a.ns < b.ns
		}
		return a.key < b.key
	})
	for _, r := range rows {
		w.WriteString(strconv.FormatUint(r.bytes, 10))
		w.WriteByte('\t')
		w.WriteString(strconv.FormatUint(r.reads, 10))
		w.WriteByte('\t')
		w.WriteString(r.proto)
		w.WriteByte('\t')
		w.WriteString(r.ns)
		w.WriteByte('\t')
		w.WriteString(decode.CountKey(r.key))
		w.WriteByte('\n')
	}
}
