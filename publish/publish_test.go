package publish_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
	"github.com/redis/go-redis/v9"
)

var quiet = slog.New(slog.DiscardHandler)

func dial(t testing.TB, url string, to publish.TLSOptions) redis.UniversalClient {
	t.Helper()
	rdb, err := publish.Dial(url, to)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// subscribe returns the messages a plain go-redis subscriber receives; it
// returns only once the server confirmed the subscription.
func subscribe(t testing.TB, rdb redis.UniversalClient, channel string, sharded bool) <-chan *redis.Message {
	t.Helper()
	ctx := context.Background()
	var ps *redis.PubSub
	if sharded {
		ps = rdb.SSubscribe(ctx, channel)
	} else {
		ps = rdb.Subscribe(ctx, channel)
	}
	t.Cleanup(func() { ps.Close() })
	if _, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil {
		t.Fatalf("subscribe %s: %v", channel, err)
	}
	return ps.Channel(redis.WithChannelSize(100000))
}

func receive(t testing.TB, ch <-chan *redis.Message, n int, within time.Duration) []string {
	t.Helper()
	var out []string
	deadline := time.After(within)
	for len(out) < n {
		select {
		case m := <-ch:
			out = append(out, m.Payload)
		case <-deadline:
			t.Fatalf("received %d of %d messages in %v", len(out), n, within)
		}
	}
	return out
}

func newPublisher(t testing.TB, rdb redis.UniversalClient, opt publish.Options) *publish.Publisher {
	t.Helper()
	if opt.Logger == nil {
		opt.Logger = quiet
	}
	p, err := publish.New(rdb, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

// waitStats polls until cond holds: counters move just after Redis
// answers, so a subscriber may see a message a moment before them.
func waitStats(t testing.TB, p *publish.Publisher, cond func(publish.Stats) bool) publish.Stats {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		st := p.Stats()
		if cond(st) || time.Now().After(deadline) {
			return st
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func readSnapshot(t testing.TB, rdb redis.UniversalClient, channel string) *event.Snapshot {
	t.Helper()
	s, _, err := publish.ReadSnapshot(context.Background(), rdb, channel)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitSnapshot polls until cond holds for the snapshot.
func waitSnapshot(t testing.TB, rdb redis.UniversalClient, channel string, within time.Duration, cond func(*event.Snapshot) bool) *event.Snapshot {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := readSnapshot(t, rdb, channel)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(s)
			t.Fatalf("snapshot never matched: %s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func keysOf(s *event.Snapshot) map[string]*event.Event {
	m := map[string]*event.Event{}
	for _, e := range s.Keys {
		m[string(e.Key)] = e
	}
	return m
}

func nodeSeq(s *event.Snapshot, node string) (uint64, bool) {
	for _, n := range s.Nodes {
		if n.Node == node {
			return n.Seq, true
		}
	}
	return 0, false
}

var ts0 = time.Date(2026, 11, 29, 18, 0, 0, 123456000, time.UTC)

func hot(key string) *event.Event {
	return &event.Event{Type: event.TypeHot, Proto: "redis", Server: "10.0.0.5:6379", NS: "0",
		Key: []byte(key), QPS: 1843.5, TTLms: 60000, TS: ts0}
}

func TestPublishContractJSON(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := dial(t, "redis://"+r.Addr+"/0", publish.TLSOptions{})
	msgs := subscribe(t, rdb, "hk", false)
	p := newPublisher(t, rdb, publish.Options{Channel: "hk", Node: "cache-node-3", StartSeq: 41})

	e := hot("item:42")
	p.Emit(e)
	if e.Seq != 42 || e.Node != "cache-node-3" {
		t.Errorf("Emit stamped seq %d node %q, want 42 cache-node-3", e.Seq, e.Node)
	}
	bin := hot("")
	bin.Key = []byte{0xff, 0x00, 'a'}
	p.Emit(bin)
	p.Emit(&event.Event{Type: event.TypeInvalidate, Proto: "redis", Server: "10.0.0.5:6379", NS: "0", Key: []byte("item:42"), TTLms: 60000, TS: ts0})
	p.Emit(&event.Event{Type: event.TypeCold, Proto: "memcache", Server: "10.0.0.6:11211", Key: []byte("k é"), TS: ts0, Source: event.SourceManual})

	got := receive(t, msgs, 4, 3*time.Second)
	want0 := `{"v":1,"seq":42,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key":"item:42","qps":1843.5,"ttl_ms":60000,"ts":"2026-11-29T18:00:00.123456Z","source":"detected","node":"cache-node-3"}`
	if got[0] != want0 {
		t.Errorf("message 0:\n got %s\nwant %s", got[0], want0)
	}
	tsRE := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)
	for i, raw := range got {
		var m map[string]any
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatalf("message %d not JSON: %v", i, err)
		}
		if m["v"] != 1.0 || m["seq"] != float64(42+i) || m["node"] != "cache-node-3" {
			t.Errorf("message %d: v %v seq %v node %v", i, m["v"], m["seq"], m["node"])
		}
		if s, _ := m["ts"].(string); !tsRE.MatchString(s) {
			t.Errorf("message %d: ts %q", i, m["ts"])
		}
		_, hasKey := m["key"]
		_, hasB64 := m["key_b64"]
		if hasKey == hasB64 {
			t.Errorf("message %d: key %v key_b64 %v: want exactly one", i, hasKey, hasB64)
		}
	}
	var m1 map[string]any
	json.Unmarshal([]byte(got[1]), &m1)
	if m1["key_b64"] != "/wBh" {
		t.Errorf("non-UTF-8 key: key_b64 %v, want /wBh", m1["key_b64"])
	}
	var m2 map[string]any
	json.Unmarshal([]byte(got[2]), &m2)
	if _, ok := m2["qps"]; ok || m2["type"] != "invalidate" {
		t.Errorf("invalidate: %s", got[2])
	}
	var m3 map[string]any
	json.Unmarshal([]byte(got[3]), &m3)
	if m3["type"] != "cold" || m3["source"] != "manual" || m3["ns"] != "" || m3["key"] != "k é" || m3["ttl_ms"] != 0.0 {
		t.Errorf("cold: %s", got[3])
	}
	st := waitStats(t, p, func(st publish.Stats) bool { return st.Batches > 0 && st.QueueLen == 0 })
	if st.Published["hot"] != 2 || st.Published["invalidate"] != 1 || st.Published["cold"] != 1 || st.Dropped != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestSnapshotFollowsHotAndCold(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := dial(t, "redis://"+r.Addr, publish.TLSOptions{})
	p := newPublisher(t, rdb, publish.Options{Channel: "hk", Node: "n1", SnapshotInterval: 20 * time.Millisecond})
	p.Emit(hot("a"))
	p.Emit(hot("b"))
	b := hot("")
	b.Key = []byte{0xfe}
	p.Emit(b)
	p.Emit(&event.Event{Type: event.TypeInvalidate, Proto: "redis", Server: "10.0.0.5:6379", NS: "0", Key: []byte("a"), TS: ts0})
	p.Emit(&event.Event{Type: event.TypeCold, Proto: "redis", Server: "10.0.0.5:6379", NS: "0", Key: []byte("b"), TS: ts0})
	last := p.Stats().Seq
	s := waitSnapshot(t, rdb, "hk", 3*time.Second, func(s *event.Snapshot) bool {
		q, _ := nodeSeq(s, "n1")
		return q == last
	})
	k := keysOf(s)
	if len(k) != 2 || k["a"] == nil || k["\xfe"] == nil {
		t.Fatalf("snapshot keys %v, want a and \\xfe", k)
	}
	if s.V != 1 || s.Seq != last || s.Node != "n1" || len(s.Nodes) != 1 || s.Nodes[0].Keys != 2 {
		t.Errorf("snapshot header %+v nodes %+v", s, s.Nodes)
	}
	// The raw document must be readable by a naive client: key_b64 as is.
	raw, _ := rdb.Get(context.Background(), "hk:snapshot").Result()
	if !strings.Contains(raw, `"key_b64":"/g=="`) || !strings.HasPrefix(raw, `{"v":1,"seq":`) {
		t.Errorf("raw snapshot %s", raw)
	}
	if ttl := rdb.PTTL(context.Background(), "hk:snapshot").Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("snapshot ttl %v, want (0, 1m]", ttl)
	}
}

// countHook records the size of every pipeline the publisher sends.
type countHook struct{ pipelines, maxCmds, cmds atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() != "publish" {
			return next(ctx, cmds) // connection handshakes
		}
		h.pipelines.Add(1)
		h.cmds.Add(int64(len(cmds)))
		for {
			m := h.maxCmds.Load()
			if int64(len(cmds)) <= m || h.maxCmds.CompareAndSwap(m, int64(len(cmds))) {
				break
			}
		}
		return next(ctx, cmds)
	}
}

func TestBatchesIntoPipelines(t *testing.T) {
	r := testutil.StartRedis(t)
	sub := dial(t, "redis://"+r.Addr, publish.TLSOptions{})
	msgs := subscribe(t, sub, "hk", false)
	rdb := dial(t, "redis://"+r.Addr, publish.TLSOptions{})
	h := &countHook{}
	rdb.AddHook(h)
	p := newPublisher(t, rdb, publish.Options{Channel: "hk", Node: "n1", BatchWindow: 5 * time.Millisecond})
	const n = 1000
	for i := 0; i < n; i++ {
		p.Emit(hot(fmt.Sprintf("k%d", i)))
	}
	got := receive(t, msgs, n, 5*time.Second)
	for i, raw := range got {
		var e event.Event
		if err := json.Unmarshal([]byte(raw), &e); err != nil || string(e.Key) != fmt.Sprintf("k%d", i) {
			t.Fatalf("message %d out of order: %s", i, raw)
		}
	}
	if h.cmds.Load() < n || h.maxCmds.Load() < 50 || h.pipelines.Load() > n/10 {
		t.Errorf("pipelines %d carrying %d commands, largest %d: events were not batched",
			h.pipelines.Load(), h.cmds.Load(), h.maxCmds.Load())
	}
	st := waitStats(t, p, func(st publish.Stats) bool { return st.Published["hot"] == n })
	if st.Batches != uint64(h.pipelines.Load()) {
		t.Errorf("stats %+v, pipelines %d", st, h.pipelines.Load())
	}
}

func TestQueueBoundDropsWhileRedisDown(t *testing.T) {
	port := testutil.FreePort(t) // nothing listens
	rdb := dial(t, fmt.Sprintf("redis://127.0.0.1:%d?dial_timeout=200ms&max_retries=-1", port), publish.TLSOptions{})
	p := newPublisher(t, rdb, publish.Options{Channel: "hk", Node: "n1", QueueSize: 10, MaxBatch: 5, BatchWindow: time.Millisecond})
	var worst time.Duration
	for i := 0; i < 1000; i++ {
		t0 := time.Now()
		p.Emit(hot(fmt.Sprintf("k%d", i)))
		worst = max(worst, time.Since(t0))
		if i == 0 {
			time.Sleep(50 * time.Millisecond) // let the loop take a batch and fail
		}
	}
	st := waitStats(t, p, func(st publish.Stats) bool { return st.Errors > 0 })
	// At most QueueSize queued plus one batch held by the loop.
	if st.Dropped < 1000-15 || st.Dropped > 1000-10 || st.QueueLen != 10 {
		t.Errorf("dropped %d queue %d/%d, want 985..990 dropped and a full queue", st.Dropped, st.QueueLen, st.QueueCap)
	}
	if st.Connected || st.Errors == 0 {
		t.Errorf("stats %+v: want disconnected with errors", st)
	}
	if st.HotKeys != 1000 {
		t.Errorf("hot set %d, want 1000: dropped messages must still count in the snapshot", st.HotKeys)
	}
	if worst > 20*time.Millisecond {
		t.Errorf("slowest Emit took %v", worst)
	}
}

func TestCloseFlushes(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := dial(t, "redis://"+r.Addr, publish.TLSOptions{})
	msgs := subscribe(t, rdb, "hk", false)
	p, err := publish.New(rdb, publish.Options{Channel: "hk", Node: "n1", Logger: quiet, BatchWindow: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 300; i++ {
		p.Emit(hot(fmt.Sprintf("k%d", i)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	receive(t, msgs, 300, time.Second)
	if s := readSnapshot(t, rdb, "hk"); len(s.Keys) != 300 {
		t.Errorf("snapshot after close has %d keys", len(s.Keys))
	}
	p.Emit(hot("late"))
	if st := p.Stats(); st.Dropped != 1 {
		t.Errorf("emit after close: dropped %d", st.Dropped)
	}
}

func TestCloseGivesUpWhenRedisDown(t *testing.T) {
	rdb := dial(t, fmt.Sprintf("redis://127.0.0.1:%d?dial_timeout=100ms", testutil.FreePort(t)), publish.TLSOptions{})
	p, err := publish.New(rdb, publish.Options{Channel: "hk", Node: "n1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	p.Emit(hot("a"))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err = p.Close(ctx)
	if d := time.Since(t0); d > time.Second || err == nil {
		t.Errorf("close took %v with a 300ms context and returned %v", d, err)
	}
	if st := p.Stats(); st.Dropped != 1 {
		t.Errorf("close: err %v, stats %+v: the unsent event must count as dropped", err, st)
	}
}
