package shimtest

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client"
	"github.com/hotsniff/hotsniff/client/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/redis/go-redis/v9"
)

// forgeHotSet writes a snapshot declaring n keys hot (manual entries, no
// expiry) at server: what a daemon with a large hot set, or anyone who may
// write the channel's snapshot key, can publish.
func forgeHotSet(t testing.TB, chc redis.UniversalClient, channel, server string, n int) []string {
	t.Helper()
	snap := event.Snapshot{V: 1, Seq: 1, TS: time.Now().UTC().Format(event.TSFormat), Node: "forger"}
	keys := make([]string, n)
	for i := range n {
		keys[i] = fmt.Sprintf("hot:%06d", i)
		snap.Keys = append(snap.Keys, &event.Event{V: 1, Seq: 1, Type: event.TypeHot, Proto: "redis", Server: server,
			NS: "0", Key: []byte(keys[i]), TS: time.Now(), Source: event.SourceManual, Node: "manual@forger"})
	}
	b, err := json.Marshal(&snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := chc.Set(context.Background(), client.SnapshotKey(channel), b, 0).Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// serverCostEnv is a cache server with, optionally, one shim whose hot set
// has n keys, every one of them read twice so that as many as the cache
// holds are admitted (and would be tracked).
func serverCostEnv(t testing.TB, n int, opt client.ShimOptions) (*testutil.Redis, *redis.Client, *client.Shim) {
	t.Helper()
	testutil.Need(t, "redis-server")
	cache := testutil.StartRedis(t)
	plain := redis.NewClient(&redis.Options{Addr: cache.Addr})
	t.Cleanup(func() { plain.Close() })
	if n == 0 {
		return cache, plain, nil
	}
	chanSrv := testutil.StartRedis(t)
	chc := dial(t, chanSrv.Addr)
	keys := forgeHotSet(t, chc, "hk", cache.Addr, n)
	app := redis.NewClient(&redis.Options{Addr: cache.Addr, PoolSize: 8})
	t.Cleanup(func() { app.Close() })
	if opt.Logger == nil {
		opt.Logger = quiet
	}
	sh := installShim(t, app, chc, opt)
	eventually(t, "hot set loaded", func() bool { return sh.Stats().HotKeys == n })
	ctx := context.Background()
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(keys)); i = next.Add(1) - 1 {
				app.Get(ctx, keys[i])
				app.Get(ctx, keys[i])
			}
		})
	}
	wg.Wait()
	eventually(t, "tracking established", func() bool { return sh.Stats().Tracking })
	return cache, plain, sh
}

// trackingInfo reads the server's tracking counters (INFO stats).
func trackingInfo(t testing.TB, rdb *redis.Client) (keys, prefixes int) {
	t.Helper()
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "tracking_total_keys:"); ok {
			keys, _ = strconv.Atoi(v)
		}
		if v, ok := strings.CutPrefix(line, "tracking_total_prefixes:"); ok {
			prefixes, _ = strconv.Atoi(v)
		}
	}
	return keys, prefixes
}

// TestTrackingBounded: with 40,000 keys published hot and every one read,
// the server tracks at most MaxTrackedKeys keys for the shim and registers
// no prefix at all (a BCAST prefix costs the server a scan on every write,
// by any client, to any key), and the shim's cache holds at most
// MaxEntries keys.
func TestTrackingBounded(t *testing.T) {
	_, plain, sh := serverCostEnv(t, 40000, client.ShimOptions{LocalTTL: time.Minute, MaxTrackedKeys: 300})
	eventually(t, "keys registered", func() bool { k, _ := trackingInfo(t, plain); return k >= 300 })
	time.Sleep(300 * time.Millisecond) // any late registration would show now
	keys, prefixes := trackingInfo(t, plain)
	st := sh.Stats()
	t.Logf("hot keys %d, cached %d, tracked at the server %d, prefixes %d", st.HotKeys, st.Entries, keys, prefixes)
	if prefixes != 0 {
		t.Errorf("%d BCAST prefixes registered, want none", prefixes)
	}
	if keys > 300 {
		t.Errorf("the server tracks %d keys, cap 300", keys)
	}
	if st.Entries > 10000 {
		t.Errorf("%d cached keys, MaxEntries 10000", st.Entries)
	}
	// The tracked keys still get their invalidations: write every hot key.
	ctx := context.Background()
	before := sh.Stats().Invalidations["tracking"]
	p := plain.Pipeline()
	for i := range 40000 {
		p.Set(ctx, fmt.Sprintf("hot:%06d", i), "w", 0)
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "tracking invalidations", func() bool { return sh.Stats().Invalidations["tracking"] > before })
}

// BenchmarkServerSET: the cache server's SET rate from one client (one
// connection, one SET at a time, like redis-benchmark -c 1), with no shim
// and with one shim installed whose hot set is 1,024 keys (the daemon's
// default --max-hot) or 40,000 forged ones, every hot key read (so as many
// as fit are cached). Another client PINGs every millisecond meanwhile;
// max-ping-ms is its slowest answer; server-us/set is the server's own time
// per SET (INFO commandstats), which the client's scheduling does not blur.
// Compare side by side:
//
//	go test ./client -run '^$' -bench BenchmarkServerSET -benchtime 50000x -count 3
func BenchmarkServerSET(b *testing.B) {
	for _, n := range []int{0, 1024, 40000} {
		name := "no-shim"
		if n > 0 {
			name = fmt.Sprintf("shim-%d-hot", n)
		}
		b.Run(name, func(b *testing.B) {
			cache, plain, sh := serverCostEnv(b, n, client.ShimOptions{LocalTTL: time.Minute})
			if sh != nil {
				time.Sleep(500 * time.Millisecond) // registrations done
			}
			ctx := context.Background()
			w := redis.NewClient(&redis.Options{Addr: cache.Addr, PoolSize: 1})
			defer w.Close()
			w.Ping(ctx)
			stop := make(chan struct{})
			var maxPing atomic.Int64
			var wg sync.WaitGroup
			wg.Go(func() {
				p := redis.NewClient(&redis.Options{Addr: cache.Addr, PoolSize: 1})
				defer p.Close()
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Millisecond):
					}
					start := time.Now()
					p.Ping(ctx)
					if d := int64(time.Since(start)); d > maxPing.Load() {
						maxPing.Store(d)
					}
				}
			})
			plain.ConfigResetStat(ctx)
			b.ResetTimer()
			for i := range b.N {
				w.Set(ctx, "other:"+strconv.Itoa(i&0xffff), "v", 0)
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			keys, prefixes := trackingInfo(b, plain)
			b.ReportMetric(setUsecPerCall(b, plain), "server-us/set")
			b.ReportMetric(float64(maxPing.Load())/1e6, "max-ping-ms")
			b.ReportMetric(float64(keys), "tracked-keys")
			b.ReportMetric(float64(prefixes), "prefixes")
		})
	}
}

// setUsecPerCall is the server's mean time per SET since the last reset.
func setUsecPerCall(t testing.TB, rdb *redis.Client) float64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_set:"); ok {
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
					x, _ := strconv.ParseFloat(v, 64)
					return x
				}
			}
		}
	}
	return 0
}
