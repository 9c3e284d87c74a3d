package shimtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client"
	"github.com/hotsniff/hotsniff/client/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
	"github.com/redis/go-redis/v9"
)

// shimEnv is a cache server with an application client that has the shim
// installed, and a publisher on a separate channel server sending what the
// daemon would send about the cache server.
type shimEnv struct {
	cache *testutil.Redis
	app   *redis.Client // with the shim
	plain *redis.Client // another client of the same server, no shim
	shim  *client.Shim
	pub   *publish.Publisher
}

func newShimEnv(t testing.TB, opt client.ShimOptions) *shimEnv {
	t.Helper()
	return newShimEnvDial(t, opt, nil)
}

// newShimEnvDial is newShimEnv with dialer as the application client's
// Dialer (nil: the default), which the shim's own connections use too.
func newShimEnvDial(t testing.TB, opt client.ShimOptions, dialer func(context.Context, string, string) (net.Conn, error)) *shimEnv {
	t.Helper()
	cache := testutil.StartRedis(t)
	chanSrv := testutil.StartRedis(t)
	chc := dial(t, chanSrv.Addr)
	pub, err := publish.New(chc, publish.Options{Channel: "hk", Node: "sniffer-1", Logger: quiet, SnapshotInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close(context.Background()) })
	app := redis.NewClient(&redis.Options{Addr: cache.Addr, DialTimeout: time.Second, Dialer: dialer})
	t.Cleanup(func() { app.Close() })
	plain := redis.NewClient(&redis.Options{Addr: cache.Addr, DialTimeout: time.Second})
	t.Cleanup(func() { plain.Close() })
	sh := installShim(t, app, chc, opt)
	return &shimEnv{cache: cache, app: app, plain: plain, shim: sh, pub: pub}
}

// installShim installs the shim on app, following channel "hk" on chc,
// and waits until it has read the snapshot (20 s: a loaded runner).
func installShim(t testing.TB, app, chc redis.UniversalClient, opt client.ShimOptions) *client.Shim {
	t.Helper()
	opt.Channel = "hk"
	opt.ChannelClient = chc
	if opt.Logger == nil {
		opt.Logger = quiet
	}
	sh, err := client.Install(app, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Close() })
	select {
	case <-sh.Synced():
	case <-time.After(20 * time.Second):
		t.Fatal("shim never synced")
	}
	return sh
}

// emit publishes an event about key at the cache server, as the daemon
// would after seeing its traffic.
func (e *shimEnv) emit(typ, key string) {
	ev := &event.Event{Type: typ, Proto: "redis", Server: e.cache.Addr, NS: "0", Key: []byte(key),
		TTLms: 60000, TS: time.Now(), Source: event.SourceDetected}
	if typ == event.TypeHot {
		ev.QPS = 1500
	}
	e.pub.Emit(ev)
}

func (e *shimEnv) makeHot(t testing.TB, keys ...string) {
	t.Helper()
	want := e.shim.Stats().HotKeys + len(keys)
	for _, k := range keys {
		e.emit(event.TypeHot, k)
	}
	eventually(t, "keys hot", func() bool { st := e.shim.Stats(); return st.HotKeys == want && st.HotMode })
}

// calls returns INFO commandstats calls for cmd ("get", "mget", ...).
func calls(t testing.TB, rdb *redis.Client, cmd string) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	pre := "cmdstat_" + cmd + ":calls="
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, pre); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// infoStat returns a field of INFO stats (keyspace_hits, ...).
func infoStat(t testing.TB, rdb *redis.Client, field string) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatalf("no %s in INFO stats", field)
	return 0
}

