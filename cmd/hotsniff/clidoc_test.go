package main

import (
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestCLIDocCoversFlags: docs/cli.md is the users' reference, so every
// command and every flag (but --help) must appear in it. A new flag fails
// this test until it is described there.
func TestCLIDocCoversFlags(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	var missing []string
	var walk func(c *cobra.Command, path string)
	walk = func(c *cobra.Command, path string) {
		if path != "" && !strings.Contains(doc, "hotsniff "+path) {
			missing = append(missing, "command `hotsniff "+path+"`")
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" && !strings.Contains(doc, "--"+f.Name) {
				missing = append(missing, "--"+f.Name+" ("+path+")")
			}
		})
		for _, sub := range c.Commands() {
			if sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			walk(sub, strings.TrimSpace(path+" "+sub.Name()))
		}
	}
	walk(newRootCmd(), "")
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Errorf("docs/cli.md does not mention:\n  %s", strings.Join(missing, "\n  "))
	}
}
