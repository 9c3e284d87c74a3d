package shimtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client"
	"github.com/hotsniff/hotsniff/client/event"
	"github.com/redis/go-redis/v9"
)

const nKeys = 1000

func keyName(i uint64) string {
	if i == 0 {
		return "item:hot"
	}
	return fmt.Sprint("item:", i)
}

// zipfReads reads a Zipf mix of keys through rdb for d with g goroutines
// (GETs, and MGETs of three keys), and returns the key reads made of
// item:hot and of the others. Counted by the application, not the shim.
func zipfReads(t *testing.T, rdb *redis.Client, g int, d time.Duration) (hot, cold int) {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for w := range g {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			z := rand.NewZipf(r, 1.2, 1, nKeys-1)
			var h, c int
			count := func(k string) {
				if k == "item:hot" {
					h++
				} else {
					c++
				}
			}
			for i := 0; time.Now().Before(deadline); i++ {
				if i%5 == 4 {
					ks := []string{keyName(z.Uint64()), keyName(z.Uint64()), keyName(z.Uint64())}
					vals, err := rdb.MGet(ctx, ks...).Result()
					if err != nil || len(vals) != 3 {
						t.Errorf("MGET %v: %v %v", ks, vals, err)
						return
					}
					for j, k := range ks {
						if vals[j] != wantValue(k) {
							t.Errorf("MGET %s = %v", k, vals[j])
						}
						count(k)
					}
					continue
				}
				k := keyName(z.Uint64())
				if v, err := rdb.Get(ctx, k).Result(); err != nil || v != wantValue(k) {
					t.Errorf("GET %s = %q, %v", k, v, err)
					return
				}
				count(k)
			}
			mu.Lock()
			hot += h
			cold += c
			mu.Unlock()
		})
	}
	wg.Wait()
	return hot, cold
}

func wantValue(k string) string {
	if k == "item:hot" {
		return "v0"
	}
	return "c" + k
}

