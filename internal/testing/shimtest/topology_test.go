package shimtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client"
	"github.com/hotsniff/hotsniff/client/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
	"github.com/redis/go-redis/v9"
)

// multiEnv is a shim on any go-redis client kind, a publisher on its own
// channel server, and a way to count commands at every cache server.
type multiEnv struct {
	app     redis.UniversalClient
	plain   redis.UniversalClient
	shim    *client.Shim
	pub     *publish.Publisher
	servers []string // every cache server, for counting
}

func newMultiEnv(t testing.TB, app, plain redis.UniversalClient, servers []string, opt client.ShimOptions) *multiEnv {
	t.Helper()
	chanSrv := testutil.StartRedis(t)
	chc := dial(t, chanSrv.Addr)
	pub, err := publish.New(chc, publish.Options{Channel: "hk", Node: "sniffer-1", Logger: quiet, SnapshotInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close(context.Background()) })
	t.Cleanup(func() { app.Close(); plain.Close() })
	opt.Logger = quiet
	sh := installShim(t, app, chc, opt)
	return &multiEnv{app: app, plain: plain, shim: sh, pub: pub, servers: servers}
}

func (e *multiEnv) emit(typ, server, key string) {
	e.pub.Emit(&event.Event{Type: typ, Proto: "redis", Server: server, NS: "0", Key: []byte(key),
		QPS: 1500, TTLms: 60000, TS: time.Now(), Source: event.SourceDetected})
}

// calls sums INFO commandstats calls of cmd over every server.
func (e *multiEnv) calls(t testing.TB, cmd string) int {
	n := 0
	for _, a := range e.servers {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		n += calls(t, rdb, cmd)
		rdb.Close()
	}
	return n
}

func (e *multiEnv) resetStats(t testing.TB) {
	for _, a := range e.servers {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		resetStats(t, rdb)
		rdb.Close()
	}
}

// TestClusterClient: one Install on a ClusterClient. Events about the
// node serving a key apply, events about a server outside the cluster do
// not; hot reads are served locally (single, MGET within a slot, pipelined);
// a cross-slot MGET gets the same answer as without the shim; Watch reads
// Redis; tracking runs on every master; after the key's slot moves, a
// write at the new owner is seen at once.
func TestClusterClient(t *testing.T) {
	cl := testutil.StartCluster(t, 3)
	ctx := context.Background()
	newCC := func() *redis.ClusterClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs[:1]})
	}
	e := newMultiEnv(t, newCC(), newCC(), cl.Addrs, client.ShimOptions{LocalTTL: time.Minute})
	app, plain := e.app.(*redis.ClusterClient), e.plain.(*redis.ClusterClient)
	const hk = "hot{a}"
	slot, err := testutil.KeySlot(ctx, cl.Addrs[0], hk)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := testutil.SlotOwner(ctx, cl.Addrs[0], slot)
	if err != nil {
		t.Fatal(err)
	}
	plain.Set(ctx, hk, "v0", 0)
	plain.Set(ctx, "other{a}", "o", 0)
	plain.Set(ctx, "elsewhere{b}", "x", 0)
	e.emit(event.TypeHot, "10.9.9.9:6379", "foreign")
	e.emit(event.TypeHot, owner, hk)
	eventually(t, "hot", func() bool { st := e.shim.Stats(); return st.HotKeys == 1 && st.HotMode })
	eventually(t, "tracking on every master", func() bool { return e.shim.Stats().Tracking })
	for range 3 {
		app.Get(ctx, hk)
	}
	e.resetStats(t)
	for range 100 {
		if v := app.Get(ctx, hk).Val(); v != "v0" {
			t.Fatalf("GET = %q", v)
		}
	}
	if n := e.calls(t, "get"); n != 0 {
		t.Errorf("%d of 100 hot GETs reached the cluster, want 0", n)
	}

	// MGET within one slot: the hot member local, the other sent.
	vals, err := app.MGet(ctx, hk, "other{a}").Result()
	if err != nil || !reflect.DeepEqual(vals, []any{"v0", "o"}) {
		t.Errorf("MGET same slot = %v, %v", vals, err)
	}
	// Across slots: whatever go-redis answers without the shim.
	want, wantErr := plain.MGet(ctx, hk, "elsewhere{b}").Result()
	got, gotErr := app.MGet(ctx, hk, "elsewhere{b}").Result()
	t.Logf("cross-slot MGET without the shim: %v %v", want, wantErr)
	if !reflect.DeepEqual(got, want) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Errorf("cross-slot MGET: got %v %v, want %v %v", got, gotErr, want, wantErr)
	}
	// Pipelined: hot member local.
	e.resetStats(t)
	cmds, err := app.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, hk)
		p.Get(ctx, "elsewhere{b}")
		return nil
	})
	if err != nil || cmds[0].(*redis.StringCmd).Val() != "v0" || cmds[1].(*redis.StringCmd).Val() != "x" {
		t.Errorf("pipelined: %v %v", cmds, err)
	}
	if n := e.calls(t, "get"); n != 1 {
		t.Errorf("pipelined: %d GETs reached the cluster, want 1", n)
	}

	// Watch reads Redis, never memory.
	err = app.Watch(ctx, func(tx *redis.Tx) error {
		plain.Set(ctx, hk, "v1", 0) // after WATCH: EXEC must fail
		v, err := tx.Get(ctx, hk).Result()
		if err != nil {
			return err
		}
		if v != "v1" {
			t.Errorf("GET under WATCH = %q, want v1 from Redis", v)
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Set(ctx, hk, v+"+", 0); return nil })
		return err
	}, hk)
	if !errors.Is(err, redis.TxFailedErr) {
		t.Errorf("Watch after another client's write: %v, want TxFailedErr", err)
	}

	// Reshard the slot to another master; a write there is seen at once
	// (tracking runs on every master), long before the minute of LocalTTL.
	for range 3 {
		app.Get(ctx, hk)
	}
	var dst string
	for _, a := range cl.Addrs {
		if a != owner {
			dst = a
			break
		}
	}
	if err := testutil.MoveSlot(ctx, slot, owner, dst, cl.Addrs); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		app.Get(ctx, hk)
	}
	plain.Set(ctx, hk, "v2", 0)
	eventually(t, "the write at the new owner", func() bool { return app.Get(ctx, hk).Val() == "v2" })
	e.emit(event.TypeHot, dst, hk)
	if n := e.shim.Stats().FetchErrors; n != 0 {
		t.Errorf("%d fetch errors", n)
	}
}

