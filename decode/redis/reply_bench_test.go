package redis

import (
	"strings"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/internal/testing/replytest"
)

// benchPipeline is 16 pipelined GETs and an MGET of 4 keys, with their
// replies (1000-byte values, one miss).
func benchPipeline() (req, rep []byte) {
	var q, r strings.Builder
	v := bulk(strings.Repeat("v", 1000))
	for i := range 16 {
		q.WriteString(respCmd("GET", "key:"+string(rune('a'+i))))
		r.WriteString(v)
	}
	q.WriteString(respCmd("MGET", "m:1", "m:2", "m:3", "m:4"))
	r.WriteString("*4\r\n" + v + "$-1\r\n" + v + v)
	return []byte(q.String()), []byte(r.String())
}

// BenchmarkPairing decodes the pipeline's requests (RequestsOnly) or its
// requests and replies, pairing them and attributing the bytes (Replies):
// the difference is the reply path's cost. Reported per request.
func BenchmarkPairing(b *testing.B) {
	req, rep := benchPipeline()
	for _, withReplies := range []bool{false, true} {
		name := "RequestsOnly"
		if withReplies {
			name = "Replies"
		}
		b.Run(name, func(b *testing.B) {
			c := replytest.NewConn(New(Config{}), decode.PendingConfig{})
			nop := &replytest.Nop{}
			c.Out = nop
			b.ReportAllocs()
			b.SetBytes(int64(len(req) + len(rep)))
			for i := 0; b.Loop(); i++ {
				c.Requests(int64(i), req)
				if withReplies {
					c.Replies(int64(i), rep)
				} else {
					c.F.Pending.Reset(true) // nobody drains it
				}
			}
			b.ReportMetric(float64(b.N)*17/b.Elapsed().Seconds(), "requests/s")
			if withReplies && nop.Bytes != uint64(b.N)*uint64(len(rep)) {
				b.Fatalf("attributed %d bytes, want %d", nop.Bytes, uint64(b.N)*uint64(len(rep)))
			}
		})
	}
}