// TestEndToEnd: a cache server, a channel server, hot events published
// exactly as the daemon publishes them for the cache server's address, and
// an application reading a Zipf mix through go-redis with the shim
// installed. Every count comes from Redis (INFO stats and commandstats).
func TestEndToEnd(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{})
	ctx := context.Background()
	p := e.plain.Pipeline()
	for i := range uint64(nKeys) {
		p.Set(ctx, keyName(i), wantValue(keyName(i)), 0)
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}

	// Before the key is hot nothing is served locally.
	resetStats(t, e.plain)
	hot, cold := zipfReads(t, e.app, 2, 200*time.Millisecond)
	if n := infoStat(t, e.plain, "keyspace_hits"); n != hot+cold {
		t.Fatalf("before hot: Redis saw %d key reads, the application made %d", n, hot+cold)
	}

	e.makeHot(t, "item:hot")
	eventually(t, "tracking", func() bool { return e.shim.Stats().Tracking })
	resetStats(t, e.plain)
	hot, cold = zipfReads(t, e.app, 4, time.Second)
	served := infoStat(t, e.plain, "keyspace_hits")
	// Cold keys all reach Redis, so what Redis saw beyond them is item:hot.
	hotAtRedis := served - cold
	local := 1 - float64(hotAtRedis)/float64(hot)
	t.Logf("zipf: item:hot read %d times, %d at Redis (%.2f%% local); %d cold key reads; Redis key reads %d, cmdstat_get %d, cmdstat_mget %d",
		hot, hotAtRedis, 100*local, cold, served, calls(t, e.plain, "get"), calls(t, e.plain, "mget"))
	if hotAtRedis < 0 {
		t.Fatalf("Redis saw %d key reads, fewer than the %d cold reads: cold keys were served locally", served, cold)
	}
	if local < 0.90 {
		t.Errorf("only %.1f%% of item:hot reads served locally", 100*local)
	}

	// Cold keys are untouched: each read reaches Redis.
	resetStats(t, e.plain)
	for i := range uint64(200) {
		e.app.Get(ctx, keyName(1+i%50))
	}
	if n := calls(t, e.plain, "get"); n != 200 {
		t.Errorf("cold keys: %d of 200 GETs reached Redis", n)
	}

	bound := 50*time.Millisecond + 100*time.Millisecond // LocalTTL + StaleGrace defaults
	t.Run("write-same-client", func(t *testing.T) {
		stale := writeAndWatch(t, e.app, "v1", func() { e.app.Set(ctx, "item:hot", "v1", 0) })
		if stale > 0 {
			t.Errorf("a read started %v after the write returned saw the old value (bound: 0)", stale)
		}
	})
	t.Run("write-other-client-tracking", func(t *testing.T) {
		stale := writeAndWatch(t, e.app, "v2", func() { e.plain.Set(ctx, "item:hot", "v2", 0) })
		t.Logf("last stale read started %v after the write (bound %v)", stale, bound)
		if stale > bound {
			t.Errorf("stale %v past the write, bound %v", stale, bound)
		}
	})
	t.Run("write-other-client-event-only", func(t *testing.T) {
		// Without server-assisted invalidation: the daemon's invalidate
		// event, and the local expiry.
		e2 := newShimEnv(t, client.ShimOptions{DisableTracking: true})
		e2.plain.Set(ctx, "item:hot", "v0", 0)
		e2.makeHot(t, "item:hot")
		stale := writeAndWatch(t, e2.app, "v3", func() {
			e2.plain.Set(ctx, "item:hot", "v3", 0)
			e2.emit(event.TypeInvalidate, "item:hot")
		})
		t.Logf("last stale read started %v after the write (bound %v)", stale, bound)
		if stale > bound {
			t.Errorf("stale %v past the write, bound %v", stale, bound)
		}
		// Nothing tells the shim: the local expiry alone bounds it.
		stale = writeAndWatch(t, e2.app, "v4", func() { e2.plain.Set(ctx, "item:hot", "v4", 0) })
		t.Logf("expiry only: last stale read started %v after the write (bound %v)", stale, bound)
		if stale > bound {
			t.Errorf("expiry only: stale %v past the write, bound %v", stale, bound)
		}
	})

	e.emit(event.TypeCold, "item:hot")
	eventually(t, "cold", func() bool { return e.shim.Stats().HotKeys == 0 })
	resetStats(t, e.plain)
	for range 200 {
		e.app.Get(ctx, "item:hot")
	}
	if n := calls(t, e.plain, "get"); n != 200 {
		t.Errorf("after cold: %d of 200 GETs of item:hot reached Redis", n)
	}
}

// writeAndWatch keeps readers reading item:hot, runs write, and returns how
// long after write returned the last read that saw another value than want
// started (0: none did).
func writeAndWatch(t *testing.T, rdb *redis.Client, want string, write func()) time.Duration {
	t.Helper()
	ctx := context.Background()
	// Warm: the key is admitted and cached.
	for range 3 {
		rdb.Get(ctx, "item:hot")
	}
	type read struct {
		start time.Time
		val   string
	}
	stop := make(chan struct{})
	var mu sync.Mutex
	var reads []read
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			var mine []read
			for {
				select {
				case <-stop:
					mu.Lock()
					reads = append(reads, mine...)
					mu.Unlock()
					return
				default:
				}
				start := time.Now()
				v := rdb.Get(ctx, "item:hot").Val()
				if len(mine) < 1<<20 {
					mine = append(mine, read{start, v})
				}
				runtime.Gosched()
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	write()
	done := time.Now()
	time.Sleep(400 * time.Millisecond)
	close(stop)
	wg.Wait()
	var last time.Duration
	n := 0
	for _, r := range reads {
		if r.start.After(done) {
			n++
			if r.val != want {
				last = max(last, r.start.Sub(done))
			}
		}
	}
	if n == 0 {
		t.Fatal("no reads after the write")
	}
	return last
}
