package publish

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/event"
)

// TestEmitSnapshotMarked: snapshot entries are told apart from messages in
// both formats, and a JSONL line is still the event (plus the mark).
func TestEmitSnapshotMarked(t *testing.T) {
	e := func() *event.Event {
		return &event.Event{V: 1, Seq: 7, Type: event.TypeHot, Proto: "redis", Server: "10.0.0.5:6379", NS: "0", Key: []byte("k"), QPS: 10, TTLms: 1000, TS: time.Unix(1, 0), Source: event.SourceDetected, Node: "n"}
	}
	var b bytes.Buffer
	w, _ := NewWriter(&b, FormatJSONL, "")
	w.EmitSnapshot(e())
	w.Emit(e())
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil || m["snapshot"] != true || m["key"] != "k" {
		t.Errorf("snapshot line %q: %v", lines[0], err)
	}
	if strings.Contains(lines[1], "snapshot") {
		t.Errorf("message line marked: %q", lines[1])
	}
	b.Reset()
	w, _ = NewWriter(&b, FormatText, "")
	w.EmitSnapshot(e())
	if !strings.Contains(b.String(), "hot (snap)") {
		t.Errorf("text: %q", b.String())
	}
}