// TestRingClient: one Install on a Ring; events about any shard apply, and
// a key is served from memory whichever shard holds it.
func TestRingClient(t *testing.T) {
	a, b := testutil.StartRedis(t), testutil.StartRedis(t)
	newRing := func() *redis.Ring {
		return redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
	}
	e := newMultiEnv(t, newRing(), newRing(), []string{a.Addr, b.Addr}, client.ShimOptions{LocalTTL: time.Minute})
	ctx := context.Background()
	var keys []string
	for i := range 8 {
		k := "rk" + strconv.Itoa(i)
		keys = append(keys, k)
		e.plain.Set(ctx, k, k, 0)
	}
	// Each key is reported by the shard that holds it.
	for _, k := range keys {
		srv := a.Addr
		if n, _ := redis.NewClient(&redis.Options{Addr: b.Addr}).Exists(ctx, k).Result(); n == 1 {
			srv = b.Addr
		}
		e.emit(event.TypeHot, srv, k)
	}
	eventually(t, "hot", func() bool { return e.shim.Stats().HotKeys == len(keys) })
	for range 3 {
		for _, k := range keys {
			e.app.Get(ctx, k)
		}
	}
	e.resetStats(t)
	for _, k := range keys {
		if v := e.app.Get(ctx, k).Val(); v != k {
			t.Errorf("GET %s = %q", k, v)
		}
	}
	if n := e.calls(t, "get"); n != 0 {
		t.Errorf("%d hot GETs reached the shards, want 0", n)
	}
	eventually(t, "tracking on both shards", func() bool { return e.shim.Stats().Tracking })
	e.plain.Set(ctx, keys[0], "new", 0)
	eventually(t, "foreign write seen", func() bool { return e.app.Get(ctx, keys[0]).Val() == "new" })
	// Each key is registered at its own shard only: at the other, the
	// registration would read it as missing and drop the value cached (8
	// invalidations, one per key). The foreign write's key accounts for
	// at most 2: its invalidation, and its registration again if a fetch
	// began while it was sent.
	if n := e.shim.Stats().Invalidations["tracking"]; n > 2 {
		t.Errorf("%d tracking invalidations, want at most 2 (the foreign write)", n)
	}
}

