// Package perf holds hotsniff's end-to-end performance checks: a short test
// run by `go test ./...` that drives the real `hotsniff run` binary inside a
// network namespace and checks every request is decoded with nothing
// dropped, and the measurement harness behind docs/performance.md
// (HOTSNIFF_FIGURES=1 go test -run TestFigures -v ./internal/testing/perf/).
//
// Both need root (they skip without it, and fail under CI=true); see
// internal/testing/netnstest.
package perf
