package publish_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
)

// TestTwoNodesShareSnapshot runs two publishers on one channel, as a
// DaemonSet does: each one's writes must keep the other's keys.
func TestTwoNodesShareSnapshot(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := dial(t, "redis://"+r.Addr, publish.TLSOptions{})
	opt := publish.Options{Channel: "hk", SnapshotInterval: 10 * time.Millisecond}
	oa, ob := opt, opt
	oa.Node, ob.Node = "node-a", "node-b"
	a := newPublisher(t, rdb, oa)
	b := newPublisher(t, rdb, ob)
	a.Emit(hot("a1"))
	a.Emit(hot("a2"))
	b.Emit(hot("b1"))
	b.Emit(hot("shared")) // the same key seen by both nodes stays per node
	a.Emit(hot("shared"))
	s := waitSnapshot(t, rdb, "hk", 3*time.Second, func(s *event.Snapshot) bool {
		qa, _ := nodeSeq(s, "node-a")
		qb, _ := nodeSeq(s, "node-b")
		return qa == a.Stats().Seq && qb == b.Stats().Seq
	})
	if len(s.Keys) != 5 {
		t.Fatalf("snapshot has %d keys, want a1 a2 b1 and shared twice", len(s.Keys))
	}
	a.Emit(&event.Event{Type: event.TypeCold, Proto: "redis", Server: "10.0.0.5:6379", NS: "0", Key: []byte("a1"), TS: ts0})
	a.Emit(&event.Event{Type: event.TypeCold, Proto: "redis", Server: "10.0.0.5:6379", NS: "0", Key: []byte("shared"), TS: ts0})
	s = waitSnapshot(t, rdb, "hk", 3*time.Second, func(s *event.Snapshot) bool {
		qa, _ := nodeSeq(s, "node-a")
		return qa == a.Stats().Seq
	})
	got := map[string]string{}
	for _, e := range s.Keys {
		got[e.Node+"/"+string(e.Key)] = e.Type
	}
	want := map[string]string{"node-a/a2": "hot", "node-b/b1": "hot", "node-b/shared": "hot"}
	if len(got) != len(want) {
		t.Fatalf("snapshot %v, want %v", got, want)
	}
	for k := range want {
		if got[k] == "" {
			t.Errorf("snapshot lacks %s: %v", k, got)
		}
	}
	if s.Node != "node-a" || len(s.Nodes) != 2 {
		t.Errorf("header node %q nodes %+v", s.Node, s.Nodes)
	}
}

