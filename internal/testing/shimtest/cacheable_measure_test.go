package shimtest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client"
	"github.com/hotsniff/hotsniff/client/event"
)

// TestMeasureCacheableRule measures what writes do to a local copy, to
// ground the cacheable verdict (docs/detection.md): one process with the
// shim reads a hot key at a steady rate while another client writes it at
// w per second (both Poisson), and each write is followed by an invalidate on the channel
// (what the daemon sends without coalescing or the verdict), which drops the
// copy. It reports the hit ratio
// against x = w × LocalTTL, next to the model: a copy lives
// (1-exp(-x))/w on average, so a process reading r/s gets r·L reads per
// copy and a hit ratio of r·L/(1+r·L). Minutes: HOTSNIFF_MEASURE=1.
func TestMeasureCacheableRule(t *testing.T) {
	if os.Getenv("HOTSNIFF_MEASURE") != "1" {
		t.Skip("set HOTSNIFF_MEASURE=1 to measure hit ratio against write rate")
	}
	const ttl = 50 * time.Millisecond
	ctx := context.Background()
	fmt.Println("| reads/s per process | writes/s | writes per LocalTTL (x) | hit ratio measured | model | copy fetches/s |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, rate := range []float64{20, 200} {
		for _, wr := range []float64{0, 10, 20, 40, 100, 400, 2000} {
			// A subtest per point: its servers stop when it ends.
			t.Run(fmt.Sprint(rate, "-", wr), func(t *testing.T) {
				e := newShimEnv(t, client.ShimOptions{LocalTTL: ttl, DisableTracking: true})
				e.plain.Set(ctx, "item:hot", "v", 0)
				e.makeHot(t, "item:hot")
				for range 3 {
					e.app.Get(ctx, "item:hot")
				}
				s0 := e.shim.Stats()
				dur := 3 * time.Second
				if rate < 100 {
					dur = 10 * time.Second
				}
				stop := make(chan struct{})
				done := make(chan struct{})
				writes := 0
				go func() {
					defer close(done)
					if wr == 0 {
						return
					}
					rng := rand.New(rand.NewPCG(1, uint64(wr)))
					next := time.Now()
					for {
						select {
						case <-stop:
							return
						default:
						}
						// Poisson arrivals, as the model assumes.
						for !time.Now().Before(next) {
							writes++
							e.plain.Set(ctx, "item:hot", fmt.Sprint("v", writes), 0)
							e.emit(event.TypeInvalidate, "item:hot")
							next = next.Add(time.Duration(rng.ExpFloat64() / wr * float64(time.Second)))
						}
						time.Sleep(time.Millisecond / 4)
					}
				}()
				rng := rand.New(rand.NewPCG(2, uint64(rate)))
				start, n := time.Now(), 0
				for next := start; time.Since(start) < dur; {
					for !time.Now().Before(next) {
						n++
						e.app.Get(ctx, "item:hot")
						next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
					}
					time.Sleep(time.Millisecond / 4)
				}
				close(stop)
				<-done
				s1 := e.shim.Stats()
				hits := float64(s1.Hits + s1.StaleHits - s0.Hits - s0.StaleHits)
				miss := float64(s1.Misses - s0.Misses)
				fetch := float64(s1.Misses-s0.Misses) / dur.Seconds()
				w := float64(writes) / dur.Seconds() // achieved
				r := float64(n) / dur.Seconds()
				x := w * ttl.Seconds()
				life := ttl.Seconds()
				if w > 0 {
					life = (1 - math.Exp(-x)) / w
				}
				model := r * life / (1 + r*life)
				fmt.Printf("| %.0f | %.0f | %.2g | %.1f%% | %.1f%% | %.1f |\n", r, w, x, 100*hits/(hits+miss), 100*model, fetch)
			})
		}
	}
}
