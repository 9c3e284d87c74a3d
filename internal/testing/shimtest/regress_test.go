package shimtest

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client"
	"github.com/hotsniff/hotsniff/client/event"
	"github.com/redis/go-redis/v9"
)

// TestWatchNoLostUpdate: a read-modify-write under WATCH must read Redis,
// not memory. Another client increments the key (the shim is not told:
// tracking is off, the local expiry is long), then the application adds 1
// under Watch. A locally served read would make EXEC succeed over the other
// write and lose it.
func TestWatchNoLostUpdate(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: time.Minute, DisableTracking: true})
	ctx := context.Background()
	e.plain.Set(ctx, "ctr", 0, 0)
	e.makeHot(t, "ctr")
	const trials = 50
	lost := 0
	for i := range trials {
		// The key is cached.
		for range 3 {
			e.app.Get(ctx, "ctr")
		}
		if err := e.plain.Incr(ctx, "ctr").Err(); err != nil {
			t.Fatal(err)
		}
		err := e.app.Watch(ctx, func(tx *redis.Tx) error {
			n, err := tx.Get(ctx, "ctr").Int()
			if err != nil {
				return err
			}
			// A plain pipeline on the Tx reads inside the transaction too.
			cmds, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, "ctr"); return nil })
			if err != nil {
				return err
			}
			if m, _ := cmds[0].(*redis.StringCmd).Int(); m != n {
				t.Errorf("trial %d: GET %d, pipelined GET %d under the same WATCH", i, n, m)
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "ctr", n+1, 0)
				return nil
			})
			return err
		}, "ctr")
		if err != nil {
			t.Fatalf("trial %d: %v", i, err)
		}
		if n, _ := e.plain.Get(ctx, "ctr").Int(); n != 2*(i+1) {
			lost++
			e.plain.Set(ctx, "ctr", 2*(i+1), 0)
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d read-modify-writes under WATCH lost another client's update", lost, trials)
	}
	// Outside the transaction the key is served locally again.
	before := e.shim.Stats().Hits
	for range 3 {
		e.app.Get(ctx, "ctr")
	}
	if e.shim.Stats().Hits == before {
		t.Error("no local hit after the transactions: the client stayed in transaction mode")
	}
}

// TestConnSelectIsolated: a Conn that selected DB 1 reads DB 1, and its
// replies never fill the DB 0 cache of the client it came from.
func TestConnSelectIsolated(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: 20 * time.Millisecond, DisableTracking: true})
	ctx := context.Background()
	db1 := redis.NewClient(&redis.Options{Addr: e.cache.Addr, DB: 1})
	defer db1.Close()
	e.plain.Set(ctx, "k", "db0", 0)
	db1.Set(ctx, "k", "db1", 0)
	e.makeHot(t, "k")
	for range 3 {
		e.app.Get(ctx, "k")
	}
	conn := e.app.Conn()
	defer conn.Close()
	if err := conn.Select(ctx, 1).Err(); err != nil {
		t.Fatal(err)
	}
	wrong := 0
	deadline := time.Now().Add(300 * time.Millisecond) // many local expiries
	for time.Now().Before(deadline) {
		if v := conn.Get(ctx, "k").Val(); v != "db1" {
			wrong++
		}
		cmds, _ := conn.Pipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, "k"); return nil })
		if v := cmds[0].(*redis.StringCmd).Val(); v != "db1" {
			wrong++
		}
		if v := e.app.Get(ctx, "k").Val(); v != "db0" {
			wrong++
		}
		time.Sleep(time.Millisecond)
	}
	if wrong > 0 {
		t.Errorf("%d reads returned the other DB's value", wrong)
	}
	// Back on DB 0, the Conn is served like the client.
	if err := conn.Select(ctx, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v := conn.Get(ctx, "k").Val(); v != "db0" {
		t.Errorf("conn back on DB 0: %q", v)
	}
	// A Conn's own pipeline changing its DB (invisible to its single
	// commands' chain) stops local serving on every Conn.
	conn2 := e.app.Conn()
	defer conn2.Close()
	conn2.Pipelined(ctx, func(p redis.Pipeliner) error { p.Select(ctx, 1); return nil })
	for range 5 {
		if v := conn2.Get(ctx, "k").Val(); v != "db1" {
			t.Fatalf("conn selected DB 1 in a pipeline, GET = %q", v)
		}
	}
	if v := e.app.Get(ctx, "k").Val(); v != "db0" {
		t.Errorf("client after the Conn's pipelined SELECT: %q", v)
	}
}