func resetStats(t testing.TB, rdb *redis.Client) {
	t.Helper()
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

type reply struct {
	val any
	err string
}

// readAll runs every read the shim serves, returning what go-redis gave.
func readAll(ctx context.Context, rdb *redis.Client) []reply {
	var out []reply
	add := func(v any, err error) {
		r := reply{val: v}
		if err != nil {
			r.err = err.Error()
			if errors.Is(err, redis.Nil) {
				r.err = "redis.Nil"
			}
		}
		out = append(out, r)
	}
	add(rdb.Get(ctx, "s").Result())
	add(rdb.Get(ctx, "missing").Result())
	add(rdb.Get(ctx, "h").Result()) // WRONGTYPE
	add(rdb.MGet(ctx, "s", "missing", "cold", "s").Result())
	add(rdb.MGet(ctx, "missing").Result())
	add(rdb.MGet(ctx, "cold", "s2").Result())
	add(rdb.HGet(ctx, "h", "f1").Result())
	add(rdb.HGet(ctx, "h", "nofield").Result())
	add(rdb.HGet(ctx, "missing", "f1").Result())
	add(rdb.HGet(ctx, "s", "f1").Result()) // WRONGTYPE
	add(rdb.HMGet(ctx, "h", "f2", "nofield", "f1").Result())
	add(rdb.HMGet(ctx, "missing", "f1").Result())
	add(rdb.HGetAll(ctx, "h").Result())
	add(rdb.HGetAll(ctx, "missing").Result())
	add(rdb.HGetAll(ctx, "s").Result()) // WRONGTYPE
	return out
}

// TestShimRepliesMatchGoRedis compares every served read with what the
// plain client gets from Redis, cold, on first and second access (admission)
// and from the cache, including missing keys, missing fields and WRONGTYPE.
func TestShimRepliesMatchGoRedis(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: time.Minute})
	ctx := context.Background()
	e.plain.Set(ctx, "s", "v", 0)
	e.plain.Set(ctx, "s2", "", 0)
	e.plain.Set(ctx, "cold", "c", 0)
	e.plain.HSet(ctx, "h", "f1", "a", "f2", "")
	want := readAll(ctx, e.plain)
	if got := readAll(ctx, e.app); !reflect.DeepEqual(got, want) {
		t.Fatalf("cold:\n got %v\nwant %v", got, want)
	}
	e.makeHot(t, "s", "s2", "missing", "h")
	for round := range 3 {
		if got := readAll(ctx, e.app); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d:\n got %v\nwant %v", round, got, want)
		}
	}
	st := e.shim.Stats()
	if st.Hits == 0 || st.Admissions != 4 {
		t.Errorf("stats %+v: want hits and 4 admissions (s, s2, missing, h)", st)
	}
	// Served from memory now: Redis sees nothing.
	resetStats(t, e.plain)
	got := readAll(ctx, e.app)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("cached:\n got %v\nwant %v", got, want)
	}
	// Left for Redis: GET h, HGET s, HGETALL s (WRONGTYPE, never cached),
	// and the cold key in two MGETs (only the cold members are sent).
	if n := calls(t, e.plain, "get"); n != 1 {
		t.Errorf("%d GETs reached Redis, want 1 (GET h: WRONGTYPE)", n)
	}
	if n := calls(t, e.plain, "mget"); n != 2 {
		t.Errorf("%d MGETs reached Redis, want 2 (the cold members)", n)
	}
	// "missing" is cached as a string (GET came first), so its three hash
	// reads pass too: a key is cached as one kind.
	if n := calls(t, e.plain, "hget") + calls(t, e.plain, "hmget") + calls(t, e.plain, "hgetall"); n != 5 {
		t.Errorf("%d hash reads reached Redis, want 5 (HGET s, HGETALL s, 3 of missing)", n)
	}
	// The application cannot change the cache through a reply.
	m := e.app.HGetAll(ctx, "h").Val()
	m["f1"] = "mutated"
	if v := e.app.HGet(ctx, "h", "f1").Val(); v != "a" {
		t.Errorf("cached hash changed through a returned map: %q", v)
	}
}

// TestAdmissionOnSecondAccess: the first read of a hot key only records it.
func TestAdmissionOnSecondAccess(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: time.Minute})
	ctx := context.Background()
	e.plain.Set(ctx, "k", "v", 0)
	e.makeHot(t, "k")
	resetStats(t, e.plain)
	for range 5 {
		if v := e.app.Get(ctx, "k").Val(); v != "v" {
			t.Fatalf("got %q", v)
		}
	}
	if n := calls(t, e.plain, "get"); n != 2 {
		t.Errorf("%d GETs reached Redis, want 2 (first access recorded, second fetched)", n)
	}
}