// TestSectionAgesOut: a dead publisher's keys leave the snapshot once its
// section's TTL passes, at the next write by anyone.
func TestSectionAgesOut(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := dial(t, "redis://"+r.Addr, publish.TLSOptions{})
	dead := newPublisher(t, rdb, publish.Options{Channel: "hk", Node: "dead", SnapshotTTL: 300 * time.Millisecond, SnapshotInterval: 10 * time.Millisecond})
	dead.Emit(hot("gone"))
	waitSnapshot(t, rdb, "hk", 3*time.Second, func(s *event.Snapshot) bool { return len(s.Keys) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	dead.Close(ctx)
	time.Sleep(400 * time.Millisecond)
	live := newPublisher(t, rdb, publish.Options{Channel: "hk", Node: "live", SnapshotInterval: 10 * time.Millisecond})
	live.Emit(hot("here"))
	// A new publisher announces its section at once, empty (publisher.go:
	// dirty from the start), possibly before Emit's key is in it: wait for
	// the key, then check that the dead section's keys are gone.
	s := waitSnapshot(t, rdb, "hk", 3*time.Second, func(s *event.Snapshot) bool {
		return len(s.Nodes) == 1 && s.Nodes[0].Node == "live" && keysOf(s)["here"] != nil
	})
	if k := keysOf(s); len(k) != 1 || k["here"] == nil {
		t.Errorf("snapshot keys %v", k)
	}
	if n := rdb.HLen(ctx, publish.SectionsKey("hk")).Val(); n != 1 {
		t.Errorf("sections hash has %d fields, want 1", n)
	}
}

func TestManual(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := dial(t, "redis://"+r.Addr, publish.TLSOptions{})
	msgs := subscribe(t, rdb, "hk", false)
	ctx := context.Background()
	det := newPublisher(t, rdb, publish.Options{Channel: "hk", Node: "node-a", SnapshotInterval: 10 * time.Millisecond})
	det.Emit(hot("detected"))
	receive(t, msgs, 1, 3*time.Second)

	res, err := publish.Manual(ctx, rdb, publish.ManualOptions{Channel: "hk", Node: "manual@ops1"},
		&event.Event{Type: event.TypeHot, Proto: "redis", NS: "0", Key: []byte("promo"), TTLms: 300000})
	if err != nil {
		t.Fatal(err)
	}
	if res.Receivers != 1 {
		t.Errorf("receivers %d", res.Receivers)
	}
	got := receive(t, msgs, 1, 3*time.Second)[0]
	for _, want := range []string{`"type":"hot"`, `"key":"promo"`, `"source":"manual"`, `"node":"manual@ops1"`, `"ttl_ms":300000`, `"qps":0`} {
		if !strings.Contains(got, want) {
			t.Errorf("manual message %s lacks %s", got, want)
		}
	}
	s := readSnapshot(t, rdb, "hk")
	if k := keysOf(s); k["promo"] == nil || k["promo"].Source != "manual" {
		t.Fatalf("snapshot lacks the manual key: %v", k)
	}
	// The daemon's next write keeps the manual entry.
	det.Emit(hot("detected2"))
	waitSnapshot(t, rdb, "hk", 3*time.Second, func(s *event.Snapshot) bool { return len(s.Keys) == 3 })

	// Removed from another host.
	if _, err := publish.Manual(ctx, rdb, publish.ManualOptions{Channel: "hk", Node: "manual@ops2"},
		&event.Event{Type: event.TypeCold, Proto: "redis", NS: "0", Key: []byte("promo")}); err != nil {
		t.Fatal(err)
	}
	s = readSnapshot(t, rdb, "hk")
	if k := keysOf(s); k["promo"] != nil || len(k) != 2 {
		t.Errorf("after remove: %v", k)
	}
	// A short ttl ends the entry at the next write.
	if _, err := publish.Manual(ctx, rdb, publish.ManualOptions{Channel: "hk"},
		&event.Event{Type: event.TypeHot, Proto: "redis", NS: "0", Key: []byte("brief"), TTLms: 100}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	if _, err := publish.Manual(ctx, rdb, publish.ManualOptions{Channel: "hk"},
		&event.Event{Type: event.TypeHot, Proto: "redis", NS: "0", Key: []byte("other"), TTLms: 60000}); err != nil {
		t.Fatal(err)
	}
	if k := keysOf(readSnapshot(t, rdb, "hk")); k["brief"] != nil || k["other"] == nil {
		t.Errorf("expired manual entry kept: %v", k)
	}
	// --ttl 0: kept until removed, so the document outlives every section.
	if _, err := publish.Manual(ctx, rdb, publish.ManualOptions{Channel: "hk"},
		&event.Event{Type: event.TypeHot, Proto: "redis", NS: "0", Key: []byte("pinned")}); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, "hk:snapshot").Val(); ttl < 365*24*time.Hour {
		t.Errorf("snapshot ttl %v with a pinned key", ttl)
	}
}

func TestWriter(t *testing.T) {
	var buf bytes.Buffer
	w, err := publish.NewWriter(&buf, "jsonl", "host1")
	if err != nil {
		t.Fatal(err)
	}
	w.Emit(hot("item:42"))
	bin := hot("")
	bin.Key = []byte{0xff}
	w.Emit(bin)
	want := `{"v":1,"seq":1,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key":"item:42","qps":1843.5,"ttl_ms":60000,"ts":"2026-11-29T18:00:00.123456Z","source":"detected","node":"host1"}
{"v":1,"seq":2,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key_b64":"/w==","qps":1843.5,"ttl_ms":60000,"ts":"2026-11-29T18:00:00.123456Z","source":"detected","node":"host1"}
`
	if buf.String() != want {
		t.Errorf("jsonl:\n%s\nwant\n%s", buf.String(), want)
	}

	buf.Reset()
	w, _ = publish.NewWriter(&buf, "text", "")
	w.Emit(hot("item:42"))
	w.Emit(&event.Event{Type: event.TypeInvalidate, Proto: "memcache", Server: "10.0.0.6:11211", Key: []byte("a b"), TS: ts0})
	w.Emit(&event.Event{Type: event.TypeHot, Proto: "redis", Server: "10.0.0.5:6379", NS: "12", Key: []byte("m"), TS: ts0, Source: "manual", QPS: 3})
	w.Emit(&event.Event{Type: event.TypeHot, Proto: "redis", Server: "10.0.0.5:6379", NS: "0", Key: []byte("s"), TS: ts0, QPS: 2000, Sample: 0.0625})
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	wantText := []string{
		"TIME                        TYPE       PROTO    SERVER                NS  KEY                                             QPS",
		"2026-11-29T18:00:00.123456Z hot        redis    10.0.0.5:6379         0   item:42                                      1843.5",
		`2026-11-29T18:00:00.123456Z invalidate memcache 10.0.0.6:11211        -   "a b"                                             -`,
		"2026-11-29T18:00:00.123456Z hot*       redis    10.0.0.5:6379         12  m                                               3.0",
		"2026-11-29T18:00:00.123456Z hot        redis    10.0.0.5:6379         0   s                                           ~2000.0",
	}
	if len(lines) != len(wantText) {
		t.Fatalf("text:\n%s", buf.String())
	}
	for i := range lines {
		if lines[i] != wantText[i] {
			t.Errorf("line %d:\n got %q\nwant %q", i, lines[i], wantText[i])
		}
	}
	if _, err := publish.NewWriter(&buf, "yaml", ""); err == nil {
		t.Error("yaml accepted")
	}
}
