package conformance

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client/event"
)

// tcase is one row of the conformance table in docs/client-shim.md.
type tcase struct {
	name string
	// what the row says, in the table's words.
	what string
	run  func(e *env)
	// setup adjusts the adapter's configuration before it starts.
	setup func(e *env)
	// cluster: the case runs in the shims' cluster modes (against a real
	// cluster) instead of their standalone ones.
	cluster bool
}

// applies reports whether the case runs in mode.
func (c *tcase) applies(mode string) bool { return c.cluster == isClusterMode(mode) }

// isClusterMode reports whether a shim's mode drives a cluster client
// ("cluster", or a client form of one such as Python's "asyncio-cluster"):
// its cases run against the shim's real cluster.
func isClusterMode(mode string) bool { return mode == "cluster" || strings.HasSuffix(mode, "-cluster") }

// pending lists cases a shim's mode does not pass yet ("shim/mode" -> case
// -> reason): they are skipped there, and the table in docs/client-shim.md
// shows them as not passing. Remove an entry as soon as the shim gains the
// feature.
var pending = map[string]map[string]string{}

var cases = []tcase{
	{name: "snapshot-on-start", what: "keys in the snapshot are hot on start (subscribe, then read the snapshot)",
		setup: func(e *env) {
			e.set("k", "v1")
			e.seq += 10
			e.snap["k"] = e.ev(event.TypeHot, "k")
			e.snap["k"].Seq = e.seq
			e.writeSnapshot()
		},
		run: func(e *env) { e.warm("k", "v1") }},
	{name: "hot-message-admission", what: "a hot message makes a key hot; the first read only records it, the second fetches it, later reads are local",
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			e.expectGets("k", "v1", 0, 0, 0)
		}},
	{name: "not-hot-passes", what: "keys that are not hot always go to Redis",
		run: func(e *env) {
			e.set("k", "v1")
			e.set("other", "x")
			e.publish(e.ev(event.TypeHot, "other"))
			e.sync()
			e.expectGets("k", "v1", 1, 1, 1, 1, 1)
		}},
	{name: "server-ns-filter", what: "events for another server, DB, protocol or a prefix entry are ignored; an empty server (manual) applies",
		run: func(e *env) {
			for _, k := range []string{"srv", "ns", "proto", "prefix", "manual", "mine"} {
				e.set(k, "v")
			}
			srv := e.ev(event.TypeHot, "srv")
			srv.Server = "10.255.0.1:6379"
			ns := e.ev(event.TypeHot, "ns")
			ns.NS = "1"
			proto := e.ev(event.TypeHot, "proto")
			proto.Proto = "memcache"
			prefix := e.ev(event.TypeHot, "prefix")
			prefix.Prefix = true
			manual := e.ev(event.TypeHot, "manual")
			manual.Server, manual.Source, manual.Node = "", event.SourceManual, "manual@host"
			manual.Seq = uint64(time.Now().UnixMicro())
			e.publish(srv, ns, proto, prefix, manual, e.ev(event.TypeHot, "mine"))
			e.sync()
			for _, k := range []string{"srv", "ns", "proto", "prefix"} {
				e.expectGets(k, "v", 1, 1, 1, 1)
			}
			e.warm("manual", "v")
			e.warm("mine", "v")
		}},
	{name: "missing-key-cached", what: "a hot key that does not exist is cached as missing",
		run: func(e *env) {
			e.publish(e.ev(event.TypeHot, "nokey"))
			e.sync()
			e.warm("nokey", nil)
		}},
	{name: "local-ttl-refresh", what: "a value is served for the local TTL, then one read refreshes it",
		setup: func(e *env) { e.cfg.LocalTTLms = 500 },
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			time.Sleep(550 * time.Millisecond)
			e.expectGets("k", "v1", 1, 0)
		}},
	{name: "single-caller-renewal", what: "when a value expires, exactly one of many concurrent readers goes to Redis; the others get the current value",
		setup: func(e *env) { e.cfg.LocalTTLms, e.cfg.StaleGraceMs = 500, 3000 },
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			time.Sleep(550 * time.Millisecond)
			var vals []any
			d := e.remote(func() { vals, _ = e.a.do(map[string]any{"op": "burst", "key": "k", "n": 32})["values"].([]any) })
			if d["get"] != 1 {
				e.t.Errorf("32 concurrent reads of an expired value: %d GETs reached Redis, want 1", d["get"])
			}
			e.expectBurst(vals, 32, "v1")
		}},
	{name: "hot-entry-lapses", what: "a key whose hot entry is not refreshed within ttl_ms stops being served",
		run: func(e *env) {
			e.set("k", "v1")
			ev := e.ev(event.TypeHot, "k")
			ev.TTLms = 800
			e.deadline = time.Now().Add(800 * time.Millisecond)
			e.publish(ev)
			e.sync()
			e.warm("k", "v1")
			time.Sleep(time.Until(e.deadline) + 300*time.Millisecond)
			e.deadline = time.Time{}
			e.expectGets("k", "v1", 1, 1, 1)
		}},
	{name: "invalidate-event", what: "an invalidate message drops the value; the key stays hot",
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			e.set("k", "v2") // a write the shim cannot see
			e.expectGets("k", "v1", 0)
			e.publish(e.ev(event.TypeInvalidate, "k"))
			e.sync()
			e.expectGets("k", "v2", 1, 0)
		}},
	{name: "invalidate-readers-wait", what: "after an invalidate message, concurrent reads of the key cost Redis one read while the refresh is in flight, not one each; all get the new value",
		setup: readersWaitSetup, run: invalidateReadersWait},
	{name: "invalidate-hash-readers-wait", what: "after an invalidate message, concurrent HGET/HMGET/HGETALL of a hash cost Redis one HGETALL while the refresh is in flight, not one read each; all get the new value",
		setup: readersWaitSetup, run: invalidateHashReadersWait},
	{name: "cold-event", what: "a cold message stops caching the key",
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			e.publish(e.ev(event.TypeCold, "k"))
			e.sync()
			e.expectGets("k", "v1", 1, 1, 1)
		}},
	{name: "node-independence", what: "one publisher's cold does not end another's hot",
		run: func(e *env) {
			e.set("k", "v1")
			b := e.ev(event.TypeHot, "k")
			b.Node, b.Seq = "sniffer-2", 77
			e.publish(e.ev(event.TypeHot, "k"), b)
			e.publish(e.ev(event.TypeCold, "k"))
			e.sync()
			e.warm("k", "v1")
		}},
	{name: "write-same-client", what: "a write through the same client drops the key: the next read sees the new value",
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			e.a.do(map[string]any{"op": "set", "key": "k", "value": "v2"})
			e.expectGets("k", "v2", 1, 0)
			e.a.do(map[string]any{"op": "del", "key": "k"})
			e.expectGets("k", nil, 1, 0)
		}},
	{name: "write-pipeline", what: "writes inside a pipeline drop the key",
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			e.a.do(map[string]any{"op": "pipeline_set", "key": "k", "value": "v2"})
			e.expectGets("k", "v2", 1, 0)
		}},
	{name: "write-key-specs", what: "written keys come from the COMMAND key specs: MSET drops all its keys, RENAME both, FLUSHDB everything",
		run: func(e *env) {
			for _, k := range []string{"a", "b", "c", "d"} {
				e.set(k, "v1")
			}
			e.publish(e.ev(event.TypeHot, "a"), e.ev(event.TypeHot, "b"), e.ev(event.TypeHot, "c"), e.ev(event.TypeHot, "d"))
			e.sync()
			for _, k := range []string{"a", "b", "c", "d"} {
				e.warm(k, "v1")
			}
			e.a.do(map[string]any{"op": "do", "args": []string{"MSET", "a", "x", "b", "y"}})
			e.expectGets("a", "x", 1, 0)
			e.expectGets("b", "y", 1, 0)
			e.a.do(map[string]any{"op": "do", "args": []string{"RENAME", "c", "d"}})
			e.expectGets("c", nil, 1, 0)
			e.expectGets("d", "v1", 1, 0)
			e.a.do(map[string]any{"op": "do", "args": []string{"FLUSHDB"}})
			e.expectGets("a", nil, 1, 0)
		}},
	{name: "multi-exec-not-served", what: "reads inside MULTI/EXEC go to Redis",
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			var v any
			d := e.remote(func() { v = e.a.do(map[string]any{"op": "multi_get", "key": "k"})["value"] })
			if d["get"] != 1 || d["exec"] != 1 || v != "v1" {
				e.t.Errorf("GET in MULTI/EXEC: %v, Redis saw %v", v, d)
			}
		}},
	{name: "watch-not-served", what: "reads after WATCH (before EXEC) go to Redis",
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			var v any
			d := e.remote(func() { v = e.a.do(map[string]any{"op": "watch_get", "key": "k"})["value"] })
			if d["watch"] != 1 || d["get"] != 2 || v != "v1" {
				e.t.Errorf("WATCH, GET, MULTI, GET, EXEC: %v; Redis saw %v, want watch 1 get 2", v, d)
			}
		}},
	{name: "pipeline-read", what: "a read inside a non-transactional pipeline returns the current value, also right after a write through the same client; a pipeline that writes is sent whole, so its reads see its writes",
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			if v := e.a.do(map[string]any{"op": "pipeline_get", "key": "k"})["value"]; v != "v1" {
				e.t.Errorf("pipelined GET = %v, want v1", v)
			}
			e.a.do(map[string]any{"op": "set", "key": "k", "value": "v2"})
			if v := e.a.do(map[string]any{"op": "pipeline_get", "key": "k"})["value"]; v != "v2" {
				e.t.Errorf("pipelined GET after SET v2 = %v", v)
			}
			// A pipeline that writes is sent whole: its reads see its writes.
			var v any
			d := e.remote(func() { v = e.a.do(map[string]any{"op": "pipeline_write_read", "key": "k", "value": "v3"})["value"] })
			if v != "v3" || d["set"] != 1 || d["get"] != 1 {
				e.t.Errorf("pipeline SET k v3, GET k: GET = %v; Redis saw %v", v, d)
			}
			e.expectGets("k", "v3", 1, 0)
		}},
	{name: "pipeline-served", what: "a hot read inside a non-transactional pipeline is answered locally",
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			var v any
			d := e.remote(func() { v = e.a.do(map[string]any{"op": "pipeline_get", "key": "k"})["value"] })
			if d["get"] != 0 || v != "v1" {
				e.t.Errorf("pipelined GET: %v, Redis saw %v, want nothing", v, d)
			}
		}},
	{name: "mget-partial", what: "MGET serves hot members locally and sends only the rest",
		run: func(e *env) {
			e.set("a", "va")
			e.set("b", "vb")
			e.publish(e.ev(event.TypeHot, "a"))
			e.sync()
			e.warm("a", "va")
			var vals []any
			d := e.remote(func() {
				vals, _ = e.a.do(map[string]any{"op": "mget", "keys": []string{"a", "b", "nope"}})["values"].([]any)
			})
			if fmt.Sprint(vals) != "[va vb <nil>]" || d["mget"] != 1 || d["get"] != 0 {
				e.t.Errorf("MGET a b nope = %v; Redis saw %v", vals, d)
			}
			d = e.remote(func() { vals, _ = e.a.do(map[string]any{"op": "mget", "keys": []string{"a", "a"}})["values"].([]any) })
			if fmt.Sprint(vals) != "[va va]" || len(d) != 0 {
				e.t.Errorf("MGET a a = %v; Redis saw %v, want nothing", vals, d)
			}
		}},
	{name: "mget-nil-not-cached", what: "an MGET nil is not cached as missing (MGET also answers nil for a key of another type): a later GET gets WRONGTYPE",
		run: func(e *env) {
			e.s.cacheC.HSet(context.Background(), "h", "f", "v")
			e.publish(e.ev(event.TypeHot, "h"))
			e.sync()
			for range 3 {
				if vals := e.a.do(map[string]any{"op": "mget", "keys": []string{"h"}})["values"]; fmt.Sprint(vals) != "[<nil>]" {
					e.t.Errorf("MGET h = %v", vals)
				}
			}
			e.a.mu.Lock()
			e.a.send(map[string]any{"op": "get", "key": "h"})
			var out map[string]any
			e.a.read(&out)
			e.a.mu.Unlock()
			if msg, _ := out["error"].(string); !strings.Contains(msg, "WRONGTYPE") {
				e.t.Errorf("GET of a hash after MGETs = %v, want the server's WRONGTYPE", out)
			}
		}},
	{name: "big-hash-sized-first", what: "a hot hash with more fields than the maximum (1000 by default) is sized with HLEN, never fetched whole, and the verdict is kept",
		run: func(e *env) {
			args := make([]any, 0, 3000)
			for i := range 1500 {
				args = append(args, "f"+strconv.Itoa(i), "v")
			}
			e.s.cacheC.HSet(context.Background(), "big", args...)
			e.publish(e.ev(event.TypeHot, "big"))
			e.sync()
			var vals []any
			d := e.remote(func() {
				for range 5 {
					vals = append(vals, e.a.do(map[string]any{"op": "hget", "key": "big", "field": "f7"})["value"])
				}
			})
			if fmt.Sprint(vals) != "[v v v v v]" || d["hgetall"] != 0 || d["hlen"] != 1 {
				e.t.Errorf("HGET big f7 x5 = %v; Redis saw %v, want hlen 1, no hgetall", vals, d)
			}
		}},
	{name: "hash-reads", what: "HGET/HMGET/HGETALL of a hot hash are served from one cached HGETALL; HSET drops it",
		run: func(e *env) {
			e.s.cacheC.HSet(context.Background(), "h", "f1", "x", "f2", "y")
			e.publish(e.ev(event.TypeHot, "h"))
			e.sync()
			e.a.do(map[string]any{"op": "hgetall", "key": "h"})
			e.a.do(map[string]any{"op": "hgetall", "key": "h"})
			var r1, r2, r3 map[string]any
			d := e.remote(func() {
				r1 = e.a.do(map[string]any{"op": "hget", "key": "h", "field": "f1"})
				r2 = e.a.do(map[string]any{"op": "hmget", "key": "h", "fields": []string{"f2", "f9"}})
				r3 = e.a.do(map[string]any{"op": "hgetall", "key": "h"})
			})
			if r1["value"] != "x" || fmt.Sprint(r2["values"]) != "[y <nil>]" || fmt.Sprint(r3["hash"]) != "map[f1:x f2:y]" || len(d) != 0 {
				e.t.Errorf("hash reads %v %v %v; Redis saw %v, want nothing", r1, r2, r3, d)
			}
			e.a.do(map[string]any{"op": "hset", "key": "h", "field": "f1", "value": "z"})
			d = e.remote(func() { r1 = e.a.do(map[string]any{"op": "hget", "key": "h", "field": "f1"}) })
			if r1["value"] != "z" || d["hgetall"]+d["hget"] != 1 {
				e.t.Errorf("after HSET: %v; Redis saw %v", r1, d)
			}
		}},
	{name: "seq-gap-reload", what: "a seq gap reloads the snapshot; keys it still lists keep their cached values (the local TTL bounds them), keys it no longer lists are dropped",
		run: func(e *env) {
			e.set("k", "v1")
			e.set("j", "vj")
			e.publish(e.ev(event.TypeHot, "k"), e.ev(event.TypeHot, "j"))
			e.sync()
			e.warm("k", "v1")
			e.warm("j", "vj")
			e.set("k", "v2") // unseen write; its invalidate is "lost" in the gap
			reloads := e.stat("reloads")
			e.seq += 5
			delete(e.snap, "j") // went cold in the gap
			e.writeSnapshot()
			e.publish(e.ev(event.TypeHot, "other"))
			e.sync()
			e.waitReload(reloads)
			e.expectGets("k", "v1", 0, 0)
			e.expectGets("j", "vj", 1, 1)
		}},
	{name: "channel-reconnect", what: "a lost subscription is restored by itself and reloads the snapshot; cached values are kept (the local TTL bounds them)",
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			e.writeSnapshot()
			reloads := e.stat("reloads")
			// The channel server drops every subscriber connection; a write
			// happens meanwhile and its invalidate is never seen.
			if err := e.s.chanC.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
				e.t.Fatal(err)
			}
			e.set("k", "v2")
			e.waitReload(reloads)
			e.expectGets("k", "v1", 0)
			// And the restored subscription carries messages again.
			e.publish(e.ev(event.TypeCold, "k"))
			e.sync()
			e.expectGets("k", "v2", 1, 1)
		}},
	{name: "stale-seq-ignored", what: "a message with a seq already seen is ignored",
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			old := e.ev(event.TypeCold, "k")
			old.Seq = e.seq - 1
			e.publish(old)
			e.sync()
			e.expectGets("k", "v1", 0)
		}},
	{name: "publisher-restart", what: "a seq far below the last one (a restarted publisher) reloads the snapshot, keeping cached values",
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			reloads := e.stat("reloads")
			e.seq = 5
			e.writeSnapshot()
			e.publish(e.ev(event.TypeHot, "other"))
			e.sync()
			e.waitReload(reloads)
			e.expectGets("k", "v1", 0, 0)
		}},
	{name: "batch-v2", what: `the v2 batch envelope {"v":2,"node":…,"events":[…]} is applied event by event, in seq`,
		run: func(e *env) {
			e.set("a", "va")
			e.set("b", "vb")
			reloads := e.stat("reloads")
			e.batch(e.ev(event.TypeHot, "a"), e.ev(event.TypeHot, "b"))
			e.sync()
			e.warm("a", "va")
			e.warm("b", "vb")
			e.set("a", "va2")
			e.batch(e.ev(event.TypeInvalidate, "a"), e.ev(event.TypeCold, "b"))
			e.publish(e.ev(event.TypeHot, "c")) // follows the batch's seqs: no gap
			e.sync()
			e.expectGets("a", "va2", 1, 0)
			e.expectGets("b", "vb", 1, 1)
			if r := e.stat("reloads"); r != reloads {
				e.t.Errorf("%v snapshot reloads after batches in sequence, want none", r-reloads)
			}
		}},
	{name: "cacheable-false", what: "a key marked cacheable:false is never cached, and a cached one is dropped",
		run: func(e *env) {
			e.set("u", "vu")
			e.set("k", "v1")
			u := e.ev(event.TypeHot, "u")
			u.Uncacheable = true
			e.publish(u, e.ev(event.TypeHot, "k"))
			e.sync()
			e.expectGets("u", "vu", 1, 1, 1, 1)
			e.warm("k", "v1")
			k := e.ev(event.TypeHot, "k")
			k.Uncacheable = true
			e.publish(k)
			e.sync()
			e.expectGets("k", "v1", 1, 1, 1)
		}},
	{name: "binary-key", what: "key_b64 keys (not UTF-8) are matched as bytes",
		run: func(e *env) {
			key := "bin\xff\xfe"
			e.set(key, "vb")
			e.publish(e.ev(event.TypeHot, key))
			e.sync()
			b64 := base64.StdEncoding.EncodeToString([]byte(key))
			for i, want := range []int{1, 1, 0, 0} {
				var v any
				d := e.remote(func() { v = e.a.do(map[string]any{"op": "get", "key_b64": b64})["value"] })
				if d["get"] != want || v != "vb" {
					e.t.Errorf("read %d: %v, %d GETs at Redis, want %d", i+1, v, d["get"], want)
				}
			}
		}},
	{name: "bad-messages", what: "undecodable messages and oversized batches are counted and skipped; the shim keeps working",
		run: func(e *env) {
			e.set("k", "v1")
			e.raw("not json")
			e.raw(`{"v":1,"seq":`)
			e.raw(`{"v":1,"seq":"x","type":"hot","key":"k"}`)
			e.raw(`{"v":2,"node":"sniffer-1","events":[` + strings.Repeat(`{},`, event.MaxBatchEvents) + `{}]}`)
			e.raw(`{"v":1,"seq":1,"type":"hot","key_b64":"!!!"}`)
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
		}},
	{name: "hot-mode-ends", what: "hot-running mode ends when no hot message came for the linger time: the cache empties",
		setup: func(e *env) { e.cfg.LingerMs = 800 },
		run: func(e *env) {
			e.set("k", "v1")
			e.deadline = time.Now().Add(800 * time.Millisecond)
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			time.Sleep(time.Until(e.deadline) + 600*time.Millisecond)
			e.deadline = time.Time{}
			if e.stat("hot_mode") != 0 && e.a.do(map[string]any{"op": "stats"})["hot_mode"] != false {
				e.t.Error("still in hot-running mode")
			}
			e.expectGets("k", "v1", 1, 1)
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
		}},
	{name: "manual-until-cold", what: "a manual entry with ttl_ms 0 stays hot (and the mode on) until cold",
		setup: func(e *env) { e.cfg.LingerMs = 600 },
		run: func(e *env) {
			e.set("k", "v1")
			m := e.ev(event.TypeHot, "k")
			m.Server, m.Source, m.Node, m.TTLms = "", event.SourceManual, "manual@host", 0
			m.Seq = uint64(time.Now().UnixMicro())
			e.publish(m)
			e.sync()
			e.warm("k", "v1")
			time.Sleep(1000 * time.Millisecond)
			e.expectGets("k", "v1", 0)
			c := e.ev(event.TypeCold, "k")
			c.Server, c.Source, c.Node = "", event.SourceManual, "manual@other"
			c.Seq = uint64(time.Now().UnixMicro())
			e.publish(c)
			e.sync()
			e.expectGets("k", "v1", 1, 1)
		}},
	{name: "bounded-entries", what: "the cache holds at most max_entries keys",
		setup: func(e *env) { e.cfg.MaxEntries = 3 },
		run: func(e *env) {
			var evs []*event.Event
			for i := range 8 {
				k := "k" + strconv.Itoa(i)
				e.set(k, "v")
				evs = append(evs, e.ev(event.TypeHot, k))
			}
			e.publish(evs...)
			e.sync()
			for i := range 8 {
				k := "k" + strconv.Itoa(i)
				e.get(k)
				e.get(k)
			}
			if n := e.stat("entries"); n > 3 || n < 1 {
				e.t.Errorf("%v entries cached, max 3", n)
			}
		}},
	{name: "absorbed-report", what: `a refresh read is followed on the same connection by ECHO "hotsniff:absorbed:1 <hits> <window_ms> <key>"; no ECHO when nothing was served`,
		setup: func(e *env) { e.cfg.LocalTTLms = 500 },
		run: func(e *env) {
			key := "item 7:\x01z"
			e.set(key, "v1")
			e.publish(e.ev(event.TypeHot, key))
			e.sync()
			mon := e.monitor()
			start := time.Now()
			e.warm(key, "v1") // the third read is the first local one
			e.expectGets(key, "v1", 0, 0, 0, 0)
			time.Sleep(550 * time.Millisecond)
			e.expectGets(key, "v1", 1, 0)
			time.Sleep(550 * time.Millisecond)
			e.expectGets(key, "v1", 1)
			time.Sleep(550 * time.Millisecond)
			e.expectGets(key, "v1", 1) // nothing served since the last report: no ECHO
			elapsed := time.Since(start)
			var reports [][]string
			lines := mon.settle(e)
			for i, l := range lines {
				if len(l.args) == 2 && strings.EqualFold(l.args[0], "echo") {
					// The read just before it on the same connection.
					var prev []string
					for j := i - 1; j >= 0; j-- {
						if lines[j].client == l.client {
							prev = lines[j].args
							break
						}
					}
					if len(prev) == 2 && strings.EqualFold(prev[0], "get") {
						prev[0] = "GET" // ioredis sends command names in lower case
					}
					reports = append(reports, []string{l.args[1], strings.Join(prev, " ")})
				}
			}
			re := regexp.MustCompile(`^hotsniff:absorbed:1 ([0-9]+) ([0-9]+) (.*)$`)
			var hits []int
			for _, r := range reports {
				m := re.FindStringSubmatch(r[0])
				if m == nil || m[3] != key || r[1] != "GET "+key {
					e.t.Errorf("report %q after %q", r[0], r[1])
					continue
				}
				h, _ := strconv.Atoi(m[1])
				w, _ := strconv.Atoi(m[2])
				if w < 1 || time.Duration(w)*time.Millisecond > elapsed {
					e.t.Errorf("report %q: window %d ms, the test took %v", r[0], w, elapsed)
				}
				hits = append(hits, h)
			}
			if e.slipped {
				e.t.Logf("reported hits %v (not checked: some reads missed their window)", hits)
			} else if fmt.Sprint(hits) != "[5 1]" {
				e.t.Errorf("reported hits %v, want [5 1] (5 local reads before the first refresh, 1 before the second, none before the third)", hits)
			}
		}},
	{name: "absorbed-report-mget", what: "an MGET refresh carries the report only when it names that one key (the daemon pairs a report with a one-key read)",
		setup: func(e *env) { e.cfg.LocalTTLms = 500 },
		run: func(e *env) {
			e.set("k", "v1")
			e.set("other", "x")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			mon := e.monitor()
			e.warm("k", "v1")
			e.expectGets("k", "v1", 0, 0) // 3 local hits in all
			time.Sleep(550 * time.Millisecond)
			e.a.do(map[string]any{"op": "mget", "keys": []string{"k"}})
			e.expectGets("k", "v1", 0)
			time.Sleep(550 * time.Millisecond)
			e.a.do(map[string]any{"op": "mget", "keys": []string{"k", "other"}})
			var got []string
			lines := mon.settle(e)
			for i, l := range lines {
				if len(l.args) == 2 && strings.EqualFold(l.args[0], "echo") {
					prev := ""
					for j := i - 1; j >= 0; j-- {
						if lines[j].client == l.client {
							prev = strings.ToUpper(lines[j].args[0]) + " " + strings.Join(lines[j].args[1:], " ")
							break
						}
					}
					h, _, _ := strings.Cut(strings.TrimPrefix(l.args[1], "hotsniff:absorbed:1 "), " ")
					got = append(got, prev+" -> "+h)
				}
			}
			if want := "[MGET k -> 3]"; e.slipped {
				e.t.Logf("reports %v (not checked: some reads missed their window)", got)
			} else if fmt.Sprint(got) != want {
				e.t.Errorf("reports %v, want %s (none after the two-key MGET)", got, want)
			}
		}},
	{name: "absorbed-refused", what: "an error reply to the report (ACL, unknown command) is logged once and reporting stops; reads are unaffected",
		setup: func(e *env) {
			ctx := context.Background()
			if err := e.s.cacheC.Do(ctx, "ACL", "SETUSER", "noecho", "on", ">pw", "~*", "&*", "+@all", "-echo").Err(); err != nil {
				e.t.Fatal(err)
			}
			e.cfg.Username, e.cfg.Password, e.cfg.LocalTTLms = "noecho", "pw", 500
		},
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			rejected := e.cmdstats()["echo"][1]
			e.warm("k", "v1")
			for range 3 {
				e.expectGets("k", "v1", 0, 0)
				time.Sleep(550 * time.Millisecond)
				e.expectGets("k", "v1", 1)
			}
			if n := e.cmdstats()["echo"][1] - rejected; n > 1 || (n == 0 && !e.slipped) {
				e.t.Errorf("%d reports refused by ACL, want exactly 1 (stop after the first error)", n)
			}
		}},
	{name: "foreign-write-bound", what: "after another client's write, reads see the new value within local TTL + grace (150 ms by default) with no invalidation at all",
		setup: func(e *env) { e.cfg.LocalTTLms, e.cfg.StaleGraceMs = 50, 100 },
		run: func(e *env) {
			e.set("k", "v1")
			e.publish(e.ev(event.TypeHot, "k"))
			e.sync()
			e.warm("k", "v1")
			e.a.send(map[string]any{"op": "watch", "key": "k", "want": "v2", "ms": 700})
			time.Sleep(200 * time.Millisecond)
			e.set("k", "v2")
			done := time.Now().UnixNano()
			r := e.a.recv()
			reads, _ := r["reads"].(float64)
			lastBad, _ := r["last_bad_ns"].(float64)
			stale := time.Duration(int64(lastBad) - done)
			if stale < 0 {
				stale = 0
			}
			e.t.Logf("%s: %v reads; the last read that saw the old value started %v after the write", e.lang.name, reads, stale)
			if stale > 150*time.Millisecond {
				e.t.Errorf("stale %v after the write, bound 150ms", stale)
			}
		}},
}