// TestRenewalNoStampede: when the entry expires under many readers, one
// goes to Redis and the others keep the current value.
func TestRenewalNoStampede(t *testing.T) {
	ttl := 20 * time.Millisecond
	// StaleGrace far above the test: with the default 100ms, a refresher
	// descheduled that long on a loaded machine hands its token on and
	// readers past the grace go to Redis themselves, by design (the
	// staleness bound). Tracking is off for the same reason: when its
	// connection is (re)established, late on a loaded machine, every value
	// is dropped and refetched. Here only the single-refresher rule is
	// measured.
	e := newShimEnv(t, client.ShimOptions{LocalTTL: ttl, StaleGrace: time.Hour, DisableTracking: true})
	ctx := context.Background()
	e.plain.Set(ctx, "k", "v", 0)
	e.makeHot(t, "k")
	e.app.Get(ctx, "k")
	e.app.Get(ctx, "k")
	resetStats(t, e.plain)
	start := time.Now()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for time.Since(start) < 300*time.Millisecond {
				// An application blocks on I/O now and then; a pure spin
				// starves the refresher on a 2-core machine.
				runtime.Gosched()
				if v, err := e.app.Get(ctx, "k").Result(); v != "v" || err != nil {
					t.Errorf("got %q, %v", v, err)
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	n := calls(t, e.plain, "get")
	// One refresh in flight at a time, and each one sent at least ttl
	// after the previous one was (a value expires ttl after its fetch was
	// sent): at most el/ttl + 1, however the readers are scheduled.
	if max := int(el/ttl) + 1; n > max {
		t.Errorf("%d GETs reached Redis in %v with a %v local expiry, want <= %d", n, el, ttl, max)
	}
	t.Logf("%d server GETs in %v, hits %d stale hits %d", n, el, e.shim.Stats().Hits, e.shim.Stats().StaleHits)
}

// TestWritesInvalidate: writes through the same client, by any command
// naming the key (typed, Do, pipelines, MULTI, FLUSHDB), are seen by the
// next read at once.
func TestWritesInvalidate(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: time.Minute, DisableTracking: true})
	ctx := context.Background()
	e.plain.Set(ctx, "k", "v0", 0)
	e.plain.HSet(ctx, "h", "f", "v0")
	e.makeHot(t, "k", "h")
	warm := func() {
		for range 3 {
			e.app.Get(ctx, "k")
			e.app.HGet(ctx, "h", "f")
		}
	}
	check := func(what, want string) {
		t.Helper()
		if v, _ := e.app.Get(ctx, "k").Result(); v != want {
			t.Errorf("after %s: GET k = %q, want %q", what, v, want)
		}
	}
	steps := []struct {
		what string
		do   func()
		want string
	}{
		{"SET", func() { e.app.Set(ctx, "k", "v1", 0) }, "v1"},
		{"Do(set)", func() { e.app.Do(ctx, "SET", "k", "v2") }, "v2"},
		{"APPEND", func() { e.app.Append(ctx, "k", "x") }, "v2x"},
		{"MSET", func() { e.app.MSet(ctx, "other", "1", "k", "v3") }, "v3"},
		{"pipeline", func() {
			e.app.Pipelined(ctx, func(p redis.Pipeliner) error { p.Set(ctx, "k", "v4", 0); return nil })
		}, "v4"},
		{"MULTI", func() {
			e.app.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Set(ctx, "k", "v5", 0); return nil })
		}, "v5"},
		{"EVAL", func() { e.app.Eval(ctx, "return redis.call('SET', KEYS[1], ARGV[1])", []string{"k"}, "v6") }, "v6"},
		{"RENAME", func() { e.plain.Set(ctx, "src", "v7", 0); e.app.Rename(ctx, "src", "k") }, "v7"},
		{"DEL", func() { e.app.Del(ctx, "k") }, ""},
		{"SET again", func() { e.app.Set(ctx, "k", "v8", 0) }, "v8"},
		{"FLUSHDB", func() { e.plain.Set(ctx, "k", "v9", 0); e.app.FlushDB(ctx) }, ""},
	}
	for _, st := range steps {
		warm()
		st.do()
		check(st.what, st.want)
	}
	e.app.HSet(ctx, "h", "f", "v1")
	warm()
	e.app.HSet(ctx, "h", "f", "v2")
	if v := e.app.HGet(ctx, "h", "f").Val(); v != "v2" {
		t.Errorf("after HSET: HGET = %q", v)
	}
}

