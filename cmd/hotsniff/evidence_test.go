package main

import (
	"testing"

	"github.com/hotsniff/hotsniff/bpf"
)

// TestEvidenceShedding: a step the programs took themselves (a ring
// filling) makes every check a loss until the level is back where it was
// before the step, the check that sees it back included; what was skipped
// meanwhile counts as shed. Sampling planned under --max-cpu, without a
// step, is not a loss.
func TestEvidenceShedding(t *testing.T) {
	var e evidence
	steps := []struct {
		st   bpf.Sampling
		loss bool
	}{
		{bpf.Sampling{Level: 16, SampledOut: 100, OutBytes: 1000}, false}, // planned (--max-cpu): no raise
		{bpf.Sampling{Level: 16, SampledOut: 200, OutBytes: 2000}, false},
		{bpf.Sampling{Level: 48, Raises: 2, SampledOut: 500, OutBytes: 5000}, true},   // the programs stepped twice
		{bpf.Sampling{Level: 32, Raises: 2, SampledOut: 900, OutBytes: 9000}, true},   // one halving back: still shedding
		{bpf.Sampling{Level: 16, Raises: 2, SampledOut: 1000, OutBytes: 10000}, true}, // back: the last span
		{bpf.Sampling{Level: 16, Raises: 2, SampledOut: 1100, OutBytes: 11000}, false},
		{bpf.Sampling{Level: 16, Raises: 3, SampledOut: 1200, OutBytes: 12000}, true}, // a step undone before this check
		{bpf.Sampling{Level: 16, Raises: 3, SampledOut: 1300, OutBytes: 13000}, true}, // seen back: the last span
		{bpf.Sampling{Level: 16, Raises: 3, SampledOut: 1400, OutBytes: 14000}, false},
	}
	for i, s := range steps {
		if got := e.sampling(s.st); got != s.loss {
			t.Fatalf("check %d (%+v): loss %v, want %v", i, s.st, got, s.loss)
		}
		e.checked = true
	}
	// Shed: checks 2 to 4 (300 + 400 + 100 segments), 6 and 7 (100 each).
	if e.shedSegs != 1000 || e.shedBytes != 10000 {
		t.Fatalf("shed %d segments, %d bytes; want 1000, 10000", e.shedSegs, e.shedBytes)
	}
}