// readersWaitSetup gives the readers-wait cases a value that outlives
// them and a grace longer than the server is held: only the invalidate
// drops the value, and a reader may wait out the whole refresh.
func readersWaitSetup(e *env) { e.cfg.LocalTTLms, e.cfg.StaleGraceMs = 5000, 3000 }

// invalidateReadersWait: 16 concurrent GETs of a hot key after an
// invalidate, the server holding the key held 300 ms (on a cluster, the
// key's master), cost Redis the one refresh GET (on a cluster, counted on
// every master: the readers must not go anywhere else either), and all
// read the new value.
func invalidateReadersWait(e *env) {
	e.set("k", "v1")
	e.publish(e.ev(event.TypeHot, "k"))
	e.sync()
	e.warm("k", "v1")
	e.set("k", "v2")
	// A late or repeated invalidate (a daemon that was stalled) hits a key
	// whose value the shim holds: its readers must not all go to Redis
	// while the one refresh is slow.
	e.publish(e.ev(event.TypeInvalidate, "k"))
	e.sync()
	before := e.cmdstats()
	held := e.holdCache("k", 300*time.Millisecond)
	vals, _ := e.a.do(map[string]any{"op": "burst", "key": "k", "n": 16})["values"].([]any)
	<-held
	if n := e.cmdstats()["get"][0] - before["get"][0]; n != 1 {
		e.t.Errorf("16 concurrent reads after an invalidate, %s held 300 ms: %d GETs reached Redis, want the 1 refresh", e.home("k"), n)
	}
	e.expectBurst(vals, 16, "v2")
}

