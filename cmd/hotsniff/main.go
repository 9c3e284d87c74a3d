// Command hotsniff finds hot keys in cache traffic without touching the cache
// servers or the applications.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// usageError marks errors that are the user's (bad flags, bad arguments):
// they exit 2, runtime failures exit 1.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// usagef returns a usage error.
func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "hotsniff",
		Short:         "Find hot keys in Redis, memcached and Tair traffic, passively",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(flagErrorFunc)
	root.AddCommand(
		newDecodeCmd(),
		newReplayCmd(),
		newRunCmd(),
		newTopCmd(),
		newSubscribeCmd(),
		newHotkeysCmd(),
		newVersionCmd(),
	)
	return root
}

func main() {
	os.Exit(runWith(os.Args[1:], os.Stdout, os.Stderr))
}

// runWith executes the CLI and maps errors to the contract's exit codes.
func runWith(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	// One line, whatever the error: some libraries (yaml, errors.Join)
	// produce several.
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	fmt.Fprintf(stderr, "hotsniff: %s\n", strings.ReplaceAll(msg, ":;", ":"))
	var u usageError
	if errors.As(err, &u) || isCobraUsage(err) {
		return 2
	}
	return 1
}