// TestInvalidateAndColdEvents: an invalidate message drops the value (the
// key stays hot), a cold one ends caching.
func TestInvalidateAndColdEvents(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: time.Minute, DisableTracking: true})
	ctx := context.Background()
	e.plain.Set(ctx, "k", "v0", 0)
	e.makeHot(t, "k")
	e.app.Get(ctx, "k")
	e.app.Get(ctx, "k")
	e.plain.Set(ctx, "k", "v1", 0) // another client: the shim cannot know
	if v := e.app.Get(ctx, "k").Val(); v != "v0" {
		t.Fatalf("want the cached v0 before any invalidation, got %q", v)
	}
	e.emit(event.TypeInvalidate, "k")
	eventually(t, "invalidate applied", func() bool { return e.app.Get(ctx, "k").Val() == "v1" })
	if st := e.shim.Stats(); st.HotKeys != 1 || st.Invalidations["event"] != 1 {
		t.Errorf("stats %+v", st)
	}
	e.emit(event.TypeCold, "k")
	eventually(t, "cold applied", func() bool { return e.shim.Stats().HotKeys == 0 })
	resetStats(t, e.plain)
	for range 10 {
		e.app.Get(ctx, "k")
	}
	if n := calls(t, e.plain, "get"); n != 10 {
		t.Errorf("after cold: %d of 10 GETs reached Redis", n)
	}
}

// TestServerFilter: events about another server or DB do not apply; an
// override address does.
func TestServerFilter(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{Servers: []string{"10.1.2.3:6379"}})
	ev := func(server, ns, key string) {
		e.pub.Emit(&event.Event{Type: "hot", Proto: "redis", Server: server, NS: ns, Key: []byte(key), TTLms: 60000, TS: time.Now(), Source: "detected"})
	}
	ev("10.9.9.9:6379", "0", "other-server")
	ev(e.cache.Addr, "1", "other-db")
	ev("10.1.2.3:6379", "0", "override")
	eventually(t, "override hot", func() bool { return e.shim.Stats().HotKeys == 1 })
	time.Sleep(50 * time.Millisecond)
	if n := e.shim.Stats().HotKeys; n != 1 {
		t.Errorf("%d hot keys, want only the override's", n)
	}
	if n := len(e.shim.Subscriber().HotSet()); n != 3 {
		t.Errorf("subscriber has %d entries, want all 3", n)
	}
}

// TestTrackingInvalidates: with server-assisted invalidation a write by
// another client is seen within milliseconds, long before the local expiry.
func TestTrackingInvalidates(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: time.Minute})
	ctx := context.Background()
	e.plain.Set(ctx, "k", "v0", 0)
	e.plain.Set(ctx, "k2", "w0", 0) // overlapping prefixes: k covers k2
	e.makeHot(t, "k2", "k")
	eventually(t, "tracking", func() bool { return e.shim.Stats().Tracking })
	for range 3 {
		e.app.Get(ctx, "k")
		e.app.Get(ctx, "k2")
	}
	for i := range 5 {
		v := fmt.Sprint("v", i+1)
		e.plain.Set(ctx, "k", v, 0)
		e.plain.Set(ctx, "k2", v, 0)
		start := time.Now()
		eventually(t, "tracking invalidation", func() bool {
			return e.app.Get(ctx, "k").Val() == v && e.app.Get(ctx, "k2").Val() == v
		})
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Errorf("write seen after %v", d)
		}
	}
	if n := e.shim.Stats().Invalidations["tracking"]; n == 0 {
		t.Error("no tracking invalidations counted")
	}
}

// gates holds a shim's connections at chosen points: a write of an EXISTS
// (the shim's tracking registration) until regOpen is closed, and, once
// armed, the reply to the next GET written until replyOpen is closed. Each
// hold is announced once on regHeld or replyHeld.
type gates struct {
	regHeld, replyHeld chan struct{}
	regOpen, replyOpen chan struct{}
	armed              atomic.Bool
	once               [2]sync.Once
}

