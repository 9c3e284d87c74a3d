package redis

import (
	"bytes"
	"hash/maphash"

	"github.com/hotsniff/hotsniff/decode"
)

// Absorbed-demand reports (docs/channel-protocol.md): a client shim that
// serves a hot key from memory pipelines
//
//	ECHO "hotsniff:absorbed:1 <hits> <window_ms> <key>"
//
// right after its refresh read of the key. The parser recognises it and
// hands it on through the sink's Absorbed, vouching for it only when the
// request just before it on this connection was a read of exactly that one
// key: a report always rides on a real read, so the reads it claims are
// tied to a client that really reads the key from this server.

// reportPrefix starts every report; the version follows it.
const reportPrefix = "hotsniff:absorbed:"

// reportOverhead bounds the report's bytes besides the key: the prefix,
// version, two 19-digit numbers and the separators.
const reportOverhead = len(reportPrefix) + 2 + 2*20 + 2

var idxEcho = mustIndex("ECHO")

// pairSeed keys the hashes of remembered read keys. It is random per
// process, so a client cannot craft a key that collides with another.
var pairSeed = maphash.MakeSeed()

// pairKey remembers the key of a request that read exactly one key. While
// the Parse call that decoded it runs, pend aliases the key's bytes; before
// Parse returns (the bytes are the caller's), settle replaces them by a hash.
type pairKey struct {
	ok   bool // the request read exactly one key
	pend []byte
	h    uint64
	n    int
}

func (k *pairKey) settle() {
	if k.pend != nil {
		k.h, k.n, k.pend = maphash.Bytes(pairSeed, k.pend), len(k.pend), nil
	}
}

func (k *pairKey) equal(key []byte) bool {
	if !k.ok {
		return false
	}
	if k.pend != nil {
		return bytes.Equal(k.pend, key)
	}
	return k.n == len(key) && maphash.Bytes(pairSeed, key) == k.h
}

// noteKey records a key the current request names (have=false: one the
// parser could not read). Only a read naming exactly one key can pair.
func (p *parser) noteKey(a []byte, have bool) {
	p.curKeys++
	if p.curKeys > 1 || p.req.Write || !have {
		p.cur = pairKey{}
		return
	}
	p.cur = pairKey{ok: true, pend: a}
}

// settlePairs hashes the remembered keys that still alias the input.
func (p *parser) settlePairs() {
	p.cur.settle()
	p.prev.settle()
}

// forgetPairs: after lost bytes, what came before is not known to be
// immediately before.
func (p *parser) forgetPairs() {
	p.cur, p.prev, p.curKeys = pairKey{}, pairKey{}, 0
}

// report handles ECHO's argument a.
func (p *parser) report(a []byte) {
	if !bytes.HasPrefix(a, []byte(reportPrefix)) {
		return // an application's own ECHO
	}
	r := &p.abs
	*r = decode.Absorbed{NS: p.ns}
	if !parseReport(a[len(reportPrefix):], r) || len(r.Key) > p.cfg.MaxKeyLen {
		r.Key, r.Hits, r.WindowMS = nil, 0, 0
		r.Reject = decode.AbsorbedMalformed
	} else if !p.prev.equal(r.Key) {
		r.Reject = decode.AbsorbedUnpaired
	}
	p.s.Absorbed(p.f, r)
}

// parseReport parses "1 <hits> <window_ms> <key>" (version 1).
func parseReport(b []byte, r *decode.Absorbed) bool {
	if len(b) < 2 || b[0] != '1' || b[1] != ' ' {
		return false
	}
	b = b[2:]
	var ok bool
	if r.Hits, b, ok = reportNum(b); !ok {
		return false
	}
	if r.WindowMS, b, ok = reportNum(b); !ok {
		return false
	}
	r.Key = b
	return true
}

// reportNum reads a decimal >= 1 without leading zeros (at most 19 digits)
// followed by one space.
func reportNum(b []byte) (uint64, []byte, bool) {
	var v uint64
	i := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if i == 19 {
			return 0, nil, false
		}
		v = v*10 + uint64(b[i]-'0')
	}
	if i == 0 || b[0] == '0' || i >= len(b) || b[i] != ' ' {
		return 0, nil, false
	}
	return v, b[i+1:], true
}
