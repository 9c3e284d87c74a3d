package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

// A plain `go build` has no -ldflags: the version command must name the
// commit from Go's VCS stamp instead of printing `dev` and an empty commit.
func TestVersionFromVCSStamp(t *testing.T) {
	const rev = "b068e6c0123456789abcdef0123456789abcdef0"
	cases := []struct {
		name         string
		ldV, ldC     string
		bi           *debug.BuildInfo
		wantV, wantC string
	}{
		{"ldflags win", "v0.2.0", "abc", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}}}, "v0.2.0", "abc"},
		{"clean checkout", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}},
			"dev-b068e6c01234", rev},
		{"modified checkout", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}},
			"dev-b068e6c01234-dirty", rev + " (modified)"},
		{"go install at a version", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.1"}},
			"v0.3.1", noStamp},
		{"no stamp", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev", noStamp},
	}
	for _, c := range cases {
		v, com := buildVersion(c.ldV, c.ldC, c.bi, true)
		if v != c.wantV || com != c.wantC {
			t.Errorf("%s: got (%q, %q), want (%q, %q)", c.name, v, com, c.wantV, c.wantC)
		}
	}

	// And the command prints it.
	saved := readBuildInfo
	t.Cleanup(func() { readBuildInfo = saved })
	readBuildInfo = func() (*debug.BuildInfo, bool) { return cases[2].bi, true }
	cmd := newVersionCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "hotsniff dev-b068e6c01234-dirty\ncommit: "+rev+" (modified)\n") {
		t.Errorf("version output:\n%s", out.String())
	}
	// Without any stamp the commit line says what to do, never an empty value.
	readBuildInfo = func() (*debug.BuildInfo, bool) { return nil, false }
	out.Reset()
	if err := newVersionCmdWithOut(&out).Execute(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "commit: \n") || !strings.Contains(out.String(), "make build") {
		t.Errorf("version output without a stamp:\n%s", out.String())
	}
}

func newVersionCmdWithOut(out *bytes.Buffer) interface{ Execute() error } {
	c := newVersionCmd()
	c.SetOut(out)
	c.SetArgs(nil)
	return c
}
