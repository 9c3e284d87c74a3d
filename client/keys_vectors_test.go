package client

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// TestWrittenKeysVectors checks the written-key vectors that the Python and
// Node shims' own tests also check, so all three agree on what a write
// drops.
func TestWrittenKeysVectors(t *testing.T) {
	b, err := os.ReadFile("conformance/testdata/written_keys.json")
	if err != nil {
		t.Fatal(err)
	}
	var vecs []struct {
		Cmd  []string `json:"cmd"`
		Keys []string `json:"keys"`
		All  bool     `json:"all"`
	}
	if err := json.Unmarshal(b, &vecs); err != nil {
		t.Fatal(err)
	}
	for _, v := range vecs {
		args := make([]any, len(v.Cmd))
		for i, a := range v.Cmd {
			args[i] = a
		}
		keys, all := writtenKeys(args, nil)
		if len(keys) == 0 {
			keys = []string{}
		}
		if !reflect.DeepEqual(keys, v.Keys) || all != v.All {
			t.Errorf("%q: keys %q all %v, want %q %v", v.Cmd, keys, all, v.Keys, v.All)
		}
	}
}