// TestConnPipelineServed: a Conn's plain pipeline has its hot reads served
// while no Conn or Tx is on another DB or inside WATCH/MULTI; once its own
// Conn (or any other) selects another DB or watches, its pipelines go to
// Redis and read that DB; back on the client's DB they are served again.
func TestConnPipelineServed(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: time.Minute, DisableTracking: true})
	ctx := context.Background()
	db1 := redis.NewClient(&redis.Options{Addr: e.cache.Addr, DB: 1})
	defer db1.Close()
	e.plain.Set(ctx, "k", "db0", 0)
	db1.Set(ctx, "k", "db1", 0)
	e.makeHot(t, "k")
	for range 3 {
		e.app.Get(ctx, "k")
	}
	conn := e.app.Conn()
	defer conn.Close()
	pget := func(c *redis.Conn) (string, int) {
		t.Helper()
		before := calls(t, e.plain, "get")
		cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, "k"); return nil })
		if err != nil {
			t.Fatal(err)
		}
		return cmds[0].(*redis.StringCmd).Val(), calls(t, e.plain, "get") - before
	}
	if v, n := pget(conn); v != "db0" || n != 0 {
		t.Errorf("Conn pipeline on the client's DB: %q, %d GETs reached Redis, want db0 served locally", v, n)
	}
	if err := conn.Select(ctx, 1).Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if v, _ := pget(conn); v != "db1" {
			t.Fatalf("Conn pipeline after SELECT 1: %q, want db1", v)
		}
	}
	if err := conn.Select(ctx, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, n := pget(conn); v != "db0" || n != 0 {
		t.Errorf("Conn pipeline back on DB 0: %q, %d GETs reached Redis, want db0 served locally", v, n)
	}
	// A transaction under WATCH elsewhere: no Conn pipeline is served
	// meanwhile (the shim cannot tell whose pipeline it is).
	if err := e.app.Watch(ctx, func(tx *redis.Tx) error {
		if _, n := pget(conn); n != 1 {
			t.Errorf("a Conn pipeline while another Conn watches: %d GETs reached Redis, want 1", n)
		}
		return nil
	}, "k"); err != nil {
		t.Fatal(err)
	}
	if v, n := pget(conn); v != "db0" || n != 0 {
		t.Errorf("Conn pipeline after the WATCH ended: %q, %d GETs reached Redis, want db0 served locally", v, n)
	}
}

// TestBigHashNeverFetched: a hot hash above MaxHashFields is recognised by
// HLEN, never transferred with HGETALL, and the verdict is remembered
// across re-admission.
func TestBigHashNeverFetched(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{MaxHashFields: 100, LocalTTL: time.Minute})
	ctx := context.Background()
	args := []any{}
	for i := range 20000 {
		args = append(args, "f"+strconv.Itoa(i), "v")
	}
	if err := e.plain.HSet(ctx, "big", args...).Err(); err != nil {
		t.Fatal(err)
	}
	e.plain.HSet(ctx, "small", "f1", "a")
	e.makeHot(t, "big", "small")
	resetStats(t, e.plain)
	for range 5 {
		if v := e.app.HGet(ctx, "big", "f7").Val(); v != "v" {
			t.Fatalf("HGET big f7 = %q", v)
		}
		if v := e.app.HGet(ctx, "small", "f1").Val(); v != "a" {
			t.Fatalf("HGET small f1 = %q", v)
		}
	}
	// Cold, then hot again: re-admission.
	e.emit(event.TypeCold, "big")
	eventually(t, "cold", func() bool { return e.shim.Stats().HotKeys == 1 })
	e.emit(event.TypeHot, "big")
	eventually(t, "hot again", func() bool { return e.shim.Stats().HotKeys == 2 })
	for range 5 {
		e.app.HGet(ctx, "big", "f7")
	}
	if n := calls(t, e.plain, "hgetall"); n != 1 {
		t.Errorf("%d HGETALLs reached Redis, want 1 (the small hash only)", n)
	}
	if n := calls(t, e.plain, "hlen"); n != 2 {
		t.Errorf("%d HLENs reached Redis, want 2 (one per hash, the verdict remembered)", n)
	}
	if st := e.shim.Stats(); st.Uncacheable != 1 {
		t.Errorf("uncacheable = %d, want 1", st.Uncacheable)
	}
}