func newGates(t testing.TB) *gates {
	g := &gates{regHeld: make(chan struct{}, 1), replyHeld: make(chan struct{}, 1),
		regOpen: make(chan struct{}), replyOpen: make(chan struct{})}
	t.Cleanup(func() { g.openReg(); g.openReply() })
	return g
}

func (g *gates) openReg()   { g.once[0].Do(func() { close(g.regOpen) }) }
func (g *gates) openReply() { g.once[1].Do(func() { close(g.replyOpen) }) }

func (g *gates) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: c, g: g}, nil
}

type gatedConn struct {
	net.Conn
	g         *gates
	holdReply bool
}

func (c *gatedConn) Write(b []byte) (int, error) {
	cmd := strings.ToLower(string(b))
	if strings.Contains(cmd, "exists") {
		announce(c.g.regHeld)
		<-c.g.regOpen
	}
	if strings.Contains(cmd, "$3\r\nget\r\n") && c.g.armed.CompareAndSwap(true, false) {
		c.holdReply = true
	}
	return c.Conn.Write(b)
}

func (c *gatedConn) Read(b []byte) (int, error) {
	if c.holdReply {
		c.holdReply = false
		announce(c.g.replyHeld)
		<-c.g.replyOpen
	}
	return c.Conn.Read(b)
}

func announce(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func waitHeld(t testing.TB, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("never held: %s", what)
	}
}

// gatedSeen is a shim env on gated connections with tracking established
// and k = v0 hot and read once (the next read admits and fetches it).
func gatedSeen(t testing.TB) (*shimEnv, *gates) {
	t.Helper()
	g := newGates(t)
	e := newShimEnvDial(t, client.ShimOptions{LocalTTL: time.Minute}, g.dial)
	ctx := context.Background()
	e.plain.Set(ctx, "k", "v0", 0)
	e.makeHot(t, "k")
	eventually(t, "tracking", func() bool { return e.shim.Stats().Tracking })
	e.app.Get(ctx, "k")
	return e, g
}

