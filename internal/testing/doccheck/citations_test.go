// Package doccheck holds repository-wide checks of the documentation and
// of the scripts the documentation tells users to run.
package doccheck

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Outside the repository, users have nothing but the repository: no
// project-internal contract, no sibling folders. Text they read (README,
// docs/, the chart, --help, which lives in Go strings, and Go doc comments)
// must say things itself instead of citing such sources. The pattern is
// assembled so that this file does not match itself.
var citation = regexp.MustCompile(strings.Join([]string{
	`CONTR` + `ACT`,            // the internal contract, "… §2"
	`\.\./` + `shared`,         // a sibling folder
	`/wo` + `rk/`,              // a path on the development machines
	`shared/` + `(docs|CONTR)`, // the internal docs folder
}, "|"))

func TestNoExternalCitations(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "fuzz", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".md", ".go", ".yaml", ".yml", ".tpl", ".txt", ".json", ".c", ".h", ".sh", "":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b, 0) >= 0 {
			return nil // binary
		}
		checked++
		for i, line := range strings.Split(string(b), "\n") {
			if m := citation.FindString(line); m != "" {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d cites %q, which users do not have: say it in the repository's own words", rel, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked only %d files: wrong root?", checked)
	}
}

// TestDocsExist: the reference pages the README and --help point to.
func TestDocsExist(t *testing.T) {
	for _, p := range []string{"docs/cli.md", "docs/events.md", "docs/channel-protocol.md", "docs/detection.md"} {
		if _, err := os.Stat(filepath.Join("..", "..", "..", p)); err != nil {
			t.Error(err)
		}
	}
}
