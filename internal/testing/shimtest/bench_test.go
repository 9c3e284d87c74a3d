package shimtest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/redis/go-redis/v9"
)

// noopHook passes everything on: a plain go-redis call with a hook.
type noopHook struct{}

func (noopHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (noopHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (noopHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// answerHook answers every GET itself: what go-redis allocates for the
// command alone (NewStringCmd, its args), with no network.
type answerHook struct{ noopHook }

func (answerHook) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		cmd.(*redis.StringCmd).SetVal("v")
		return nil
	}
}

func warmHot(b *testing.B, opt client.ShimOptions) *shimEnv {
	b.Helper()
	e := newShimEnv(b, opt)
	ctx := context.Background()
	e.plain.Set(ctx, "item:hot", "v", 0)
	e.makeHot(b, "item:hot")
	for range 3 {
		e.app.Get(ctx, "item:hot")
	}
	return e
}

// BenchmarkGet compares the cost of a GET: served by the shim, answered by
// a hook without network (go-redis's own allocations for the command), and
// sent to Redis with a no-op hook.
func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	b.Run("shim-hit", func(b *testing.B) {
		e := warmHot(b, client.ShimOptions{LocalTTL: time.Hour})
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if e.app.Get(ctx, "item:hot").Val() != "v" {
				b.Fatal("miss")
			}
		}
		b.StopTimer()
		if st := e.shim.Stats(); st.Misses > 3 {
			b.Fatalf("stats %+v", st)
		}
	})
	b.Run("go-redis-no-network", func(b *testing.B) {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", Dialer: func(context.Context, string, string) (net.Conn, error) {
			b.Fatal("dialed")
			return nil, nil
		}})
		defer rdb.Close()
		rdb.AddHook(answerHook{})
		b.ReportAllocs()
		for b.Loop() {
			rdb.Get(ctx, "item:hot")
		}
	})
	b.Run("go-redis-noop-hook", func(b *testing.B) {
		e := warmHot(b, client.ShimOptions{})
		rdb := redis.NewClient(&redis.Options{Addr: e.cache.Addr})
		defer rdb.Close()
		rdb.AddHook(noopHook{})
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			rdb.Get(ctx, "item:hot")
		}
	})
}

// BenchmarkHotKeyRead is the throughput of a hot-key read loop against a
// real redis-server, with the shim (default 50ms local expiry, so Redis is
// still read every 50ms) and without.
func BenchmarkHotKeyRead(b *testing.B) {
	ctx := context.Background()
	b.Run("with-shim", func(b *testing.B) {
		e := warmHot(b, client.ShimOptions{})
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if e.app.Get(ctx, "item:hot").Val() != "v" {
				b.Fatal("wrong value")
			}
		}
	})
	b.Run("without", func(b *testing.B) {
		e := warmHot(b, client.ShimOptions{})
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if e.plain.Get(ctx, "item:hot").Val() != "v" {
				b.Fatal("wrong value")
			}
		}
	})
}

// BenchmarkHitPath is the cost of a hot-key GET served from memory through
// a Client and through a ClusterClient, each beside go-redis answering the
// same GET in a hook with no network (what go-redis itself allocates for
// the command): the difference is the shim's own cost.
func BenchmarkHitPath(b *testing.B) {
	ctx := context.Background()
	b.Run("client/shim-hit", func(b *testing.B) {
		e := warmHot(b, client.ShimOptions{LocalTTL: time.Hour})
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if e.app.Get(ctx, "item:hot").Val() != "v" {
				b.Fatal("miss")
			}
		}
	})
	b.Run("client/go-redis-csc-hit", func(b *testing.B) {
		// go-redis's own client-side cache (RESP3) answering the same GET.
		srv := testutil.StartRedis(b)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 3, ClientSideCacheConfig: &redis.ClientSideCacheConfig{MaxEntries: 1000}})
		defer rdb.Close()
		rdb.Set(ctx, "item:hot", "v", 0)
		for range 3 {
			rdb.Get(ctx, "item:hot")
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if rdb.Get(ctx, "item:hot").Val() != "v" {
				b.Fatal("miss")
			}
		}
		b.StopTimer()
		if st := rdb.CSCStats(); st.Hits < uint64(b.N) {
			b.Fatalf("csc stats %+v", st)
		}
	})
	b.Run("client/go-redis-no-network", func(b *testing.B) {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
		defer rdb.Close()
		rdb.AddHook(answerHook{})
		b.ReportAllocs()
		for b.Loop() {
			rdb.Get(ctx, "item:hot")
		}
	})
	b.Run("cluster/shim-hit", func(b *testing.B) {
		cl := testutil.StartCluster(b, 3)
		newCC := func() *redis.ClusterClient { return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs[:1]}) }
		e := newMultiEnv(b, newCC(), newCC(), cl.Addrs, client.ShimOptions{LocalTTL: time.Hour})
		slot, _ := testutil.KeySlot(ctx, cl.Addrs[0], "item:hot")
		owner, err := testutil.SlotOwner(ctx, cl.Addrs[0], slot)
		if err != nil {
			b.Fatal(err)
		}
		e.plain.Set(ctx, "item:hot", "v", 0)
		e.emit("hot", owner, "item:hot")
		eventually(b, "hot", func() bool { return e.shim.Stats().HotMode })
		// The concrete type, as an application holds it (a call through
		// the interface boxes the key: one more allocation, go-redis's).
		app := e.app.(*redis.ClusterClient)
		for range 3 {
			app.Get(ctx, "item:hot")
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if app.Get(ctx, "item:hot").Val() != "v" {
				b.Fatal("miss")
			}
		}
		b.StopTimer()
		if st := e.shim.Stats(); st.Misses > 3 {
			b.Fatalf("stats %+v", st)
		}
	})
	b.Run("cluster/go-redis-no-network", func(b *testing.B) {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
		defer rdb.Close()
		rdb.AddHook(answerHook{})
		b.ReportAllocs()
		for b.Loop() {
			rdb.Get(ctx, "item:hot")
		}
	})
	b.Run("client/pipelined-2-hits", func(b *testing.B) {
		e := warmHot(b, client.ShimOptions{LocalTTL: time.Hour})
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			cmds, err := e.app.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Get(ctx, "item:hot")
				p.Get(ctx, "item:hot")
				return nil
			})
			if err != nil || cmds[1].(*redis.StringCmd).Val() != "v" {
				b.Fatal("miss")
			}
		}
	})
}
