package event

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestContractExample: the documented example event (docs/events.md), byte for byte.
func TestContractExample(t *testing.T) {
	ts, _ := time.Parse(time.RFC3339Nano, "2026-11-29T18:00:00.123456Z")
	e := &Event{V: 1, Seq: 42, Type: TypeHot, Proto: "redis", Server: "10.0.0.5:6379", NS: "0",
		Key: []byte("item:42"), QPS: 1843.5, TTLms: 60000, TS: ts, Source: SourceDetected, Node: "cache-node-3"}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"seq":42,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key":"item:42","qps":1843.5,"ttl_ms":60000,"ts":"2026-11-29T18:00:00.123456Z","source":"detected","node":"cache-node-3"}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	var back Event
	if err := json.Unmarshal(b, &back); err != nil || string(back.Key) != "item:42" || !back.TS.Equal(ts) || back.QPS != 1843.5 {
		t.Fatalf("round trip: %+v %v", back, err)
	}
}

// TestKeyForms: keys that are not valid UTF-8 travel as key_b64; an
// invalidate carries no qps; unknown fields are ignored.
func TestKeyForms(t *testing.T) {
	e := &Event{Type: TypeInvalidate, Key: []byte{0xff, 0x00, 'k'}, QPS: 12}
	b, _ := json.Marshal(e)
	s := string(b)
	if !strings.Contains(s, `"key_b64":"/wBr"`) || strings.Contains(s, `"key":`) || strings.Contains(s, `"qps"`) || !strings.Contains(s, `"v":1`) {
		t.Fatalf("%s", s)
	}
	var back Event
	if err := json.Unmarshal([]byte(strings.Replace(s, `{`, `{"future":[1,2],`, 1)), &back); err != nil {
		t.Fatal(err)
	}
	if string(back.Key) != "\xff\x00k" {
		t.Fatalf("key %q", back.Key)
	}
	if err := json.Unmarshal([]byte(`{"key_b64":"***"}`), &back); err == nil {
		t.Fatal("bad base64 accepted")
	}
}

// TestOptionalFields: the optional fields travel only when set, and
// "cacheable" only as false.
func TestOptionalFields(t *testing.T) {
	e := &Event{Type: TypeHot, Key: []byte("k"), QPS: 10}
	b, _ := json.Marshal(e)
	for _, f := range []string{"absorbed_qps", "write_qps", "cacheable", "bytes_ps", "value_bytes", "reason", "sample"} {
		if strings.Contains(string(b), f) {
			t.Fatalf("%s present when unset: %s", f, b)
		}
	}
	e = &Event{Type: TypeHot, Key: []byte("k"), QPS: 10, AbsorbedQPS: 7, WriteQPS: 3, Uncacheable: true,
		BytesPS: 5000, ValueBytes: 500, Reason: ReasonQPSBytes, Sample: 0.25}
	b, _ = json.Marshal(e)
	for _, f := range []string{`"absorbed_qps":7`, `"write_qps":3`, `"cacheable":false`, `"bytes_ps":5000`, `"value_bytes":500`, `"reason":"qps,bytes"`, `"sample":0.25`} {
		if !strings.Contains(string(b), f) {
			t.Fatalf("%s missing: %s", f, b)
		}
	}
	var back Event
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	back.TS = e.TS
	back.V = 0
	if back.AbsorbedQPS != 7 || back.WriteQPS != 3 || !back.Uncacheable || back.BytesPS != 5000 ||
		back.ValueBytes != 500 || back.Reason != ReasonQPSBytes || back.Sample != 0.25 {
		t.Fatalf("round trip: %+v", back)
	}
	if err := json.Unmarshal([]byte(`{"cacheable":true,"key":"k"}`), &back); err != nil || back.Uncacheable {
		t.Fatalf("cacheable:true: %+v %v", back, err)
	}
}

// TestDecodeMessage: a v1 event and a v2 batch envelope both decode, in order.
func TestDecodeMessage(t *testing.T) {
	evs, err := DecodeMessage(nil, []byte(`{"v":1,"seq":5,"type":"hot","key":"a"}`))
	if err != nil || len(evs) != 1 || evs[0].Seq != 5 {
		t.Fatalf("%v %v", evs, err)
	}
	evs, err = DecodeMessage(evs[:0], []byte(`{"v":2,"node":"n","events":[{"v":1,"seq":6,"type":"hot","key":"a"},{"v":1,"seq":7,"type":"cold","key_b64":"/w=="}]}`))
	if err != nil || len(evs) != 2 || evs[0].Seq != 6 || evs[1].Type != TypeCold || string(evs[1].Key) != "\xff" {
		t.Fatalf("%v %v", evs, err)
	}
	// A key named "events" inside a v1 event is still a v1 event.
	evs, err = DecodeMessage(nil, []byte(`{"v":1,"seq":8,"type":"hot","key":"\"events\""}`))
	if err != nil || len(evs) != 1 || string(evs[0].Key) != `"events"` {
		t.Fatalf("%v %v", evs, err)
	}
	if _, err := DecodeMessage(nil, []byte(`{"v":2,"events":[{"seq":"x"}]}`)); err == nil {
		t.Fatal("bad element accepted")
	}
	if _, err := DecodeMessage(nil, []byte(`not json`)); err == nil {
		t.Fatal("garbage accepted")
	}
}