// TestTrackingFirstRegistration: a write that lands after the admission's
// fetch and before the key's first registration is never reported by the
// server. The fetched value must not outlive the registration: the next read
// after it sees the write (it once stood until LocalTTL).
func TestTrackingFirstRegistration(t *testing.T) {
	e, g := gatedSeen(t)
	ctx := context.Background()
	if v := e.app.Get(ctx, "k").Val(); v != "v0" { // admitted and fetched
		t.Fatalf("GET k = %q", v)
	}
	waitHeld(t, g.regHeld, "the registration of k")
	if v := e.app.Get(ctx, "k").Val(); v != "v0" {
		t.Fatalf("GET k = %q before any write", v)
	}
	if err := e.plain.Set(ctx, "k", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	g.openReg()
	seesWrite(t, e, "v1")
	if n := e.shim.Stats().Invalidations["tracking"]; n != 1 {
		t.Errorf("%d tracking invalidations, want 1 (the value fetched before the registration)", n)
	}
}

// TestTrackingRegistrationInFlight: the admission's fetch is read at the
// server, a write follows, then the key's first registration, and only then
// does the fetch's reply arrive. It must not be stored.
func TestTrackingRegistrationInFlight(t *testing.T) {
	e, g := gatedSeen(t)
	ctx := context.Background()
	resetStats(t, e.plain)
	g.armed.Store(true)
	fetched := make(chan string, 1)
	go func() { fetched <- e.app.Get(ctx, "k").Val() }() // admitted: the fetch
	waitHeld(t, g.replyHeld, "the admission's reply")
	eventually(t, "the fetch read at the server", func() bool { return calls(t, e.plain, "get") == 1 })
	if err := e.plain.Set(ctx, "k", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, g.regHeld, "the registration of k")
	g.openReg()
	eventually(t, "the registration read at the server", func() bool { return calls(t, e.plain, "getrange") == 1 })
	g.openReply()
	if v := <-fetched; v != "v0" {
		t.Fatalf("the fetch read %q, want v0 (sent before the write)", v)
	}
	seesWrite(t, e, "v1")
}

// seesWrite waits until the application reads want for k: a round trip away
// for a registration, where LocalTTL is a minute.
func seesWrite(t testing.TB, e *shimEnv, want string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for v := e.app.Get(ctx, "k").Val(); v != want; v = e.app.Get(ctx, "k").Val() {
		if time.Now().After(deadline) {
			t.Fatalf("GET k = %q 5 s after the registration, want %s: a value fetched before it missed the write", v, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestHotModeEnds(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{HotModeLinger: 300 * time.Millisecond, LocalTTL: time.Minute})
	ctx := context.Background()
	e.plain.Set(ctx, "k", "v", 0)
	e.makeHot(t, "k")
	e.app.Get(ctx, "k")
	e.app.Get(ctx, "k")
	if st := e.shim.Stats(); st.Entries != 1 {
		t.Fatalf("stats %+v", st)
	}
	eventually(t, "mode end", func() bool { return !e.shim.Stats().HotMode })
	if st := e.shim.Stats(); st.Entries != 0 || st.Evictions["mode_end"] != 1 {
		t.Errorf("stats %+v", st)
	}
	resetStats(t, e.plain)
	e.app.Get(ctx, "k")
	if n := calls(t, e.plain, "get"); n != 1 {
		t.Errorf("after mode end: %d GETs reached Redis, want 1", n)
	}
	e.emit(event.TypeHot, "k")
	eventually(t, "mode on", func() bool { return e.shim.Stats().HotMode })
}

func TestMaxEntries(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{MaxEntries: 4, LocalTTL: time.Minute})
	ctx := context.Background()
	var keys []string
	for i := range 10 {
		k := fmt.Sprint("k", i)
		keys = append(keys, k)
		e.plain.Set(ctx, k, k, 0)
	}
	e.makeHot(t, keys...)
	for range 3 {
		for _, k := range keys {
			if v := e.app.Get(ctx, k).Val(); v != k {
				t.Fatalf("GET %s = %q", k, v)
			}
		}
	}
	if st := e.shim.Stats(); st.Entries > 4 || st.Evictions["capacity"] == 0 {
		t.Errorf("stats %+v", st)
	}
}

// slowGets delays every GET the application's client really sends (a hook
// added after the shim's sees only what the shim sends on).
type slowGets struct{ d time.Duration }

func (slowGets) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h slowGets) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		if c.Name() == "get" {
			time.Sleep(h.d)
		}
		return next(ctx, c)
	}
}
func (slowGets) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestInvalidatedReadersWait: after another client's write invalidates a
// hot key (server-assisted tracking), the concurrent readers wait for the
// one refresh instead of all going to Redis, and get the new value.
func TestInvalidatedReadersWait(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: time.Minute, StaleGrace: 500 * time.Millisecond})
	ctx := context.Background()
	e.plain.Set(ctx, "k", "v0", 0)
	e.makeHot(t, "k")
	eventually(t, "tracking", func() bool { return e.shim.Stats().Tracking })
	for range 3 {
		e.app.Get(ctx, "k")
	}
	e.app.AddHook(slowGets{50 * time.Millisecond})
	for round := range 3 {
		v := fmt.Sprint("v", round+1)
		// The write is repeated until its invalidation arrives: the key
		// is registered for tracking a moment after it was read.
		inv := e.shim.Stats().Invalidations["tracking"]
		eventually(t, fmt.Sprintf("round %d: tracking invalidation", round), func() bool {
			e.plain.Set(ctx, "k", v, 0)
			time.Sleep(20 * time.Millisecond)
			return e.shim.Stats().Invalidations["tracking"] > inv
		})
		before := calls(t, e.plain, "get")
		var wg sync.WaitGroup
		got := make([]string, 20)
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i] = e.app.Get(ctx, "k").Val()
			}()
		}
		wg.Wait()
		if n := calls(t, e.plain, "get") - before; n > 2 {
			t.Errorf("round %d: 20 concurrent reads after the write sent %d GETs to Redis, want the one refresh", round, n)
		}
		for i, g := range got {
			if g != v {
				t.Errorf("round %d: read %d got %q, want %q", round, i, g, v)
			}
		}
	}
	if st := e.shim.Stats(); st.WaitHits == 0 {
		t.Errorf("no read counted as waiting for the refresh: %+v", st)
	}
}
