package main

import (
	"bytes"
	"testing"
)

// runCLI runs the hotsniff CLI in-process and returns stdout, stderr and
// the exit code the contract defines.
func runCLI(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runWith(args, &out, &errb)
	return out.String(), errb.String(), code
}
