package publish_test

import (
	"testing"

	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
)

// BenchmarkEmit is the cost the capture path pays per event: stamp, hot-set
// update and a non-blocking queue send. Redis is up and draining.
func BenchmarkEmit(b *testing.B) {
	r := testutil.StartRedis(b)
	rdb := dial(b, "redis://"+r.Addr, publish.TLSOptions{})
	p := newPublisher(b, rdb, publish.Options{Channel: "hk", Node: "n1", QueueSize: 1 << 16})
	e := hot("item:42")
	b.ReportAllocs()
	for b.Loop() {
		p.Emit(e)
	}
	b.ReportMetric(float64(p.Stats().Dropped), "dropped")
}
