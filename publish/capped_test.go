package publish_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/publish"
)

// A capped demand travels as "capped":true and is shown as a lower bound
// ("+") in the text output.
func TestCappedShown(t *testing.T) {
	e := hot("k")
	e.Capped = true
	b, err := e.MarshalJSON()
	if err != nil || !strings.Contains(string(b), `"capped":true`) {
		t.Fatalf("%s %v", b, err)
	}
	var back event.Event
	if err := json.Unmarshal(b, &back); err != nil || !back.Capped {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	e.Capped = false
	if b, _ := e.MarshalJSON(); strings.Contains(string(b), "capped") {
		t.Fatalf("uncapped event carries capped: %s", b)
	}
	var out strings.Builder
	w, err := publish.NewWriter(&out, publish.FormatText, "n")
	if err != nil {
		t.Fatal(err)
	}
	e.Capped = true
	w.Emit(e)
	if !strings.Contains(out.String(), "1843.5+") {
		t.Fatalf("text output %q: want the rate marked 1843.5+", out.String())
	}
}
