package main

import (
	"os"
	"runtime/debug"
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

// TestCLIDocVersion: docs/cli.md says what `hotsniff version` prints for a
// build without -ldflags; the forms it names are the ones buildVersion makes.
func TestCLIDocVersion(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "### `hotsniff version`")
	if i < 0 {
		t.Fatal("docs/cli.md has no `hotsniff version` section")
	}
	sec := doc[i+3:]
	if j := strings.Index(sec, "\n#"); j >= 0 {
		sec = sec[:j]
	}
	const rev = "0123456789abcdef0123456789abcdef01234567"
	v, c := buildVersion("dev", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}}, true)
	for _, form := range []struct{ got, doc string }{
		{strings.TrimSuffix(strings.Replace(v, rev[:12], "<commit>", 1), "-dirty"), "`dev-<commit>`"},
		{v[len(v)-len("-dirty"):], "`-dirty`"},
		{strings.TrimPrefix(c, rev+" "), "`(modified)`"},
	} {
		if "`"+form.got+"`" != form.doc || !strings.Contains(sec, form.doc) {
			t.Errorf("version prints %q; docs/cli.md's version section should name it as %s:\n%s", form.got, form.doc, sec)
		}
	}
	if _, c := buildVersion("dev", "", nil, false); !strings.Contains(sec, "commit:") || !strings.Contains(c, "make build") || !strings.Contains(sec, "make build") {
		t.Errorf("without a stamp the commit line says %q; docs/cli.md's version section should say the same remedy:\n%s", c, sec)
	}
}
