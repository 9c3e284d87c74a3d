package client

import (
	"log/slog"
	"testing"
	"time"
)

// BenchmarkAcquireHit is the shim's own work for a local hit (the entry
// lookup, the expiry checks, the counters), without go-redis around it,
// with absorbed-demand counting on and off side by side: what counting a
// hit for the report adds. Parallel: every goroutine hits the same key, as
// the fleet's readers do.
func BenchmarkAcquireHit(b *testing.B) {
	for _, off := range []bool{false, true} {
		name := "reports-on"
		if off {
			name = "reports-off"
		}
		b.Run(name, func(b *testing.B) {
			s := &Shim{opt: ShimOptions{DisableAbsorbedReports: off, LocalTTL: time.Hour, Logger: slog.New(slog.DiscardHandler)},
				entries: map[string]*cacheEntry{}}
			s.opt.defaults()
			e := &cacheEntry{key: "item:hot", kind: kindString}
			e.val.Store(&value{exists: true, str: "v", expires: nanotime() + int64(time.Hour)})
			s.entries["item:hot"] = e
			now := nanotime()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if act, _, _ := s.acquire("item:hot", kindString, now); act != actHit {
						b.Error("miss")
						return
					}
				}
			})
			b.StopTimer()
			if !off && e.rep.hits.Load() != uint64(b.N) {
				b.Fatalf("counted %d of %d hits", e.rep.hits.Load(), b.N)
			}
		})
	}
}