// invalidateHashReadersWait is invalidateReadersWait for a hash: 16
// concurrent HGET/HMGET/HGETALL cost its server the one HGETALL refresh.
func invalidateHashReadersWait(e *env) {
	ctx := context.Background()
	if err := e.cache().HSet(ctx, "h", "f1", "v1", "f2", "x").Err(); err != nil {
		e.t.Fatal(err)
	}
	e.publish(e.ev(event.TypeHot, "h"))
	e.sync()
	// Admitted (the first read records the key, the second fetches it),
	// then served locally.
	e.a.do(map[string]any{"op": "hgetall", "key": "h"})
	e.a.do(map[string]any{"op": "hgetall", "key": "h"})
	var r map[string]any
	if d := e.remote(func() { r = e.a.do(map[string]any{"op": "hget", "key": "h", "field": "f1"}) }); r["value"] != "v1" || len(d) != 0 {
		e.t.Fatalf("HGET h f1 of the cached hash = %v; Redis saw %v, want v1 and nothing", r["value"], d)
	}
	if err := e.cache().HSet(ctx, "h", "f1", "v2").Err(); err != nil {
		e.t.Fatal(err)
	}
	e.publish(e.ev(event.TypeInvalidate, "h"))
	e.sync()
	before := e.cmdstats()
	held := e.holdCache("h", 300*time.Millisecond)
	vals, _ := e.a.do(map[string]any{"op": "hburst", "key": "h", "field": "f1", "n": 16})["values"].([]any)
	<-held
	after := e.cmdstats()
	d := map[string]int{}
	for _, c := range []string{"hgetall", "hget", "hmget", "hlen"} {
		d[c] = after[c][0] - before[c][0]
	}
	e.t.Logf("16 hash reads after the invalidate (%s held): Redis saw %v", e.home("h"), d)
	if d["hgetall"] != 1 || d["hget"]+d["hmget"]+d["hlen"] != 0 {
		e.t.Errorf("16 concurrent hash reads after an invalidate, %s held 300 ms: Redis saw %v, want the 1 HGETALL refresh", e.home("h"), d)
	}
	e.expectBurst(vals, 16, "v2")
}

