package event

import (
	"bytes"
	"testing"
)

// FuzzDecodeMessage: any channel message (untrusted: anyone who may PUBLISH
// on the channel) decodes to an error or to at most MaxBatchEvents events,
// never a panic; each decoded event re-encodes and decodes to the same key
// and type.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"seq":42,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key":"item:42","qps":1843.5,"ttl_ms":60000,"ts":"2026-11-29T18:00:00.123456Z","source":"detected","node":"cache-node-3","write_qps":4000,"cacheable":false}`,
		`{"v":2,"node":"n","events":[{"v":1,"seq":1,"type":"invalidate","proto":"redis","server":"","ns":"0","key_b64":"/w==","ttl_ms":0,"ts":"2026-11-29T18:00:00.123456Z","source":"detected","node":"n"},{"v":1,"seq":2,"type":"cold","key":"k","ts":""}]}`,
		`{"v":2,"node":"n","events":null}`,
		`{"v":2,"events":[{}]}`,
		`{"events":[1]}`,
		`{"v":2,"node":"n","events":[{"key_b64":"!!"}]}`,
		`{"key":"a","ts":"not a time"}`,
		`[]`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := DecodeMessage(nil, b)
		if err != nil {
			return
		}
		if len(evs) > MaxBatchEvents {
			t.Fatalf("%d events without an error", len(evs))
		}
		for _, e := range evs {
			m, err := e.MarshalJSON()
			if err != nil {
				t.Fatalf("re-encode %+v: %v", e, err)
			}
			back, err := DecodeMessage(nil, m)
			if err != nil || len(back) != 1 {
				t.Fatalf("decode re-encoded %s: %v", m, err)
			}
			if !bytes.Equal(back[0].Key, e.Key) || back[0].Type != e.Type || back[0].Uncacheable != e.Uncacheable {
				t.Fatalf("round trip %+v -> %+v", e, back[0])
			}
		}
	})
}

// FuzzDecodeSnapshot: any snapshot document (untrusted: anyone who may
// write the snapshot key) decodes to an error or to entries that each pass
// the same checks as a channel message, never a panic.
func FuzzDecodeSnapshot(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"seq":9,"ts":"","node":"n","nodes":[{"node":"n","seq":9,"ts":"","keys":1}],"keys":[{"v":1,"seq":7,"type":"hot","proto":"redis","server":"","ns":"0","key":"a","qps":1,"ttl_ms":0,"ts":"2026-11-29T18:00:00.123456Z","source":"manual","node":"n"}]}`,
		`{"v":1,"keys":[{"v":1,"ttl_ms":1e400},{"v":3},{},null,7]}`,
		`{"v":1,"nodes":[{"seq":-1},{"seq":1e400},[]],"keys":null}`,
		`{"v":1e400}`,
		`[]`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		snap, bad, err := DecodeSnapshot(b)
		if err != nil {
			return
		}
		if bad < 0 {
			t.Fatal("negative bad count")
		}
		for _, e := range snap.Keys {
			m, err := e.MarshalJSON()
			if err != nil {
				t.Fatalf("re-encode %+v: %v", e, err)
			}
			if _, err := DecodeMessage(nil, m); err != nil {
				t.Fatalf("an applied snapshot entry is not a valid message: %s: %v", m, err)
			}
		}
	})
}
