package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/hotsniff/hotsniff/bpf"
)

// version and commit are set by the Makefile through -ldflags.
var (
	version = "dev"
	commit  = ""
)

// readBuildInfo is swapped by tests: a real binary's stamp depends on how it
// was built.
var readBuildInfo = debug.ReadBuildInfo

// noStamp is what version prints when neither -ldflags nor Go's VCS stamp say
// which commit this is, with what to do about it.
const noStamp = "unknown (no VCS stamp: build inside the git checkout with 'make build' or 'go build -buildvcs=true')"

// buildVersion resolves what `hotsniff version` prints. The Makefile's
// -ldflags win; a plain `go build` or `go install` falls back to what Go
// embeds: the module version (`go install ...@v1.2.3`) or the VCS stamp
// (vcs.revision, vcs.modified), so the binary still names its commit.
func buildVersion(ldVersion, ldCommit string, bi *debug.BuildInfo, ok bool) (ver, com string) {
	ver, com = ldVersion, ldCommit
	if !ok || bi == nil {
		if com == "" {
			com = noStamp
		}
		return ver, com
	}
	var rev string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if com == "" {
		switch {
		case rev != "" && modified:
			com = rev + " (modified)"
		case rev != "":
			com = rev
		default:
			com = noStamp
		}
	}
	if ver == "dev" || ver == "" {
		switch mv := bi.Main.Version; {
		case mv != "" && mv != "(devel)":
			// go install module@version, or Go 1.24+ deriving a pseudo-version
			// from the checkout's tags.
			ver = mv
		case rev != "":
			short := rev
			if len(short) > 12 {
				short = short[:12]
			}
			ver = "dev-" + short
			if modified {
				ver += "-dirty"
			}
		default:
			ver = "dev"
		}
	}
	return ver, com
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print version, commit, Go version and BPF object hash",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bi, ok := readBuildInfo()
			v, c := buildVersion(version, commit, bi, ok)
			fmt.Fprintf(cmd.OutOrStdout(), "hotsniff %s\ncommit: %s\ngo: %s\nbpf: %s\n", v, c, runtime.Version(), bpfObjectHash())
			return nil
		},
	}
}

func bpfObjectHash() string { return bpf.ObjectHash() }
