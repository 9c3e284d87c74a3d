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

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print version, commit, Go version and BPF object hash",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := commit
			if c == "" {
				if bi, ok := debug.ReadBuildInfo(); ok {
					for _, s := range bi.Settings {
						if s.Key == "vcs.revision" {
							c = s.Value
						}
					}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "hotsniff %s\ncommit: %s\ngo: %s\nbpf: %s\n", version, c, runtime.Version(), bpfObjectHash())
			return nil
		},
	}
}

func bpfObjectHash() string { return bpf.ObjectHash() }
