package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"

	"github.com/hotsniff/hotsniff/decode"
)

// countSink sums read key occurrences per (proto, ns, key) for --count. A
// capture can hold tens of millions of distinct keys, so it keeps them
// compactly instead of in a Go map of strings (which cost ~340 bytes a
// key): each distinct key is one record in an arena of chunks, one 24-byte
// entry (record offset, count, weight) in blocks of entries, and one 8-byte
// slot (entry index, 32 bits of hash) in an open-addressing index kept at most 3/4
// full. Counting a key already seen allocates nothing.
type countSink struct {
	decode.Discard // only keys (and reply bytes) matter here
	// maxBytes bounds the memory of the table (records, entries, index);
	// held is what it holds. Once full, keys not seen yet are not added:
	// their reads are counted in missed and missedWeight only, and the
	// keys already in the table go on being counted exactly.
	maxBytes     int
	held         int
	missed       uint64
	missedWeight uint64

	seed    maphash.Seed
	slots   []countSlot // power-of-two length; entry+1, 0 = empty
	used    int
	entries [][]countEntry // blocks of entryBlock
	n       int            // entries in use
	arena   [][]byte       // chunks of arenaChunk (or one larger key)
	scratch []byte
}

type countSlot struct {
	entry uint32 // index+1 into entries; 0: empty
	// hash is the low 32 bits of the record's hash: the slot's home is
	// hash & mask, so growing the index never rehashes a record, and a probe
	// touches an entry only when all 32 bits match.
	hash uint32
}

type countEntry struct {
	rec    uint64 // chunk<<32 | offset of the record in the arena
	count  uint64
	weight uint64
}

const (
	entryBits  = 16
	entryBlock = 1 << entryBits
	arenaChunk = 1 << 20
)

// A record is: proto name rank (1 byte), ns string length (1 byte), the ns
// string, the key length (uvarint), the key. Storing the printed forms lets
// the final sort compare records byte by byte, in the output's order.

// DefaultCountMaxBytes is the default --count-max-bytes.
const DefaultCountMaxBytes = 512 << 20

// entryCost is what one distinct key costs besides its record: its entry
// and its share of the index (kept at most 3/4 full, doubled when full).
const entryCost = 24 + 8*8/3

func newCountSink(maxBytes int) *countSink {
	return &countSink{maxBytes: maxBytes, seed: maphash.MakeSeed(), slots: make([]countSlot, 1024), scratch: make([]byte, 0, 64)}
}

// full reports whether a new record of need bytes would take the table
// over its bound.
func (c *countSink) full(need int) bool {
	return c.maxBytes > 0 && c.held+need+entryCost > c.maxBytes
}

// note says, in one line, what the bound left out; "" when nothing.
func (c *countSink) note() string {
	if c.missed == 0 {
		return ""
	}
	return fmt.Sprintf("decode --count: the key table reached --count-max-bytes (%d bytes, %d distinct keys); %d reads (weight %d) of keys first seen after that are not in the counts: raise --count-max-bytes or decode fewer files at once",
		c.maxBytes, c.n, c.missed, c.missedWeight)
}

// protoRank orders protocols by name, as the output sorts them.
func protoRank(p decode.Proto) byte {
	switch p {
	case decode.ProtoMemcache:
		return 0
	case decode.ProtoRedis:
		return 1
	case decode.ProtoTair:
		return 2
	}
	return 3
}

var rankProto = [4]decode.Proto{decode.ProtoMemcache, decode.ProtoRedis, decode.ProtoTair, decode.ProtoUnknown}

func (c *countSink) Key(f *decode.Flow, r *decode.Request, k decode.Key) {
	if r.Write {
		return
	}
	// The record's head (proto, ns) is built in scratch; the key is
	// compared and hashed in place.
	h := c.scratch[:0]
	h = append(h, protoRank(f.Proto), 0)
	h = append(h, decode.NSString(r.NS)...)
	h[1] = byte(len(h) - 2)
	c.scratch = h
	var mh maphash.Hash
	mh.SetSeed(c.seed)
	mh.Write(h)
	mh.Write(k.Bytes)
	hash := uint32(mh.Sum64())
	mask := uint64(len(c.slots) - 1)
	for i := uint64(hash) & mask; ; i = (i + 1) & mask {
		s := &c.slots[i]
		if s.entry == 0 {
			if c.full(len(h) + binary.MaxVarintLen64 + len(k.Bytes)) {
				c.missed++
				c.missedWeight += uint64(k.Weight)
				return
			}
			e := c.add(h, k.Bytes)
			e.count, e.weight = 1, uint64(k.Weight)
			*s = countSlot{entry: uint32(c.n), hash: hash}
			if c.used++; c.used*4 > len(c.slots)*3 {
				c.grow()
			}
			return
		}
		if s.hash != hash {
			continue
		}
		e := c.entry(s.entry - 1)
		if hd, key := c.record(e.rec); bytes.Equal(hd, h) && bytes.Equal(key, k.Bytes) {
			e.count++
			e.weight += uint64(k.Weight)
			return
		}
	}
}