// TestFailoverClient: one Install on a sentinel-managed failover client,
// whose Options().Addr is a placeholder: the master's address is learnt
// from the connections go-redis dials, so the events about it apply.
func TestFailoverClient(t *testing.T) {
	testutil.Need(t, "redis-server")
	master := testutil.StartRedis(t)
	port := testutil.FreePort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("port %d\nbind 127.0.0.1\nsentinel monitor mymaster 127.0.0.1 %d 1\n", port, master.Port)), 0o644)
	cmd := exec.Command("redis-server", conf, "--sentinel")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sentinel := "127.0.0.1:" + strconv.Itoa(port)
	eventually(t, "sentinel up", func() bool { return testutil.RedisUp(sentinel) })
	newFC := func() *redis.Client {
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{sentinel}})
	}
	e := newMultiEnv(t, newFC(), newFC(), []string{master.Addr}, client.ShimOptions{LocalTTL: time.Minute})
	ctx := context.Background()
	if err := e.plain.Set(ctx, "fk", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	e.app.Ping(ctx) // a first connection: its peer is the master
	e.emit(event.TypeHot, master.Addr, "fk")
	eventually(t, "hot", func() bool { return e.shim.Stats().HotKeys == 1 })
	// Tracked first: the tracker dials through the failover client on its
	// own, and a registration that lands after the warm-up below drops the
	// value fetched before it (a write there may have been missed), so one
	// measured read went to the master (1 run in 30).
	eventually(t, "tracking through the failover dialer", func() bool { return e.shim.Stats().Tracking })
	for range 3 {
		e.app.Get(ctx, "fk")
	}
	e.resetStats(t)
	for range 10 {
		if v := e.app.Get(ctx, "fk").Val(); v != "v" {
			t.Fatalf("GET = %q", v)
		}
	}
	if n := e.calls(t, "get"); n != 0 {
		t.Errorf("%d hot GETs reached the master, want 0", n)
	}
	e.plain.Set(ctx, "fk", "w", 0)
	eventually(t, "foreign write seen", func() bool { return e.app.Get(ctx, "fk").Val() == "w" })
}

// TestUniversalClient: NewUniversalClient's result installs whatever it
// is (a cluster client here: several addresses).
func TestUniversalClient(t *testing.T) {
	cl := testutil.StartCluster(t, 3)
	u := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: cl.Addrs, IsClusterMode: true})
	sh, err := client.Install(u, client.ShimOptions{ChannelClient: dial(t, testutil.StartRedis(t).Addr), Channel: "hk", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	sh.Close()
	u.Close()
	if _, err := client.Install(&redis.AutoPipeliner{}, client.ShimOptions{}); err == nil {
		t.Error("Install accepted an autopipeliner")
	}
}

// TestReadThenSameConnection: the shim's read-then-message pipeline (what
// the absorbed-demand report rides on) goes to the node holding the key,
// with the message right after the read on one connection, is never served
// from memory, and a slot that moved meanwhile costs the caller nothing.
func TestReadThenSameConnection(t *testing.T) {
	cl := testutil.StartCluster(t, 3)
	ctx := context.Background()
	newCC := func() *redis.ClusterClient { return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs[:1]}) }
	e := newMultiEnv(t, newCC(), newCC(), cl.Addrs, client.ShimOptions{LocalTTL: time.Minute, DisableTracking: true})
	const key = "rt{x}"
	slot, _ := testutil.KeySlot(ctx, cl.Addrs[0], key)
	owner, err := testutil.SlotOwner(ctx, cl.Addrs[0], slot)
	if err != nil {
		t.Fatal(err)
	}
	e.plain.Set(ctx, key, "v0", 0)
	e.emit(event.TypeHot, owner, key)
	eventually(t, "hot", func() bool { return e.shim.Stats().HotMode })
	for range 3 {
		e.app.Get(ctx, key)
	}
	e.plain.Set(ctx, key, "v1", 0) // the cache holds v0 (no tracking)
	e.resetStats(t)
	get, echo := redis.NewStringCmd(ctx, "get", key), redis.NewStringCmd(ctx, "echo", "after")
	if err := e.shim.ReadThen(ctx, e.plain, key, get, echo); err != nil || get.Val() != "v1" || echo.Val() != "after" {
		t.Fatalf("read then echo: %q %q %v", get.Val(), echo.Val(), err)
	}
	ownerRDB := redis.NewClient(&redis.Options{Addr: owner})
	defer ownerRDB.Close()
	if g, ec := calls(t, ownerRDB, "get"), calls(t, ownerRDB, "echo"); g != 1 || ec != 1 {
		t.Errorf("at the owner: %d GET, %d ECHO; want 1 and 1", g, ec)
	}
	// The slot moves; the client's slot map still names the old owner.
	var dst string
	for _, a := range cl.Addrs {
		if a != owner {
			dst = a
			break
		}
	}
	if err := testutil.MoveSlot(ctx, slot, owner, dst, cl.Addrs); err != nil {
		t.Fatal(err)
	}
	e.plain.Set(ctx, key, "v2", 0)
	get, echo = redis.NewStringCmd(ctx, "get", key), redis.NewStringCmd(ctx, "echo", "after")
	if err := e.shim.ReadThen(ctx, e.plain, key, get, echo); err != nil || get.Val() != "v2" {
		t.Fatalf("after the move: %q %v", get.Val(), err)
	}
}

