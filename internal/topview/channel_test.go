package topview

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gdamore/tcell/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
)

// rowsOf returns the fields of every table row of key.
func rowsOf(f frame, key string) [][]string {
	var out [][]string
	for _, l := range f.lines[3 : len(f.lines)-1] {
		fs := strings.Fields(l)
		if len(fs) > 0 && fs[len(fs)-1] == key {
			out = append(out, fs)
		}
	}
	return out
}

// byNode picks the row of node among rows (fields: RATE, spark, arrow,
// NODE, WRITE/S, CACHE, PROTO, SERVER, NS, STATE, SOURCE, LOCAL, KEY).
func byNode(rows [][]string, node string) []string {
	for _, r := range rows {
		if len(r) == 14 && r[3] == node {
			return r
		}
	}
	return nil
}

// TestChannelFleetView: two daemons' publishers (nodes cache-node-a and
// cache-node-b) share one channel Redis; `top --redis-url`'s view follows
// the channel and lists every node's keys, the same key once per node,
// with its demand, write rate and cacheable verdict, and follows cold
// messages and verdict changes live.
func TestChannelFleetView(t *testing.T) {
	srv := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	quiet := slog.New(slog.DiscardHandler)
	pubs := map[string]*publish.Publisher{}
	for _, n := range []string{"cache-node-a", "cache-node-b"} {
		p, err := publish.New(rdb, publish.Options{Channel: "hk", Node: n, Logger: quiet, SnapshotInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close(context.Background()) })
		pubs[n] = p
	}
	emit := func(node, typ, key string, qps, wqps float64, uncacheable bool) {
		pubs[node].Emit(&event.Event{Type: typ, Proto: "redis", Server: "10.0.0.5:6379", NS: "0", Key: []byte(key),
			QPS: qps, WriteQPS: wqps, Uncacheable: uncacheable, TTLms: 60000, TS: time.Now(), Source: event.SourceDetected})
	}
	// Before the view starts (it finds these in the snapshot) ...
	emit("cache-node-a", event.TypeHot, "bench:hot", 12000, 4000, true)
	emit("cache-node-a", event.TypeHot, "bench:warm", 2000, 4, false)
	emit("cache-node-b", event.TypeHot, "bench:hot", 9000, 0, false)
	time.Sleep(200 * time.Millisecond)

	cs, err := NewChannelSource(rdb, "hk", "channel hk", 50*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	h := startHarness(t, 140, 20, cs, NewModel("channel hk", Options{Fleet: true}))
	// ... and after (it gets this one from the channel).
	<-cs.Synced()
	emit("cache-node-b", event.TypeHot, "item:b", 1500, 0, false)
	f := h.waitText("item:b", "bench:warm", "NODE", "WRITE/S", "CACHE")
	if !strings.Contains(f.lines[0], "channel hk · 2 nodes") || !strings.Contains(f.lines[0], "3 hot") && !strings.Contains(f.lines[0], "4 hot") {
		t.Errorf("header %q", f.lines[0])
	}
	hot := rowsOf(f, "bench:hot")
	a, b := byNode(hot, "cache-node-a"), byNode(hot, "cache-node-b")
	if a == nil || b == nil {
		t.Fatalf("bench:hot rows %q: want one per node\n%s", hot, f)
	}
	if a[0] != "12000.0" || a[4] != "4000.0" || a[5] != "no" || a[9] != "hot" {
		t.Errorf("bench:hot from cache-node-a: %q, want 12000 demand, 4000 writes/s, CACHE no", a)
	}
	if b[0] != "9000.0" || b[4] != "-" || b[5] != "yes" {
		t.Errorf("bench:hot from cache-node-b: %q, want 9000, no writes, CACHE yes", b)
	}
	if w := byNode(rowsOf(f, "bench:warm"), "cache-node-a"); w == nil || w[4] != "4.0" || w[5] != "yes" {
		t.Errorf("bench:warm: %q", w)
	}
	// Live changes: node b's key turns cold, node a's verdict flips back.
	emit("cache-node-b", event.TypeCold, "item:b", 300, 0, false)
	emit("cache-node-a", event.TypeHot, "bench:hot", 12500, 5, false)
	f = h.wait("cold and verdict", func(f frame) bool {
		ib := byNode(rowsOf(f, "item:b"), "cache-node-b")
		a := byNode(rowsOf(f, "bench:hot"), "cache-node-a")
		return ib != nil && ib[9] == "cold" && a != nil && a[5] == "yes" && a[0] == "12500.0"
	})
	// The node filter.
	h.key(tcell.KeyRune, '/')
	h.typeText("node-b")
	h.key(tcell.KeyEnter, 0)
	f = h.waitText(`filter "node-b"`)
	for _, k := range tableKeys(f) {
		if k == "bench:warm" {
			t.Errorf("filter node-b still lists cache-node-a's bench:warm\n%s", f)
		}
	}
}

// TestChannelFleetSampling: nodes that sample their capture at different
// rates publish to one channel; the fleet view says sampling is in effect
// and over which range, marks each estimated rate ~ and shows each row's
// rate in a SAMPLE column; a node's new rate reaches the view through
// the snapshot (UpdateRates) without a message.
func TestChannelFleetSampling(t *testing.T) {
	srv := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	quiet := slog.New(slog.DiscardHandler)
	pubs := map[string]*publish.Publisher{}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		p, err := publish.New(rdb, publish.Options{Channel: "hk", Node: n, Logger: quiet, SnapshotInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close(context.Background()) })
		pubs[n] = p
	}
	mk := func(key string, qps, sample float64) event.Event {
		return event.Event{Type: event.TypeHot, Proto: "redis", Server: "10.0.0.5:6379", NS: "0", Key: []byte(key),
			QPS: qps, TTLms: 60000, TS: time.Now(), Source: event.SourceDetected, Sample: sample}
	}
	ea, eb, ec := mk("bench:hot", 12000, 0.25), mk("bench:hot", 9000, 0.0625), mk("item:c", 1500, 0)
	pubs["node-a"].Emit(&ea)
	pubs["node-b"].Emit(&eb)
	pubs["node-c"].Emit(&ec)

	cs, err := NewChannelSource(rdb, "hk", "channel hk", 50*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	h := startHarness(t, 160, 20, cs, NewModel("channel hk", Options{Fleet: true}))
	// fields: RATE SAMPLE spark arrow NODE WRITE/S CACHE PROTO SERVER NS STATE SOURCE LOCAL BYTES/S KEY
	row := func(f frame, node string) []string {
		for _, l := range f.lines[3 : len(f.lines)-1] {
			if fs := strings.Fields(l); len(fs) == 15 && fs[4] == node {
				return fs
			}
		}
		return nil
	}
	f := h.wait("three nodes with their sampling", func(f frame) bool {
		return row(f, "node-a") != nil && row(f, "node-b") != nil && row(f, "node-c") != nil
	})
	if !strings.Contains(f.lines[0], "sampling 6.25%–100% of connections: ~ rates are estimates") {
		t.Errorf("header %q", f.lines[0])
	}
	if !strings.Contains(f.lines[2], "RATE▼ SAMPLE") {
		t.Errorf("titles %q", f.lines[2])
	}
	for node, want := range map[string][2]string{"node-a": {"~12000.0", "25%"}, "node-b": {"~9000.0", "6.25%"}, "node-c": {"1500.0", "100%"}} {
		if r := row(f, node); r[0] != want[0] || r[1] != want[1] {
			t.Errorf("%s: %q, want rate %s sample %s", node, r, want[0], want[1])
		}
	}
	// node-b's budget moves its rate to 13.67 %: the snapshot carries it.
	eb.Sample, eb.QPS = 0.1367, 9100
	pubs["node-b"].UpdateRates([]event.Event{eb})
	h.wait("node-b's new rate", func(f frame) bool {
		r := row(f, "node-b")
		return r != nil && r[1] == "13.7%"
	})
	// Every node stops sampling: the marks and the column go.
	ea.Sample, eb.Sample = 0, 0
	pubs["node-a"].UpdateRates([]event.Event{ea})
	pubs["node-b"].UpdateRates([]event.Event{eb})
	f = h.wait("no sampling", func(f frame) bool {
		return !strings.Contains(f.String(), "SAMPLE") && !strings.Contains(f.String(), "~")
	})
	if strings.Contains(f.lines[0], "sampling") {
		t.Errorf("header %q", f.lines[0])
	}
}

// TestChannelOneNode: the header counts one publisher as "1 node".
func TestChannelOneNode(t *testing.T) {
	srv := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	p, err := publish.New(rdb, publish.Options{Channel: "hk1", Node: "cache-node-a", Logger: slog.New(slog.DiscardHandler), SnapshotInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	p.Emit(&event.Event{Type: event.TypeHot, Proto: "redis", Server: "10.0.0.5:6379", NS: "0", Key: []byte("item:1"),
		QPS: 1500, TTLms: 60000, TS: time.Now(), Source: event.SourceDetected})
	time.Sleep(200 * time.Millisecond)
	cs, err := NewChannelSource(rdb, "hk1", "channel hk1", 50*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	<-cs.Synced()
	deadline := time.Now().Add(5 * time.Second)
	s := cs.Fetch()
	for len(s.Keys) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		s = cs.Fetch()
	}
	if len(s.Keys) != 1 || !strings.HasSuffix(s.Source, "· 1 node") {
		t.Errorf("source %q with %d keys, want \"channel hk1 · 1 node\"", s.Source, len(s.Keys))
	}
}
