package main

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/config"
	"github.com/hotsniff/hotsniff/event"
)

// TestHotkeysEndpoint checks the /hotkeys document that `top` and scripts
// read: the hot set as contract events, with node and threshold.
func TestHotkeysEndpoint(t *testing.T) {
	cfg := config.Default()
	cfg.Detect.Node, cfg.Detect.HotQPS = "n1", 1500
	d := &daemon{cfg: &cfg}
	d.hot = []event.Event{
		{V: 1, Type: "hot", Proto: "redis", Server: "10.0.0.5:6379", NS: "0", Key: []byte("item:42"), QPS: 1843.5, TTLms: 60000, TS: time.Unix(1, 0), Source: "detected"},
		{V: 1, Type: "hot", Proto: "memcache", Server: "10.0.0.6:11211", Key: []byte{0xff, 0x00}, QPS: 2000, TTLms: 60000, TS: time.Unix(2, 0), Source: "detected"},
	}
	rec := httptest.NewRecorder()
	d.hotkeys(rec, httptest.NewRequest("GET", "/hotkeys", nil))
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
	var doc struct {
		V      int               `json:"v"`
		Node   string            `json:"node"`
		TS     string            `json:"ts"`
		HotQPS float64           `json:"hot_qps"`
		Keys   []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	if doc.V != 1 || doc.Node != "n1" || doc.HotQPS != 1500 || len(doc.Keys) != 2 {
		t.Fatalf("document: %s", rec.Body)
	}
	if _, err := time.Parse(time.RFC3339Nano, doc.TS); err != nil {
		t.Errorf("ts %q: %v", doc.TS, err)
	}
	var e0, e1 event.Event
	json.Unmarshal(doc.Keys[0], &e0)
	json.Unmarshal(doc.Keys[1], &e1)
	if string(e0.Key) != "item:42" || e0.QPS != 1843.5 || e0.Node != "n1" || e0.Server != "10.0.0.5:6379" {
		t.Errorf("first key: %s", doc.Keys[0])
	}
	if string(e1.Key) != "\xff\x00" {
		t.Errorf("binary key must travel as key_b64: %s", doc.Keys[1])
	}
}
