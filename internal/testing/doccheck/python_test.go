package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPythonInstallDocumented: a system Python that manages its own
// packages (Debian 12: PEP 668) refuses a bare `pip install`, so every
// install of the Python shim in README.md and docs/ goes into a virtual
// environment made in the same command (python3 -m venv DIR, then
// DIR/bin/pip), names the python3-venv package Debian needs for it, and
// installs a directory that is the package the docs import.
func TestPythonInstallDocumented(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	docs = append(docs, filepath.Join(root, "README.md"))
	pip := regexp.MustCompile("(?m)^.*\\bpip3? install [^\\s`]+.*$") // a command: pip install ARG
	venvPip := regexp.MustCompile(`(\S+)/bin/pip3? install (?:--\S+ )*(\S+)`)
	found := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, line := range pip.FindAllString(text, -1) {
			found++
			m := venvPip.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("%s: %q installs outside a virtual environment (PEP 668 refuses it on Debian 12): write python3 -m venv .venv && .venv/bin/pip install ...", filepath.Base(doc), strings.TrimSpace(line))
				continue
			}
			if !regexp.MustCompile(`python3 -m venv (?:--\S+ )*` + regexp.QuoteMeta(m[1]) + `\b`).MatchString(text) {
				t.Errorf("%s: %q uses a virtual environment %s that no python3 -m venv in the doc creates", filepath.Base(doc), strings.TrimSpace(line), m[1])
			}
			if !strings.Contains(text, "python3-venv") {
				t.Errorf("%s installs into a venv without saying Debian needs the python3-venv package for it", filepath.Base(doc))
			}
			dir := filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(m[2], "./")))
			pp, err := os.ReadFile(filepath.Join(dir, "pyproject.toml"))
			if err != nil {
				t.Errorf("%s installs %s, which is not a Python project: %v", filepath.Base(doc), m[2], err)
				continue
			}
			pkgs := regexp.MustCompile(`packages = \["([^"]+)"`).FindStringSubmatch(string(pp))
			if filepath.Base(doc) == "client-shim.md" && (pkgs == nil || !strings.Contains(text, "import redis, "+pkgs[1])) {
				t.Errorf("%s installs %s but does not import its package %v", filepath.Base(doc), m[2], pkgs)
			}
		}
	}
	if found < 2 {
		t.Errorf("found %d pip installs in README.md and docs/, want the README's and docs/client-shim.md's", found)
	}
}