// TestMGetNilIsNotMissing: MGET answers nil for a key holding a hash; that
// must not be cached as "missing", or a later GET returns redis.Nil instead
// of the server's WRONGTYPE.
func TestMGetNilIsNotMissing(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: time.Minute})
	ctx := context.Background()
	e.plain.HSet(ctx, "h", "f", "v")
	e.makeHot(t, "h")
	for range 3 {
		vals, err := e.app.MGet(ctx, "h").Result()
		if err != nil || len(vals) != 1 || vals[0] != nil {
			t.Fatalf("MGET h = %v, %v", vals, err)
		}
	}
	for range 3 {
		_, err := e.app.Get(ctx, "h").Result()
		if err == nil || errors.Is(err, redis.Nil) || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
			t.Fatalf("GET h: %v, want WRONGTYPE", err)
		}
	}
	// In a pipeline too.
	e.app.Pipelined(ctx, func(p redis.Pipeliner) error { p.MGet(ctx, "h"); p.MGet(ctx, "h"); return nil })
	if _, err := e.app.Get(ctx, "h").Result(); err == nil || errors.Is(err, redis.Nil) {
		t.Fatalf("GET h after pipelined MGETs: %v, want WRONGTYPE", err)
	}
}

// pipeReads is a pipeline of every read the shim serves, plus a cold key
// and a WRONGTYPE, as go-redis returns them.
func pipeReads(ctx context.Context, rdb redis.Cmdable) ([]reply, string) {
	cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, "s")
		p.Get(ctx, "missing")
		p.Get(ctx, "cold")
		p.HGet(ctx, "h", "f1")
		p.HGet(ctx, "h", "nofield")
		p.HMGet(ctx, "h", "f2", "nofield", "f1")
		p.HGetAll(ctx, "h")
		p.MGet(ctx, "s", "missing")
		p.Get(ctx, "h") // WRONGTYPE
		p.Get(ctx, "s")
		return nil
	})
	var out []reply
	for _, c := range cmds {
		r := reply{}
		switch c := c.(type) {
		case *redis.StringCmd:
			r.val = c.Val()
		case *redis.SliceCmd:
			r.val = c.Val()
		case *redis.MapStringStringCmd:
			r.val = c.Val()
		}
		if c.Err() != nil {
			r.err = c.Err().Error()
		}
		out = append(out, r)
	}
	es := ""
	if err != nil {
		es = err.Error()
	}
	return out, es
}