func TestConformance(t *testing.T) {
	only := os.Getenv("HOTSNIFF_CONFORMANCE_SHIMS")      // e.g. "go,python"; empty: all
	onlyModes := os.Getenv("HOTSNIFF_CONFORMANCE_MODES") // e.g. "pool,sync"; empty: all
	for _, l := range langs(t) {
		if only != "" && !strings.Contains(","+only+",", ","+l.name+",") {
			continue
		}
		t.Run(l.name, func(t *testing.T) {
			lt := t
			// The shims run side by side (own servers, own adapters): the
			// cases mostly wait on timers.
			t.Parallel()
			l.prepare(t)
			s := startServers(t)
			for _, mode := range l.modes {
				if onlyModes != "" && !strings.Contains(","+onlyModes+",", ","+mode+",") {
					continue
				}
				t.Run(mode, func(t *testing.T) {
					if isClusterMode(mode) {
						// Started by the first cluster mode that runs, it
						// lives as long as the shim's test: Python has two.
						s.startCluster(outliving{TB: t, owner: lt})
					}
					for _, c := range allCases() {
						if !c.applies(mode) {
							continue
						}
						t.Run(c.name, func(t *testing.T) {
							if why, ok := pending[l.name+"/"+mode][c.name]; ok {
								t.Skip("pending: " + why)
							}
							e := newEnv(t, l, mode, s)
							if isClusterMode(mode) {
								e.useCluster()
							}
							if c.setup != nil {
								c.setup(e)
							}
							if e.snap != nil && len(e.snap) == 0 {
								e.writeSnapshot()
							}
							e.start()
							c.run(e)
						})
					}
				})
			}
		})
	}
}

