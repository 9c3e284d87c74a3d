package doccheck

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// layers orders the packages of the data flow, lowest first: the eBPF
// loader below capture, capture below stream below the decoders below
// detect below publish. A package may import packages of its own layer or
// below, never above. The vocabulary packages every stage speaks (event;
// decode's root package, which holds the Parser and Sink interfaces the
// stream layer drives and imports nothing of the project) sit at the
// bottom.
var layers = []struct {
	name     string
	prefixes []string
}{
	{"vocabulary", []string{"event", "decode"}},
	{"bpf", []string{"bpf"}},
	{"capture", []string{"capture"}},
	{"stream", []string{"stream"}},
	{"decode", []string{"decode/"}},
	{"detect", []string{"detect"}},
	{"publish", []string{"publish"}},
}

const module = "github.com/hotsniff/hotsniff/"

func layerOf(pkg string) int {
	rel, ok := strings.CutPrefix(pkg, module)
	if !ok {
		return -1
	}
	best, bestLen := -1, -1
	for i, l := range layers {
		for _, p := range l.prefixes {
			match := rel == p || strings.HasPrefix(rel, strings.TrimSuffix(p, "/")+"/")
			if strings.HasSuffix(p, "/") {
				match = strings.HasPrefix(rel, p)
			}
			if match && len(p) > bestLen {
				best, bestLen = i, len(p)
			}
		}
	}
	return best
}

// TestLayers checks, over `go list -deps`, that no package of the data
// flow depends on a package above it.
func TestLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Deps", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		l := layerOf(p.ImportPath)
		if l < 0 {
			continue
		}
		checked++
		for _, d := range p.Deps {
			if dl := layerOf(d); dl > l {
				t.Errorf("%s (layer %s) depends on %s (layer %s, above it)",
					strings.TrimPrefix(p.ImportPath, module), layers[l].name, strings.TrimPrefix(d, module), layers[dl].name)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d packages checked: the layer table no longer matches the tree", checked)
	}
}
