package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRewrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "d.md")
	if err := os.WriteFile(p, []byte("a\n"+beginMark+"\nold\n"+endMark+"\nz\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rewrite(p, "new\n", beginMark, endMark); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if want := "a\n" + beginMark + "\nnew\n" + endMark + "\nz\n"; string(b) != want {
		t.Fatalf("got %q, want %q", b, want)
	}
	if err := os.WriteFile(p, []byte("no markers"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rewrite(p, "x", beginMark, endMark); err == nil {
		t.Fatal("no error without markers")
	}
}
