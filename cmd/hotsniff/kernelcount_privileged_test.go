package main

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
	"github.com/hotsniff/hotsniff/internal/testing/promcheck"
	"github.com/redis/go-redis/v9"
)

// TestRunKernelCountPrivileged: the daemon with --kernel-count finds a hot
// key that redis-benchmark reads beside random keys, while the cold
// requests stay in the kernel: it decodes far fewer GETs than were sent.
func TestRunKernelCountPrivileged(t *testing.T) {
	netnstest.RequireRoot(t)
	netnstest.Need(t, "redis-benchmark")
	p := netnstest.NewPair(t)
	cache := p.StartRedis(t, 6379)
	d := startDaemon(t, p, "--capture", "tc", "--port", "redis=6379", "--hot-qps", "2000", "--kernel-count")
	// The hot key is read in rounds until it is reported: a daemon starved
	// on a busy machine may read a round's counts too late, and late
	// counts are a counted loss, not evidence.
	const hotRound, coldN = 100000, 100000
	var found atomic.Bool
	hotN := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for deadline := time.Now().Add(20 * time.Second); hotN < 3*hotRound || !found.Load() && time.Now().Before(deadline); hotN += hotRound {
			netnstest.RedisBenchmarkKey(t, cache, hotRound, 16)
		}
	}()
	netnstest.RedisBenchmark(t, cache, coldN, 16, 100000)
	for deadline := time.Now().Add(25 * time.Second); !found.Load() && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if e, ok := d.hotkey(t, "key:__rand_int__"); ok {
			found.Store(true)
			t.Logf("hot: %+v", e)
		}
	}
	<-done
	if !found.Load() {
		_, ok := d.hotkey(t, "key:__rand_int__")
		found.Store(ok)
	}
	if !found.Load() {
		t.Fatalf("key:__rand_int__ never hot with --kernel-count\n%s", d.log())
	}
	// The kernel's counters reach the metrics once a second, and a daemon
	// at nice 10 on a busy machine may be further behind: wait until they
	// account for what was sent (or give up and report what they say).
	body, m := d.scrape(t)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if m[`hotsniff_kernel_counted_total{what="requests"}`]+m[`hotsniff_requests_total{op="GET",proto="redis"}`] >= float64(hotN+coldN) {
			break
		}
		body, m = d.scrape(t)
	}
	promcheck.Check(t, body)
	for _, r := range []string{"split", "midstream", "unknown"} {
		if _, ok := m[`hotsniff_kernel_fallback_total{reason="`+r+`"}`]; !ok {
			t.Errorf("no hotsniff_kernel_fallback_total{reason=%q}", r)
		}
	}
	if _, ok := m["hotsniff_detect_cold_held_total"]; !ok {
		t.Error("no hotsniff_detect_cold_held_total")
	}
	gets := m[`hotsniff_requests_total{op="GET",proto="redis"}`]
	t.Logf("GETs decoded in user space: %v of %d sent", gets, hotN+coldN)
	if gets >= float64(hotN+coldN) {
		t.Errorf("every GET was decoded in user space: kernel counting did not keep any")
	}
	// Every GET was counted by the programs or decoded here (a located
	// one both): the metrics account for all of them.
	kreq := m[`hotsniff_kernel_counted_total{what="requests"}`]
	if kreq == 0 || kreq+gets < float64(hotN+coldN) {
		t.Errorf("requests counted in the kernel %v + GETs decoded %v, want > 0 and at least the %d sent", kreq, gets, hotN+coldN)
	}
	for _, e := range d.hotkeys(t) {
		if string(e.Key) != "key:__rand_int__" {
			t.Errorf("a random key reported hot: %+v", e)
		}
	}
	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, d.log())
	}
}

// TestRunKernelCountPooled: connections a client opened before the daemon
// started (a pool) are joined mid-stream. With --kernel-count replies are
// not copied, so nothing of the server's would confirm those connections'
// requests in user space, which holds them until something does: the
// programs copy one reply header after each request segment they copy of
// such a connection. A key read only over two pooled connections is
// reported hot, and none of their requests is rejected as unconfirmed.
func TestRunKernelCountPooled(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	cache := p.StartRedis(t, 6379)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: cache.String(), PoolSize: 2, MinIdleConns: 2, ConnMaxIdleTime: -1})
	defer rdb.Close()
	// Both connections open before the daemon: two taken from the pool at
	// once (a Ping each returns its connection at once, so two Pings from
	// two goroutines could share one: it failed so in a CI run), then
	// given back.
	var conns []*redis.Conn
	for range 2 {
		c := rdb.Conn()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	var wg sync.WaitGroup
	if st := rdb.PoolStats(); st.TotalConns != 2 {
		t.Fatalf("pool holds %d connections, want 2", st.TotalConns)
	}
	d := startDaemon(t, p, "--capture", "tc", "--port", "redis=6379", "--hot-qps", "500", "--kernel-count")
	var reads atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := rdb.Get(ctx, "pooled:hot").Err(); err != nil && err != redis.Nil && ctx.Err() == nil {
					t.Errorf("GET: %v", err)
					return
				}
				reads.Add(1)
			}
		}()
	}
	var found bool
	for deadline := time.Now().Add(20 * time.Second); !found && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		_, found = d.hotkey(t, "pooled:hot")
	}
	cancel()
	wg.Wait()
	if st := rdb.PoolStats(); st.TotalConns != 2 || st.Misses != 0 {
		t.Errorf("pool stats %+v: the reads did not stay on the two pooled connections", st)
	}
	_, m := d.scrape(t)
	t.Logf("%d reads over 2 pooled connections; unconfirmed rejections %v, midstream fallbacks %v", reads.Load(),
		m[`hotsniff_stream_rejected_total{reason="unconfirmed"}`], m[`hotsniff_kernel_fallback_total{reason="midstream"}`])
	if !found {
		t.Fatalf("pooled:hot, read %d times over connections open before the daemon, never hot\n%s", reads.Load(), d.log())
	}
	if v := m[`hotsniff_stream_rejected_total{reason="unconfirmed"}`]; v != 0 {
		t.Errorf("%v request segments rejected as unconfirmed", v)
	}
	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, d.log())
	}
}