// TestPipelinedServesHotReads: in a plain pipeline the hot reads are
// answered from memory and only the rest is sent, with every command's
// value, error and the pipeline's error exactly as go-redis gives them.
func TestPipelinedServesHotReads(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: time.Minute})
	ctx := context.Background()
	e.plain.Set(ctx, "s", "v", 0)
	e.plain.Set(ctx, "cold", "c", 0)
	e.plain.HSet(ctx, "h", "f1", "a", "f2", "")
	want, wantErr := pipeReads(ctx, e.plain)
	e.makeHot(t, "s", "missing", "h")
	for range 2 {
		e.app.Get(ctx, "s")
		e.app.Get(ctx, "missing")
		e.app.HGet(ctx, "h", "f1")
	}
	resetStats(t, e.plain)
	before := e.shim.Stats().Hits
	got, gotErr := pipeReads(ctx, e.app)
	if !reflect.DeepEqual(got, want) || gotErr != wantErr {
		t.Fatalf("pipelined:\n got %v %q\nwant %v %q", got, gotErr, want, wantErr)
	}
	if n := e.shim.Stats().Hits - before; n < 8 {
		t.Errorf("%d local hits in the pipeline, want 8", n)
	}
	// Sent: GET cold and GET h (WRONGTYPE) only.
	if n := calls(t, e.plain, "get"); n != 2 {
		t.Errorf("%d GETs reached Redis, want 2", n)
	}
	for _, c := range []string{"hget", "hmget", "hgetall", "mget"} {
		if n := calls(t, e.plain, c); n != 0 {
			t.Errorf("%d %s reached Redis, want 0", n, c)
		}
	}
	// A pipeline that writes is sent whole and reads its own write.
	cmds, err := e.app.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "s", "w", 0)
		p.Get(ctx, "s")
		return nil
	})
	if err != nil || cmds[1].(*redis.StringCmd).Val() != "w" {
		t.Errorf("write then read in one pipeline: %v %v", cmds, err)
	}
	// A transaction is never served.
	e.plain.Set(ctx, "s", "x", 0)
	cmds, err = e.app.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, "s"); return nil })
	if err != nil || cmds[0].(*redis.StringCmd).Val() != "x" {
		t.Errorf("MULTI GET s = %v, %v; want x from Redis", cmds, err)
	}
}

// TestAutoPipelineServed: go-redis's autopipeliner runs each command
// through a hook chain of its own; hot reads there are served like the
// client's own, and correct.
func TestAutoPipelineServed(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: time.Minute})
	ctx := context.Background()
	e.plain.Set(ctx, "k", "v", 0)
	e.makeHot(t, "k")
	ap, err := e.app.AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	defer ap.Close()
	for range 3 {
		ap.Get(ctx, "k")
	}
	resetStats(t, e.plain)
	for range 20 {
		if v, err := ap.Get(ctx, "k").Result(); v != "v" || err != nil {
			t.Fatalf("autopipelined GET = %q, %v", v, err)
		}
	}
	if n := calls(t, e.plain, "get"); n != 0 {
		t.Errorf("%d of 20 autopipelined hot GETs reached Redis", n)
	}
}

// TestPooledSelectStopsServing: SELECT sent on the installed client's pool
// changes one pooled connection's DB; from then on no read of the client
// can be trusted to come from its DB, so nothing is served any more.
func TestPooledSelectStopsServing(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: time.Minute})
	ctx := context.Background()
	e.plain.Set(ctx, "k", "v", 0)
	e.makeHot(t, "k")
	for range 3 {
		e.app.Get(ctx, "k")
	}
	if err := e.app.Do(ctx, "SELECT", 1).Err(); err != nil {
		t.Fatal(err)
	}
	before := e.shim.Stats().Hits
	for range 10 {
		e.app.Get(ctx, "k") // may read DB 1 now: go-redis's behaviour, not the shim's
	}
	if n := e.shim.Stats().Hits - before; n != 0 {
		t.Errorf("%d reads served after a pooled SELECT", n)
	}
}

// TestMultiOnConnInvalidatesAtExec: writes queued with MULTI on a Conn
// happen at EXEC; a refresh between queueing and EXEC must not leave the
// old value cached after EXEC returned.
func TestMultiOnConnInvalidatesAtExec(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: time.Minute, DisableTracking: true})
	ctx := context.Background()
	e.plain.Set(ctx, "k", "v0", 0)
	e.makeHot(t, "k")
	for range 3 {
		e.app.Get(ctx, "k")
	}
	conn := e.app.Conn()
	defer conn.Close()
	if err := conn.Do(ctx, "MULTI").Err(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Do(ctx, "SET", "k", "v1").Err(); err != nil {
		t.Fatal(err)
	}
	// Another goroutine's read refreshes the key before EXEC: v0.
	if v := e.app.Get(ctx, "k").Val(); v != "v0" {
		t.Fatalf("before EXEC: %q", v)
	}
	if err := conn.Do(ctx, "EXEC").Err(); err != nil {
		t.Fatal(err)
	}
	if v := e.app.Get(ctx, "k").Val(); v != "v1" {
		t.Errorf("after EXEC returned: GET = %q, want v1", v)
	}
}
