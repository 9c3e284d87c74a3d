package shimtest

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client"
	"github.com/hotsniff/hotsniff/client/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
	"github.com/redis/go-redis/v9"
)

// TestCompareGoRedisCSC runs one workload through four clients of one
// server: plain go-redis, the shim, go-redis's own client-side cache
// (RESP3, CLIENT TRACKING of every key read), and both. It reports, by the
// server's counters, the share of hot-key reads and of all reads kept off
// Redis, the memory each cache holds, and how long after another client's
// write to the hot key a reader still saw the old value. It checks the
// shim's own promises (local share, staleness bound) with and without the
// other cache below it; the rest is the comparison docs/client-shim.md
// quotes.
func TestCompareGoRedisCSC(t *testing.T) {
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer plain.Close()
	p := plain.Pipeline()
	for i := range uint64(nKeys) {
		p.Set(ctx, keyName(i), wantValue(keyName(i)), 0)
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	chanSrv := testutil.StartRedis(t)
	type config struct {
		name      string
		shim, csc bool
	}
	bound := 50*time.Millisecond + 100*time.Millisecond
	for _, c := range []config{{"go-redis", false, false}, {"shim", true, false}, {"go-redis-csc", false, true}, {"shim+csc", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			opt := &redis.Options{Addr: srv.Addr}
			if c.csc {
				opt.Protocol = 3
				opt.ClientSideCacheConfig = &redis.ClientSideCacheConfig{MaxEntries: 10000}
			}
			var m0 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			app := redis.NewClient(opt)
			defer app.Close()
			var sh *client.Shim
			if c.shim {
				var err error
				chc := dial(t, chanSrv.Addr)
				sh, err = client.Install(app, client.ShimOptions{ChannelClient: chc, Channel: "hk-" + c.name, Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				defer sh.Close()
				pub, err := publish.New(chc, publish.Options{Channel: "hk-" + c.name, Node: "n", Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				defer pub.Close(ctx)
				pub.Emit(&event.Event{Type: event.TypeHot, Proto: "redis", Server: srv.Addr, NS: "0", Key: []byte("item:hot"),
					QPS: 1500, TTLms: 60000, TS: time.Now(), Source: event.SourceDetected})
				eventually(t, "hot", func() bool { return sh.Stats().HotMode })
			}
			// Hot key alone: its share kept off Redis.
			resetStats(t, plain)
			hot, _ := hotReads(t, app, 2, 500*time.Millisecond)
			atRedis := calls(t, plain, "get")
			hotLocal := 1 - float64(atRedis)/float64(hot)
			// The Zipf mix: every key read, hot and cold.
			resetStats(t, plain)
			h, cold := zipfReads(t, app, 2, time.Second)
			allLocal := 1 - float64(infoStat(t, plain, "keyspace_hits")+infoStat(t, plain, "keyspace_misses"))/float64(h+cold)
			var m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m1)
			heap := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
			entries, cacheBytes := 0, int64(0)
			if c.csc {
				st := app.CSCStats()
				entries, cacheBytes = st.Entries, st.MemoryUsageBytes
			}
			if sh != nil {
				entries += sh.Stats().Entries
			}
			// Another client writes the hot key: how long do reads still
			// return the old value?
			stale := writeAndWatch(t, app, "w-"+c.name, func() { plain.Set(ctx, "item:hot", "w-"+c.name, 0) })
			plain.Set(ctx, "item:hot", "v0", 0)
			t.Logf("%-12s hot key %.2f%% local; all reads %.2f%% local; cached entries %d (CSC estimate %d B); heap +%d KiB; stale after a foreign write %v",
				c.name, 100*hotLocal, 100*allLocal, entries, cacheBytes, heap>>10, stale)
			if c.shim && c.csc {
				// The shim defers to go-redis's cache.
				if n := sh.Stats().Hits; n != 0 {
					t.Errorf("shim served %d reads beside go-redis's cache", n)
				}
			} else if c.shim {
				if hotLocal < 0.9 {
					t.Errorf("shim: hot key only %.1f%% local", 100*hotLocal)
				}
				if stale > bound {
					t.Errorf("shim: stale %v after a foreign write, bound %v", stale, bound)
				}
			}
		})
	}
}

// hotReads reads item:hot through rdb for d with g goroutines.
func hotReads(t *testing.T, rdb *redis.Client, g int, d time.Duration) (int, error) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(d)
	n := make(chan int, g)
	for range g {
		go func() {
			c := 0
			for time.Now().Before(deadline) {
				if v, err := rdb.Get(ctx, "item:hot").Result(); err != nil || v != "v0" {
					t.Errorf("GET item:hot = %q, %v", v, err)
					break
				}
				c++
			}
			n <- c
		}()
	}
	total := 0
	for range g {
		total += <-n
	}
	return total, nil
}
