package writespec

import (
	"bytes"
	"os"
	"testing"
)

// TestCommittedTablesCurrent: the copies the Go shim embeds and the Python
// and Node shims load are what the generator writes from the current COMMAND
// table.
func TestCommittedTablesCurrent(t *testing.T) {
	want, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../../../../client/writes.json", "../../../../client/python/hotsniff_shim/writes.json", "../../../../client/node/src/writes.json"} {
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go run ./tools/gen/shimwrites -out client/writes.json", p)
		}
	}
}
