package main

import (
	"os"
	"testing"
)

// TestMain lets tests run the real CLI as a child process (inside a network
// namespace, or to SIGKILL it) by re-executing the test binary: with
// HOTSNIFF_TEST_MAIN=1 it is hotsniff.
func TestMain(m *testing.M) {
	if os.Getenv("HOTSNIFF_TEST_MAIN") == "1" {
		os.Exit(runWith(os.Args[1:], os.Stdout, os.Stderr))
	}
	if os.Getenv("HOTSNIFF_FLEET_APP") == "1" {
		os.Exit(fleetApp())
	}
	os.Exit(m.Run())
}
