package accuracy

import (
	"strings"
	"testing"
)

// TestKernelAccuracyTargets runs reduced workloads on the kernel path
// (stage 1 counted in the kernel, only located buckets' reads copied: as
// under --kernel-count) beside the user-space path and holds it to the
// same targets: every key at >= 1.2× the threshold found, none at <= 0.8×
// reported, no event on uniform traffic, onset p99 <= 250 ms (a step to
// 2×, and ten keys at once at 1.5×). It also checks that the feed is the
// kernel's: random traffic stays in the kernel. The workload hot by reply
// bytes runs with the kernel's byte counts, held to the same targets.
func TestKernelAccuracyTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("accuracy workloads take a few seconds")
	}
	p := Quick()
	for _, w := range Workloads {
		u, err := RunOne(p, w, "default")
		if err != nil {
			t.Fatal(err)
		}
		r, err := RunOne(p, w, DetectorKernel)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: kernel recall %d/%d, fp %d/%d, events %d, %.2f%% of reads fed", w, r.Found, r.MustFind, r.FalsePos, r.Quiet, r.Events, 100*r.Fed())
		if r.Onsets > 0 {
			t.Logf("%s: onset p50 %.0f ms p99 %.0f ms; user space %.0f ms, %.0f ms", w, r.P50, r.P99, u.P50, u.P99)
		}
		if r.Found != r.MustFind {
			t.Errorf("%s: recall %d/%d, want every key at >= 1.2× the threshold", w, r.Found, r.MustFind)
		}
		if BytesWorkload(w) && u.Found != u.MustFind {
			t.Errorf("%s: user space recall %d/%d", w, u.Found, u.MustFind)
		}
		if r.FalsePos > 0 {
			t.Errorf("%s: %d keys at <= 0.8× the threshold reported hot", w, r.FalsePos)
		}
		if strings.HasPrefix(w, "uniform") && r.Events != 0 {
			t.Errorf("%s: %d events on uniform traffic", w, r.Events)
		}
		if r.Onsets > 0 && !(r.P99 <= 250) {
			t.Errorf("%s: onset p99 %.0f ms > 250 ms", w, r.P99)
		}
		if r.Reads != u.Obs {
			t.Errorf("%s: %d reads made on the kernel path, %d on the user-space one: not the same workload", w, r.Reads, u.Obs)
		}
		if w == "uniform-1M" && r.Fed() > 0.001 {
			t.Errorf("%s: %.2f%% of random reads reached the detector, want them left in the kernel", w, 100*r.Fed())
		}
	}
}

// TestKernelFeedReader: the reader hands each ended sub-window to the
// detector once, in order, at its end or at the reader's period.
func TestKernelFeedReader(t *testing.T) {
	for _, every := range []int64{0, 70} {
		k := &kernelFeed{sub: 30, phase: 10, every: every, start: -20, cur: make([]uint32, 4)}
		k.read = k.start + k.sub
		if every > 0 {
			k.read = every
		}
		var got []int64 // end of each sub-window read, and when
		k.stepFn = func(s kernelSub, at int64) { got = append(got, s.end, at) }
		k.advance(200)
		var want []int64
		if every == 0 {
			want = []int64{10, 10, 40, 40, 70, 70, 100, 100, 130, 130, 160, 160, 190, 190}
		} else {
			want = []int64{10, 70, 40, 70, 70, 70, 100, 140, 130, 140}
		}
		if len(got) != len(want) {
			t.Fatalf("every %d: read %v, want %v", every, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("every %d: read %v, want %v", every, got, want)
			}
		}
	}
}
