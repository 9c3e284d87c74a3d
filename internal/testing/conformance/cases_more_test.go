package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hotsniff/hotsniff/client/event"
	"github.com/hotsniff/hotsniff/client/event/envelope"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/redis/go-redis/v9"
)

// allCases is every case: the original ones, then those for namespaces,
// hostile publishers, restarts, outages and clusters.
func allCases() []tcase { return append(append([]tcase(nil), cases...), moreCases...) }

// expectValues reads key n times, spaced so that the reads span several
// local TTLs (refreshes included), and checks every value: whatever was
// served locally or not, never a value of another namespace.
func (e *env) expectValues(key string, want any, n int, gap time.Duration) {
	e.t.Helper()
	for i := range n {
		if v := e.a.do(map[string]any{"op": "get", "key": key})["value"]; v != want {
			e.t.Errorf("read %d of %q = %v, want %v", i+1, key, v, want)
		}
		time.Sleep(gap)
	}
}

// hostile publishes a raw message as if from the scripted node (not
// tracked in its snapshot).
func (e *env) hostile(msg string) { e.t.Helper(); e.raw(msg) }

// evJSON is ev marshalled with one field's raw JSON replaced.
func (e *env) evJSON(typ, key, field, raw string) string {
	e.t.Helper()
	ev := e.ev(typ, key)
	e.seq++
	ev.Seq = e.seq
	b, err := json.Marshal(ev)
	if err != nil {
		e.t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, `"`+field+`":`)
	if i < 0 {
		e.t.Fatalf("no %s in %s", field, s)
	}
	j := i + len(field) + 3
	k := j
	for k < len(s) && s[k] != ',' && s[k] != '}' {
		k++
	}
	return s[:j] + raw + s[k:]
}

