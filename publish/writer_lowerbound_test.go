package publish_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/publish"
)

// TestWriterLowerBound: a first hot event whose rate is a floor prints
// "≥" before it in the text table (replay, run and subscribe --output
// text), and carries "qps_lower_bound":true in JSONL.
func TestWriterLowerBound(t *testing.T) {
	e := &event.Event{V: 1, Type: event.TypeHot, Proto: "redis", Server: "10.0.0.5:6379", NS: "0", Key: []byte("k"),
		QPS: 32000, TTLms: 60000, TS: time.Unix(1_700_000_000, 0), Source: event.SourceDetected, QPSLowerBound: true}
	var buf bytes.Buffer
	w, _ := publish.NewWriter(&buf, "text", "n")
	w.Emit(e)
	if !strings.Contains(buf.String(), "≥32000.0") {
		t.Errorf("text row without the lower-bound mark:\n%s", buf.String())
	}
	buf.Reset()
	w, _ = publish.NewWriter(&buf, "jsonl", "n")
	w.Emit(e)
	if !strings.Contains(buf.String(), `"qps_lower_bound":true`) {
		t.Errorf("jsonl without qps_lower_bound: %s", buf.String())
	}
}