// outliving is a subtest's TB whose cleanups (and temporary directories)
// belong to owner, an enclosing test: what the subtest starts through it
// outlives the subtest, while its failures are the subtest's.
type outliving struct {
	testing.TB
	owner testing.TB
}

func (o outliving) Cleanup(f func()) { o.owner.Cleanup(f) }
func (o outliving) TempDir() string  { return o.owner.TempDir() }

var updateDoc = flag.Bool("update", false, "rewrite the conformance table in docs/client-shim.md")

const (
	tableBegin = "<!-- conformance table: generated by `go test ./internal/testing/conformance -run TestDocTable -update`; do not edit -->"
	tableEnd   = "<!-- end of conformance table -->"
)

// docTable renders the conformance table: one row per case, one column per
// shim and mode; ✓ runs and passes, ✗ is pending, – does not apply.
func docTable(t *testing.T) string {
	var b strings.Builder
	ls := langs(t)
	b.WriteString("| case | what it checks |")
	sep := "|---|---|"
	for _, l := range ls {
		for _, m := range l.modes {
			fmt.Fprintf(&b, " %s %s |", l.label, m)
			sep += "---|"
		}
	}
	b.WriteString("\n" + sep + "\n")
	for _, c := range allCases() {
		fmt.Fprintf(&b, "| `%s` | %s |", c.name, strings.ReplaceAll(c.what, "|", "\\|"))
		for _, l := range ls {
			for _, m := range l.modes {
				cell := "✓"
				if !c.applies(m) {
					cell = "–"
				} else if _, ok := pending[l.name+"/"+m][c.name]; ok {
					cell = "✗"
				}
				b.WriteString(" " + cell + " |")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestDocTable keeps docs/client-shim.md's conformance table what the suite
// runs; -update (or HOTSNIFF_UPDATE_DOCS=1) rewrites it.
func TestDocTable(t *testing.T) {
	const path = "../../../docs/client-shim.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no conformance table markers", path)
	}
	want := tableBegin + "\n" + docTable(t) + tableEnd
	if doc[i:j+len(tableEnd)] == want {
		return
	}
	if *updateDoc || os.Getenv("HOTSNIFF_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(doc[:i]+want+doc[j+len(tableEnd):]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the conformance table in docs/client-shim.md differs from the suite: run go test ./internal/testing/conformance -run TestDocTable -update")
}
