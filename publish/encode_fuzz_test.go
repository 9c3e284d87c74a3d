package publish

import (
	"bytes"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/event/envelope"
)

// FuzzEncodeMessages: whatever the keys (any bytes, any length up to past
// what a message holds), every message the publisher would send is at most
// event.MaxMessageBytes, opens with the secret when signed, decodes with
// the subscribers' decoder, and carries exactly the events marked sent, in
// order.
func FuzzEncodeMessages(f *testing.F) {
	f.Add([]byte("item:42"), uint16(3), uint16(1), true, false)
	f.Add(bytes.Repeat([]byte{1}, 70<<10), uint16(40), uint16(7), true, true)
	f.Add(bytes.Repeat([]byte("\xff"), 300<<10), uint16(2), uint16(0), false, true)
	f.Fuzz(func(t *testing.T, key []byte, n, grow uint16, v2, signed bool) {
		n = n%64 + 1
		var secret []byte
		if signed {
			secret = []byte("k")
		}
		format := FormatV1
		if v2 {
			format = FormatV2
		}
		evs := make([]*event.Event, n)
		for i := range evs {
			k := append(bytes.Clone(key), bytes.Repeat([]byte{'x'}, int(grow)*i)...)
			evs[i] = &event.Event{V: 1, Seq: uint64(i + 1), Type: event.TypeHot, Proto: "redis", Server: "10.0.0.5:6379", NS: "0",
				Key: k, QPS: 1, TTLms: 1000, TS: time.Unix(0, 0), Source: event.SourceDetected, Node: "n"}
		}
		sent := make([]bool, n)
		msgs, err := encodeMessages(evs, format, "n", 500, secret, sent)
		if err != nil {
			t.Fatal(err)
		}
		var got []*event.Event
		for _, m := range msgs {
			if len(m) > event.MaxMessageBytes {
				t.Fatalf("message of %d bytes", len(m))
			}
			if signed {
				if m, err = envelope.Open(secret, m); err != nil {
					t.Fatal(err)
				}
			}
			if got, err = event.DecodeMessage(got, m); err != nil {
				t.Fatalf("decode: %v", err)
			}
		}
		j := 0
		for i, ok := range sent {
			if !ok {
				continue
			}
			if j >= len(got) || got[j].Seq != evs[i].Seq || !bytes.Equal(got[j].Key, evs[i].Key) {
				t.Fatalf("event %d not delivered in order", i)
			}
			j++
		}
		if j != len(got) {
			t.Fatalf("%d events decoded, %d sent", len(got), j)
		}
	})
}
