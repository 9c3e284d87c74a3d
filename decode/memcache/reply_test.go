package memcache

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/internal/testing/replytest"
)

func mcBinReq(op byte, key string, opaque uint32) string {
	h := make([]byte, 24)
	h[0], h[1] = 0x80, op
	binary.BigEndian.PutUint16(h[2:], uint16(len(key)))
	binary.BigEndian.PutUint32(h[8:], uint32(len(key)))
	binary.BigEndian.PutUint32(h[12:], opaque)
	return string(h) + key
}

func mcBinRes(op byte, key, value string, opaque uint32) string {
	h := make([]byte, 24)
	h[0], h[1] = 0x81, op
	binary.BigEndian.PutUint16(h[2:], uint16(len(key)))
	h[4] = 4
	binary.BigEndian.PutUint32(h[8:], uint32(4+len(key)+len(value)))
	binary.BigEndian.PutUint32(h[12:], opaque)
	return string(h) + "\x00\x00\x00\x00" + key + value
}

func mcBinNoop(opaque uint32) string {
	h := make([]byte, 24)
	h[0], h[1] = 0x81, 0x0a
	binary.BigEndian.PutUint32(h[12:], opaque)
	return string(h)
}

var mcReplyCases = []struct {
	name     string
	req, rep string
	want     map[string]uint64
	unpaired uint64
}{
	{
		// END (5 bytes) splits 2, 2, 1 over a, b, c.
		name: "multi-get: VALUE blocks to their keys, END shared, misses get their share",
		req:  "get a b c\r\n",
		rep:  "VALUE a 0 2\r\nxy\r\nVALUE c 0 3\r\nabc\r\nEND\r\n",
		want: map[string]uint64{"/a": 13 + 4 + 2, "/b": 2, "/c": 13 + 5 + 1},
	},
	{
		name: "gets with cas, pipelined gets, a noreply write",
		req:  "gets k\r\nset x 0 0 1 noreply\r\nv\r\nget k\r\nget m\r\n",
		rep:  "VALUE k 0 4 77\r\nvvvv\r\nEND\r\n" + "VALUE k 0 4\r\nvvvv\r\nEND\r\n" + "END\r\n",
		want: map[string]uint64{"/k": 16 + 6 + 5 + 13 + 6 + 5, "/m": 5},
	},
	{
		name:     "meta: VA, EN, HD; quiet gets closed by mn, hits echo the key",
		req:      "mg a v\r\nmg b v\r\nmg c t\r\nmg d k v q\r\nmg e k v q\r\nmn\r\n",
		rep:      "VA 2\r\nxy\r\n" + "EN\r\n" + "HD t-1\r\n" + "VA 1 ke\r\nz\r\n" + "MN\r\n",
		want:     map[string]uint64{"/a": 10, "/b": 4, "/c": 8, "/e": 12},
		unpaired: 4,
	},
	{
		// Quiet GETKQ: only the hit on b answers; the NOOP's response
		// pairs (it has no key).
		name: "binary GETKQ batch, GET",
		req:  mcBinReq(0x0d, "a", 1) + mcBinReq(0x0d, "b", 2) + mcBinReq(0x0a, "", 3) + mcBinReq(0x00, "c", 4),
		rep:  mcBinRes(0x0d, "b", "vvv", 2) + mcBinNoop(3) + mcBinRes(0x00, "", "cc", 4),
		want: map[string]uint64{"/b": 32, "/c": 30},
	},
}

func TestReplyAttribution(t *testing.T) {
	for _, c := range mcReplyCases {
		t.Run(c.name, func(t *testing.T) {
			for i := 0; i <= len(c.rep); i++ {
				for _, cuts := range [][]int{{i, len(c.rep)}} {
					conn := replytest.NewConn(New(), decode.PendingConfig{})
					conn.Requests(1, []byte(c.req))
					prev := 0
					for _, x := range cuts {
						conn.Replies(2, []byte(c.rep[prev:x]))
						prev = x
					}
					s := conn.S
					if fmt.Sprint(s.Bytes) != fmt.Sprint(c.want) || s.Unpaired != c.unpaired || len(s.Errors) > 0 {
						t.Fatalf("cut %d: bytes %v unpaired %d errors %v, want %v unpaired %d", i, s.Bytes, s.Unpaired, s.Errors, c.want, c.unpaired)
					}
					if s.Total != uint64(len(c.rep)) {
						t.Fatalf("cut %d: replies total %d, stream %d", i, s.Total, len(c.rep))
					}
				}
			}
		})
	}
}

// FuzzReply: see replytest.Check.
func FuzzReply(f *testing.F) {
	for _, c := range mcReplyCases {
		f.Add([]byte(c.req), []byte(c.rep), byte(len(c.name)))
	}
	f.Add([]byte("get a\r\n"), []byte("VALUE a 0 99999999999\r\nEND\r\n"), byte(1))
	f.Fuzz(func(t *testing.T, req, rep []byte, seed byte) {
		replytest.Check(t, New(), req, rep, seed, endLen)
	})
}