// TestFailoverSwitch: a sentinel failover moves the master; the failover
// client's next connections go to the new master, whose events then apply
// (its address is learnt from those connections), reads stay correct, and
// a write at the new master is seen within the staleness bound.
func TestFailoverSwitch(t *testing.T) {
	ctx := context.Background()
	master := testutil.StartRedis(t)
	replica := testutil.StartRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	rr := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer rr.Close()
	eventually10s(t, "replica in sync", func() bool {
		info, _ := rr.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	port := testutil.FreePort(t)
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("port %d\nbind 127.0.0.1\nsentinel monitor mymaster 127.0.0.1 %d 1\nsentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 5000\n", port, master.Port)), 0o644)
	cmd := exec.Command("redis-server", conf, "--sentinel")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sentinel := "127.0.0.1:" + strconv.Itoa(port)
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	defer sc.Close()
	eventually10s(t, "sentinel knows the replica", func() bool {
		r, err := sc.Replicas(ctx, "mymaster").Result()
		return err == nil && len(r) == 1
	})
	newFC := func() *redis.Client {
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{sentinel}})
	}
	const ttl, grace = 100 * time.Millisecond, 100 * time.Millisecond
	e := newMultiEnv(t, newFC(), newFC(), []string{master.Addr, replica.Addr}, client.ShimOptions{LocalTTL: ttl, StaleGrace: grace})
	e.plain.Set(ctx, "fk", "v0", 0)
	e.app.Ping(ctx)
	e.emit(event.TypeHot, master.Addr, "fk")
	eventually(t, "hot at the first master", func() bool { return e.shim.Stats().HotKeys == 1 })
	for range 3 {
		e.app.Get(ctx, "fk")
	}
	if err := sc.Failover(ctx, "mymaster").Err(); err != nil {
		t.Fatal(err)
	}
	eventually10s(t, "the replica promoted", func() bool {
		a, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
		return err == nil && a[1] == strconv.Itoa(replica.Port)
	})
	// go-redis hears of the switch from the sentinel and moves its pool.
	eventually10s(t, "the client on the new master", func() bool {
		for range 5 {
			info, err := e.app.Info(ctx, "server").Result()
			if err != nil || !strings.Contains(info, "tcp_port:"+strconv.Itoa(replica.Port)+"\r\n") {
				return false
			}
		}
		return true
	})
	// The old master's detector goes quiet (cold); the new one reports it.
	e.emit(event.TypeCold, master.Addr, "fk")
	e.emit(event.TypeHot, replica.Addr, "fk")
	eventually(t, "the old master's cold and the new master's hot applied", func() bool {
		hs := e.shim.Subscriber().HotSet()
		return len(hs) == 1 && hs[0].Server == replica.Addr
	})
	// Right after a switch go-redis may still read the demoted master
	// (seen: a nil while it resyncs); whatever a refresh read, the shim
	// keeps it at most LocalTTL+StaleGrace. Wait for reads to settle.
	eventually10s(t, "reads settled on the new master", func() bool {
		for range 20 {
			if v, _ := e.app.Get(ctx, "fk").Result(); v != "v0" {
				return false
			}
		}
		return true
	})
	before := e.shim.Stats().Hits
	for range 10 {
		if v, err := e.app.Get(ctx, "fk").Result(); v != "v0" {
			t.Fatalf("GET after failover = %q, %v", v, err)
		}
	}
	if e.shim.Stats().Hits == before {
		t.Errorf("nothing served after the failover: the new master's events did not apply (servers %v, master %s, replica %s, stats %+v)", e.shim.Servers(), master.Addr, replica.Addr, e.shim.Stats())
	}
	if err := e.plain.Set(ctx, "fk", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	wrote := time.Now()
	for {
		start := time.Now()
		if e.app.Get(ctx, "fk").Val() == "v1" {
			break
		}
		// The bound is on when a read starts, not when it returns.
		if start.Sub(wrote) > ttl+grace {
			t.Fatalf("a read started %v after the write at the new master returned the old value", start.Sub(wrote))
		}
		time.Sleep(time.Millisecond)
	}
}

func eventually10s(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
