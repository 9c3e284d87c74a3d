package detect_test

import (
	"testing"

	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/internal/testing/accuracy"
)

// TestAccuracyTargets runs reduced versions of the accuracy workloads
// (cmd/accuracy runs the full ones) and holds the default detector to the
// targets: recall >= 0.99 of keys at >= 1.2× the threshold, false positives
// <= 1 % of the keys at <= 0.8× (and none at all in absolute terms on the
// steady workloads, the one hot by reply bytes among them), zero events on
// uniform traffic, onset p99 <= 250 ms.
func TestAccuracyTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("accuracy workloads take a few seconds")
	}
	p := accuracy.Quick()
	for _, w := range accuracy.Workloads {
		r, err := accuracy.RunOne(p, w, detect.DetectorDefault)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: recall %d/%d, fp %d/%d, events %d, p50 %.0fms p99 %.0fms",
			w, r.Found, r.MustFind, r.FalsePos, r.Quiet, r.Events, r.P50, r.P99)
		if r.Recall() < 0.99 {
			t.Errorf("%s: recall %.3f < 0.99", w, r.Recall())
		}
		// The workload hot by reply bytes too: its keys are read a few
		// dozen times a window, and the bytes stage judges them on a
		// span long enough to hold the reads (bytes.go).
		if r.FPRate() > 0.01 || r.FalsePos > 0 {
			t.Errorf("%s: %d false positives of %d", w, r.FalsePos, r.Quiet)
		}
		if (w == "uniform-1M" || w == "uniform-0.5x") && r.Events != 0 {
			t.Errorf("%s: %d events on uniform traffic", w, r.Events)
		}
		if r.Onsets > 0 && !(r.P99 <= 250) {
			t.Errorf("%s: onset p99 %.0f ms > 250 ms", w, r.P99)
		}
		if r.MustFind == 0 && w[:4] == "zipf" {
			t.Errorf("%s: no key above the threshold: the workload tests nothing", w)
		}
	}
}
