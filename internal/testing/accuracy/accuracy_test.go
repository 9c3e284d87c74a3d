package accuracy

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The harness's truth is the model distribution: the sampler must follow it.
func TestAliasFollowsDistribution(t *testing.T) {
	p := zipfProb(1000, 0.99)
	a := newAlias(p)
	rng := rand.New(rand.NewPCG(1, 1))
	const n = 2_000_000
	got := make([]int, len(p))
	for range n {
		got[a.sample(rng)]++
	}
	for k := range 50 { // the head, where counts are large enough to test
		want := p[k] * n
		if d := math.Abs(float64(got[k]) - want); d > 5*math.Sqrt(want) {
			t.Errorf("key %d: %d samples, want %.0f ± %.0f", k, got[k], want, 5*math.Sqrt(want))
		}
	}
}

func TestPercentile(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	if p50, p99 := percentile(v, 0.5), percentile(v, 0.99); p50 != 5 || p99 != 10 {
		t.Fatalf("p50 %v p99 %v", p50, p99)
	}
	if !math.IsNaN(percentile(nil, 0.5)) {
		t.Fatal("percentile of nothing is not NaN")
	}
}
