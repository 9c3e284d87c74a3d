package event

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestContractExample: the CONTRACT §2 example object, byte for byte.
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
