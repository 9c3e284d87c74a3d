package event

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestFieldsDocumented: every field an event can carry on the wire has its
// row in docs/events.md, so a new optional field (qps_lower_bound, sample,
// ...) cannot reach subscribers undocumented.
func TestFieldsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	rt := reflect.TypeOf(wire{})
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if !strings.Contains(doc, "| `"+name+"` |") {
			t.Errorf("docs/events.md has no table row for the field %q", name)
		}
	}
}