var moreCases = []tcase{
	{name: "select-then-read", what: "after SELECT through the application's client, reads return the selected DB's values (served locally or not), and after SELECT back the first DB's; a refresh never brings another DB's value",
		setup: func(e *env) { e.cfg.LocalTTLms, e.cfg.PoolSize = 200, 1 },
		run: func(e *env) {
			e.set("k", "v0")
			e.setDB(1, "k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v0")
			e.a.do(map[string]any{"op": "select", "db": 1})
			e.expectValues("k", "v1", 8, 60*time.Millisecond)
			e.a.do(map[string]any{"op": "set", "key": "k", "value": "v1b"})
			e.expectValues("k", "v1b", 4, 60*time.Millisecond)
			e.a.do(map[string]any{"op": "select", "db": 0})
			e.expectValues("k", "v0", 8, 60*time.Millisecond)
			e.set("k", "v0b") // another client's write to DB 0
			time.Sleep(350 * time.Millisecond)
			e.expectValues("k", "v0b", 4, 60*time.Millisecond)
		}},
	{name: "select-pipeline", what: "a SELECT inside a pipeline: the pipeline's read returns the selected DB's value, every time (what later reads see is the library's own business)",
		setup: func(e *env) { e.cfg.LocalTTLms, e.cfg.PoolSize = 200, 1 },
		run: func(e *env) {
			e.set("k", "v0")
			e.setDB(1, "k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v0")
			for i := range 6 {
				if v := e.a.do(map[string]any{"op": "pipeline_select_get", "db": 1, "key": "k"})["value"]; v != "v1" {
					e.t.Errorf("pipeline %d: GET after SELECT 1 = %v, want v1", i+1, v)
				}
				if v := e.a.do(map[string]any{"op": "pipeline_select_get", "db": 0, "key": "k"})["value"]; v != "v0" {
					e.t.Errorf("pipeline %d: GET after SELECT 0 = %v, want v0", i+1, v)
				}
				time.Sleep(60 * time.Millisecond)
			}
		}},
	{name: "select-db-in-url", what: "a client configured on DB 1: events for ns 1 apply, ns 0 do not, and values are DB 1's",
		setup: func(e *env) { e.cfg.DB = 1 },
		run: func(e *env) {
			e.set("k", "v0")
			e.setDB(1, "k", "v1")
			e.set("z", "z0")
			e.setDB(1, "z", "z1")
			k := e.ev(event.TypeHot, "k")
			k.NS = "1"
			e.publish(k, e.ev(event.TypeHot, "z"))
			e.sync()
			e.warm("k", "v1")
			e.expectGets("k", "v1", 0, 0)
			e.expectGets("z", "z1", 1, 1, 1)
		}},
	{name: "big-hash-readmission", what: "a hash found too big stays known as such across cold, hot and re-admission: HLEN is not sent again and the hash is never fetched whole",
		run: func(e *env) {
			args := make([]any, 0, 3000)
			for i := range 1500 {
				args = append(args, "f"+strconv.Itoa(i), "v")
			}
			e.s.cacheC.HSet(context.Background(), "big", args...)
			e.publish(e.ev(event.TypeHot, "big"))
			e.sync()
			hget := func() any { return e.a.do(map[string]any{"op": "hget", "key": "big", "field": "f7"})["value"] }
			d := e.remote(func() {
				for range 3 {
					hget()
				}
			})
			if d["hlen"] != 1 || d["hgetall"] != 0 {
				e.t.Errorf("first admission: Redis saw %v, want one HLEN and no HGETALL", d)
			}
			e.publish(e.ev(event.TypeCold, "big"))
			e.publish(e.ev(event.TypeHot, "big"))
			e.sync()
			var vals []any
			d = e.remote(func() {
				for range 5 {
					vals = append(vals, hget())
				}
			})
			if fmt.Sprint(vals) != "[v v v v v]" || d["hlen"] != 0 || d["hgetall"] != 0 {
				e.t.Errorf("after cold, hot and re-admission: %v; Redis saw %v, want no HLEN and no HGETALL", vals, d)
			}
		}},
	{name: "hostile-numbers", what: "ttl_ms of 400 digits, 1e400 or Infinity, v 1e400: each one counted bad message (out_of_range), never applied, never a reconnect; cached keys keep being served and later messages apply",
		run: func(e *env) {
			e.set("k", "v1")
			e.set("x", "vx")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			reloads := e.stat("reloads")
			e.hostile(e.evJSON(event.TypeHot, "x", "ttl_ms", strings.Repeat("9", 400)))
			e.hostile(e.evJSON(event.TypeHot, "x", "ttl_ms", "1e400"))
			e.hostile(e.evJSON(event.TypeHot, "x", "ttl_ms", "Infinity"))
			e.hostile(e.evJSON(event.TypeCold, "k", "v", "1e400"))
			e.seq -= 4 // they took no seq: the next real message follows on
			e.sync()
			if n := e.bad("out_of_range"); n != 4 {
				e.t.Errorf("%v messages counted out_of_range, want 4", n)
			}
			e.expectGets("k", "v1", 0, 0)
			e.expectGets("x", "vx", 1, 1, 1)
			if r := e.stat("reloads"); r != reloads {
				e.t.Errorf("%v snapshot reloads (a reconnect?), want none", r-reloads)
			}
			e.publish(e.ev(event.TypeCold, "k"))
			e.sync()
			e.expectGets("k", "v1", 1, 1)
		}},
	{name: "hostile-snapshot-entries", what: "a snapshot entry out of range is skipped and counted; the rest of the snapshot is applied",
		setup: func(e *env) {
			e.set("good", "vg")
			e.set("bad", "vb")
			e.seq += 10
			good, bad := e.ev(event.TypeHot, "good"), e.ev(event.TypeHot, "bad")
			good.Seq, bad.Seq = e.seq, e.seq
			e.snap["good"] = good
			e.snap["bad"] = bad
			e.snapWrap = func(b []byte) []byte {
				return []byte(strings.Replace(string(b), `"key":"bad","qps":1500,"ttl_ms":60000`, `"key":"bad","qps":1500,"ttl_ms":1e400`, 1))
			}
			e.writeSnapshot()
		},
		run: func(e *env) {
			e.warm("good", "vg")
			e.expectGets("bad", "vb", 1, 1, 1)
			if n := e.bad("out_of_range"); n < 1 {
				e.t.Errorf("the bad entry was not counted")
			}
		}},
	{name: "hostile-snapshot-document", what: "a snapshot document that does not parse is counted and ignored: the shim still starts, follows the channel's messages, and keeps retrying the snapshot",
		setup: func(e *env) {
			e.snapWrap = func([]byte) []byte { return []byte(`{"v":1,"keys":[{"v":1,"ttl_ms":`) }
		},
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			if n := e.bad("undecodable") + e.bad("out_of_range"); n < 1 {
				e.t.Errorf("the broken snapshot was not counted")
			}
		}},
	{name: "oversized-message", what: "a 22 MB batch is rejected by its size before parsing (too_large), counted once; the shim keeps serving and the next message applies",
		run: func(e *env) {
			e.set("k", "v1")
			e.set("n", "vn")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			one, _ := json.Marshal(e.ev(event.TypeHot, "x"))
			var b strings.Builder
			b.WriteString(`{"v":2,"node":"` + e.node + `","events":[`)
			for b.Len() < 22<<20 {
				b.Write(one)
				b.WriteByte(',')
			}
			b.Write(one)
			b.WriteString("]}")
			e.hostile(b.String())
			e.publish(e.ev(event.TypeHot, "n"))
			e.sync()
			if n := e.bad("too_large"); n != 1 {
				e.t.Errorf("%v messages counted too_large, want 1", n)
			}
			e.expectGets("k", "v1", 0)
			e.warm("n", "vn")
		}},
	{name: "forged-seq-jump", what: "a forged seq jump for a node silences it for at most ~5 s: the snapshot does not confirm it (counted unconfirmed_seq) and the node's real messages apply again",
		run: func(e *env) {
			e.set("k", "v1")
			e.set("n", "vn")
			e.set("m", "vm")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			e.writeSnapshot()
			forged := e.ev(event.TypeHot, "junk")
			forged.Seq = e.seq + 1<<20 - 10
			b, _ := json.Marshal(forged)
			e.hostile(string(b))
			// The real node goes on: k cold, n hot (its snapshot says so).
			e.publish(e.ev(event.TypeCold, "k"), e.ev(event.TypeHot, "n"))
			e.writeSnapshot()
			start := time.Now()
			for time.Since(start) < 9*time.Second && e.bad("unconfirmed_seq") < 1 {
				time.Sleep(100 * time.Millisecond)
			}
			took := time.Since(start)
			if n := e.bad("unconfirmed_seq"); n != 1 {
				e.t.Fatalf("after %v: %v unconfirmed seq jumps counted, want 1", took, n)
			}
			e.t.Logf("the forged jump was undone after %v", took)
			time.Sleep(100 * time.Millisecond)
			e.expectGets("k", "v1", 1, 1)
			e.warm("n", "vn")
			e.publish(e.ev(event.TypeHot, "m"))
			e.sync()
			e.warm("m", "vm")
		}},
	{name: "cacheable-flapping", what: "a key whose cacheable verdict changed 4 times within 10 s stays cacheable (a further cacheable:false is held back and counted as flapping)",
		run: func(e *env) {
			e.set("f", "vf")
			e.publish(e.ev(event.TypeHot, "f"))
			e.sync()
			for i := range 7 {
				ev := e.ev(event.TypeHot, "f")
				ev.Uncacheable = i%2 == 0
				e.publish(ev)
			}
			e.sync()
			if n := e.bad("flapping"); n < 1 {
				e.t.Errorf("no held verdict counted as flapping")
			}
			e.warm("f", "vf")
			e.expectGets("f", "vf", 0, 0, 0)
		}},
	{name: "signed-envelope", what: `with a channel secret: signed messages and snapshots apply; unsigned messages and a wrong MAC are counted (bad_signature) and ignored`,
		setup: func(e *env) {
			secret := []byte("conformance secret")
			e.cfg.ChannelSecret = string(secret)
			e.msgWrap = func(b []byte) []byte { return envelope.Sign(secret, b) }
			e.snapWrap = e.msgWrap
			e.set("s", "vs")
			e.seq += 10
			e.snap["s"] = e.ev(event.TypeHot, "s")
			e.snap["s"].Seq = e.seq
			e.writeSnapshot()
		},
		run: func(e *env) {
			for _, k := range []string{"j", "u", "w"} {
				e.set(k, "v"+k)
			}
			e.warm("s", "vs")
			e.publish(e.ev(event.TypeHot, "j"))
			wrap := e.msgWrap
			e.msgWrap = nil
			u, _ := json.Marshal(e.ev(event.TypeHot, "u"))
			e.raw(string(u))
			w := envelope.Sign([]byte("another secret"), []byte(strings.Replace(string(u), `"u"`, `"w"`, 1)))
			e.raw(string(w))
			e.msgWrap = wrap
			e.sync()
			e.warm("j", "vj")
			e.expectGets("u", "vu", 1, 1, 1)
			e.expectGets("w", "vw", 1, 1, 1)
			if n := e.bad("bad_signature"); n != 2 {
				e.t.Errorf("%v messages counted bad_signature, want 2", n)
			}
		}},
	{name: "signed-without-secret", what: "a subscriber without the secret unwraps signed messages and snapshots and applies them unverified",
		setup: func(e *env) {
			secret := []byte("conformance secret")
			e.msgWrap = func(b []byte) []byte { return envelope.Sign(secret, b) }
			e.snapWrap = e.msgWrap
			e.set("s", "vs")
			e.seq += 10
			e.snap["s"] = e.ev(event.TypeHot, "s")
			e.snap["s"].Seq = e.seq
			e.writeSnapshot()
		},
		run: func(e *env) {
			e.set("j", "vj")
			e.warm("s", "vs")
			e.publish(e.ev(event.TypeHot, "j"))
			e.sync()
			e.warm("j", "vj")
		}},
	{name: "node-restart-keeps-cache", what: "a node restart (its seq jumps to a new run) reloads the snapshot without emptying the cache: keys it still lists keep their values, keys it dropped go",
		run: func(e *env) {
			e.set("k", "v1")
			e.set("j", "vj")
			e.publish(e.ev(event.TypeHot, "k"), e.ev(event.TypeHot, "j"))
			e.sync()
			e.warm("k", "v1")
			e.warm("j", "vj")
			reloads := e.stat("reloads")
			// The new run counts from its start time, far ahead; its
			// section lists k, not j.
			e.seq = uint64(time.Now().UnixMicro()) + 1e9
			delete(e.snap, "j")
			e.snap["k"].Seq = e.seq
			e.writeSnapshot()
			e.publish(e.ev(event.TypeHot, "other"))
			e.sync()
			e.waitReload(reloads)
			e.expectGets("k", "v1", 0, 0, 0)
			e.expectGets("j", "vj", 1, 1)
		}},
	{name: "channel-outage", what: "with the channel's Redis stopped, held keys keep being served past their hot entry's ttl, refreshed from the cache server (the staleness bound holds); the shim resynchronises from the snapshot when the channel returns",
		setup: func(e *env) {
			port := testutil.FreePort(e.t)
			srv := testutil.StartRedisOn(e.t, port)
			e.chanC = redis.NewClient(&redis.Options{Addr: srv.Addr})
			e.t.Cleanup(func() { e.chanC.Close() })
			e.cfg.ChannelAddr = srv.Addr
			e.cfg.LocalTTLms, e.cfg.StaleGraceMs = 100, 100
			e.outage = srv
		},
		run: func(e *env) {
			e.set("k", "v1")
			hot := e.ev(event.TypeHot, "k")
			hot.TTLms = 1500
			e.publish(hot)
			e.writeSnapshot()
			e.sync()
			e.warm("k", "v1")
			port := e.outage.Port
			e.outage.Stop()
			// Past the entry's 1.5 s ttl with the channel down.
			var r map[string]any
			d := e.remote(func() {
				r = e.a.do(map[string]any{"op": "load", "key": "k", "want": "v1", "ms": 2500, "threads": 2})
			})
			reads, _ := r["reads"].(float64)
			e.t.Logf("%v reads in 2.5 s with the channel down, %d GETs at the server", reads, d["get"])
			if reads == 0 || float64(d["get"]) > reads/10 || d["get"] == 0 {
				e.t.Errorf("channel down: %v reads, %d reached the server; want most served locally and refreshes going on", reads, d["get"])
			}
			if up, ok := e.a.do(map[string]any{"op": "stats"})["channel_up"].(bool); !ok || up {
				e.t.Errorf("stats channel_up = %v (reported: %v) during the outage, want false", up, ok)
			}
			// The bound holds: another client's write is seen within
			// LocalTTL + grace.
			e.a.send(map[string]any{"op": "watch", "key": "k", "want": "v2", "ms": 700})
			time.Sleep(100 * time.Millisecond)
			e.set("k", "v2")
			done := time.Now().UnixNano()
			w := e.a.recv()
			lastBad, _ := w["last_bad_ns"].(float64)
			if stale := time.Duration(int64(lastBad) - done); stale > 200*time.Millisecond {
				e.t.Errorf("during the outage a read started %v after another client's write saw the old value (bound 200ms)", stale)
			}
			// The channel comes back (empty, as a restarted Redis): the
			// publisher rewrites its snapshot, without k.
			reloads := e.stat("reloads")
			e.outage = testutil.StartRedisOn(e.t, port)
			delete(e.snap, "k")
			e.seq++
			e.writeSnapshot()
			// A reload attempt that failed while Redis was still down
			// counts too: wait for one that found the channel up.
			deadline := time.Now().Add(15 * time.Second)
			for {
				st := e.a.do(map[string]any{"op": "stats"})
				n, _ := st["reloads"].(float64)
				up, _ := st["channel_up"].(bool)
				if n > reloads && up {
					break
				}
				if time.Now().After(deadline) {
					e.t.Fatal("no resync after the channel came back")
				}
				time.Sleep(50 * time.Millisecond)
			}
			// A reload that ran before the section was written keeps the
			// node's keys and reads the snapshot again a second later.
			for deadline = time.Now().Add(5 * time.Second); ; {
				if hot, _ := e.a.do(map[string]any{"op": "hot", "key": "k"})["hot"].(bool); !hot {
					break
				}
				if time.Now().After(deadline) {
					e.t.Fatal("k still hot 5 s after the channel came back with a section without it")
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond)
			e.expectGets("k", "v2", 1, 1)
		}},
	{name: "channel-restart-empty", what: "the channel's Redis restarts empty (no snapshot until the node's daemon rewrites its section): the reload keeps serving the node's keys, and applies the node's section once it is back (a key it no longer lists is dropped)",
		setup: func(e *env) {
			port := testutil.FreePort(e.t)
			srv := testutil.StartRedisOn(e.t, port)
			e.chanC = redis.NewClient(&redis.Options{Addr: srv.Addr})
			e.t.Cleanup(func() { e.chanC.Close() })
			e.cfg.ChannelAddr = srv.Addr
			e.cfg.LocalTTLms, e.cfg.StaleGraceMs = 100, 100
			e.outage = srv
		},
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.writeSnapshot()
			e.sync()
			e.warm("k", "v1")
			reloads := e.stat("reloads")
			port := e.outage.Port
			e.outage.Stop()
			e.outage = testutil.StartRedisOn(e.t, port)
			deadline := time.Now().Add(15 * time.Second)
			for {
				st := e.a.do(map[string]any{"op": "stats"})
				n, _ := st["reloads"].(float64)
				up, _ := st["channel_up"].(bool)
				if n > reloads && up {
					break
				}
				if time.Now().After(deadline) {
					e.t.Fatal("no resync after the channel came back")
				}
				time.Sleep(50 * time.Millisecond)
			}
			// The snapshot read found nothing for the node: k is still
			// served locally, refreshed from the cache server.
			var r map[string]any
			d := e.remote(func() {
				r = e.a.do(map[string]any{"op": "load", "key": "k", "want": "v1", "ms": 1000, "threads": 2})
			})
			reads, _ := r["reads"].(float64)
			if reads == 0 || float64(d["get"]) > reads/10 {
				e.t.Errorf("after reloading from an empty channel server: %v reads, %d reached the server; want k still served locally", reads, d["get"])
			}
			// The daemon rewrites its section, without k: the shim reads
			// the snapshot again and drops k.
			delete(e.snap, "k")
			e.seq++
			e.writeSnapshot()
			deadline = time.Now().Add(5 * time.Second)
			for {
				if hot, _ := e.a.do(map[string]any{"op": "hot", "key": "k"})["hot"].(bool); !hot {
					break
				}
				if time.Now().After(deadline) {
					e.t.Fatal("k still hot 5 s after its node's section was rewritten without it")
				}
				time.Sleep(50 * time.Millisecond)
			}
		}},
	{name: "cluster-slot-move", cluster: true, what: "on a cluster client, a hot key is served locally, and when its slot moves to another master mid-run reads go on without an error, see another client's writes within the bound, and are served locally again",
		setup: func(e *env) { e.cfg.LocalTTLms = 200 },
		run: func(e *env) {
			ctx := context.Background()
			const k = "hot{slotmove}"
			e.set(k, "v1")
			e.publish(e.ev(event.TypeHot, k))
			e.sync()
			e.warm(k, "v1")
			e.expectGets(k, "v1", 0, 0)
			src := e.owner(k)
			s, err := testutil.KeySlot(ctx, src, k)
			if err != nil {
				e.t.Fatal(err)
			}
			var dst string
			for _, a := range e.s.cluster.Addrs {
				if a != src {
					dst = a
					break
				}
			}
			e.a.send(map[string]any{"op": "load", "key": k, "want": "v1", "ms": 1500, "threads": 2})
			time.Sleep(300 * time.Millisecond)
			if err := testutil.MoveSlot(ctx, s, src, dst, e.s.cluster.Addrs); err != nil {
				e.t.Fatal(err)
			}
			r := e.a.recv()
			if bad, _ := r["bad"].(float64); bad != 0 {
				e.t.Errorf("%v of %v reads during the slot move returned another value", bad, r["reads"])
			}
			// Another client writes at the new owner.
			e.s.clusterC.ReloadState(ctx)
			e.a.send(map[string]any{"op": "watch", "key": k, "want": "v2", "ms": 800})
			time.Sleep(100 * time.Millisecond)
			e.set(k, "v2")
			done := time.Now().UnixNano()
			w := e.a.recv()
			lastBad, _ := w["last_bad_ns"].(float64)
			if stale := time.Duration(int64(lastBad) - done); stale > 300*time.Millisecond {
				e.t.Errorf("after the move a read started %v after another client's write saw the old value (bound 300ms)", stale)
			}
			e.publish(e.ev(event.TypeHot, k)) // the new owner's daemon reports it
			e.sync()
			time.Sleep(250 * time.Millisecond)
			e.expectGets(k, "v2", 1, 0, 0)
		}},
	{name: "cluster-invalidate-readers-wait", cluster: true, what: "on a cluster client, after an invalidate message, concurrent reads of the key cost its master one read while the refresh is in flight, not one each; all get the new value",
		setup: readersWaitSetup, run: invalidateReadersWait},
	{name: "cluster-invalidate-hash-readers-wait", cluster: true, what: "on a cluster client, after an invalidate message, concurrent HGET/HMGET/HGETALL of a hash cost its master one HGETALL while the refresh is in flight, not one read each; all get the new value",
		setup: readersWaitSetup, run: invalidateHashReadersWait},
}