func (c *countSink) entry(i uint32) *countEntry {
	return &c.entries[i>>entryBits][i&(entryBlock-1)]
}

// record returns the head (proto, ns) and the key of the record at rec.
func (c *countSink) record(rec uint64) (head, key []byte) {
	b := c.arena[rec>>32][uint32(rec):]
	hl := 2 + int(b[1])
	klen, n := binary.Uvarint(b[hl:])
	start := hl + n
	return b[:hl], b[start : start+int(klen)]
}

// add appends a record and its entry.
func (c *countSink) add(head, key []byte) *countEntry {
	need := len(head) + binary.MaxVarintLen64 + len(key)
	last := len(c.arena) - 1
	if last < 0 || cap(c.arena[last])-len(c.arena[last]) < need {
		// A chunk is allocated whole: it counts whole, except for a key
		// of its own (larger than a chunk), which counts its size.
		size := max(arenaChunk, need)
		if c.maxBytes > 0 && c.held+size > c.maxBytes {
			size = need // near the bound: no more room than this record needs
		}
		c.arena = append(c.arena, make([]byte, 0, size))
		c.held += size
		last++
	}
	chunk := c.arena[last]
	rec := uint64(last)<<32 | uint64(len(chunk))
	chunk = append(chunk, head...)
	chunk = binary.AppendUvarint(chunk, uint64(len(key)))
	c.arena[last] = append(chunk, key...)

	if c.n&(entryBlock-1) == 0 {
		c.entries = append(c.entries, make([]countEntry, entryBlock))
	}
	c.held += entryCost
	e := c.entry(uint32(c.n))
	c.n++
	*e = countEntry{rec: rec}
	return e
}

// grow doubles the index and re-inserts every slot by its stored hash.
func (c *countSink) grow() {
	old := c.slots
	c.slots = make([]countSlot, 2*len(old))
	mask := uint64(len(c.slots) - 1)
	for _, s := range old {
		if s.entry == 0 {
			continue
		}
		i := uint64(s.hash) & mask
		for c.slots[i].entry != 0 {
			i = (i + 1) & mask
		}
		c.slots[i] = s
	}
}

// order returns the entry indices in output order: weight descending, then
// count descending, then proto, ns and key ascending (as printed). It is
// 4 bytes a key.
func (c *countSink) order() []uint32 {
	idx := make([]uint32, c.n)
	for i := range idx {
		idx[i] = uint32(i)
	}
	slices.SortFunc(idx, func(a, b uint32) int {
		ea, eb := c.entry(a), c.entry(b)
		switch {
		case ea.weight != eb.weight:
			if ea.weight > eb.weight {
				return -1
			}
			return 1
		case ea.count != eb.count:
			if ea.count > eb.count {
				return -1
			}
			return 1
		}
		ha, ka := c.record(ea.rec)
		hb, kb := c.record(eb.rec)
		if ha[0] != hb[0] {
			return int(ha[0]) - int(hb[0])
		}
		if d := bytes.Compare(ha[2:], hb[2:]); d != 0 {
			return d
		}
		return bytes.Compare(ka, kb)
	})
	return idx
}

// write prints COUNT<TAB>WEIGHT<TAB>PROTO<TAB>NS<TAB>KEY lines.
func (c *countSink) write(w *bufio.Writer) {
	var line []byte
	for _, i := range c.order() {
		e := c.entry(i)
		hd, key := c.record(e.rec)
		line = strconv.AppendUint(line[:0], e.count, 10)
		line = append(line, '\t')
		line = strconv.AppendUint(line, e.weight, 10)
		line = append(line, '\t')
		line = append(line, rankProto[hd[0]].String()...)
		line = append(line, '\t')
		line = append(line, hd[2:]...)
		line = append(line, '\t')
		line = appendCountKey(line, key)
		line = append(line, '\n')
		w.Write(line)
	}
}

// appendCountKey appends the key as decode.CountKey prints it.
func appendCountKey(b, key []byte) []byte {
	if printable(key) {
		return append(b, key...)
	}
	return append(b, decode.CountKey(string(key))...)
}

// printable reports whether key is printed as is (decode.CountKey's rule)
// without converting it to a string; most keys are ASCII.
func printable(key []byte) bool {
	for _, c := range key {
		if c < 0x20 || c >= 0x7f {
			return decode.CountKey(string(key)) == string(key)
		}
	}
	return true
}
