package shimtest

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client"
	"github.com/hotsniff/hotsniff/client/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
	"github.com/redis/go-redis/v9"
)

var quiet = slog.New(slog.DiscardHandler)

func init() { redis.SetLogger(nopLogger{}) }

type nopLogger struct{}

func (nopLogger) Printf(context.Context, string, ...any) {}

func dial(t testing.TB, addr string) redis.UniversalClient {
	t.Helper()
	rdb, err := publish.Dial("redis://"+addr+"?dial_timeout=300ms", publish.TLSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// recorder is a Handler that keeps what it was told.
type recorder struct {
	mu     sync.Mutex
	snaps  []*event.Snapshot
	events []*event.Event
}

func (r *recorder) Snapshot(s *event.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snaps = append(r.snaps, s)
}

func (r *recorder) Event(e *event.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) counts() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.snaps), len(r.events)
}

// run starts a subscriber and waits for its first snapshot.
func run(t testing.TB, rdb redis.UniversalClient, opt client.Options) *client.Subscriber {
	t.Helper()
	if opt.Logger == nil {
		opt.Logger = quiet
	}
	s := client.New(rdb, opt)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	select {
	case <-s.Synced():
	case <-time.After(20 * time.Second):
		t.Fatal("subscriber never synced")
	}
	return s
}

// eventually polls cond until it holds. The deadline only bounds how long
// a broken test hangs: a loaded 2-core CI runner can take seconds to
// schedule a message through Redis pub/sub and the subscriber goroutine.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// msg is a channel message in the contract's form, written by hand so the
// tests control seq exactly.
func msg(node string, seq uint64, typ, key string) string {
	return fmt.Sprintf(`{"v":1,"seq":%d,"type":%q,"proto":"redis","server":"10.0.0.5:6379","ns":"0","key":%q,"qps":10,"ttl_ms":60000,"ts":"2026-11-29T18:00:00.000000Z","source":"detected","node":%q}`,
		seq, typ, key, node)
}

// snapshot writes a snapshot document by hand: one node at seq with keys.
func setSnapshot(t testing.TB, rdb redis.UniversalClient, node string, seq uint64, keys ...string) {
	t.Helper()
	var ents []string
	for _, k := range keys {
		ents = append(ents, msg(node, seq, "hot", k))
	}
	doc := fmt.Sprintf(`{"v":1,"seq":%d,"ts":"2026-11-29T18:00:00.000000Z","node":%q,"nodes":[{"node":%q,"seq":%d,"ts":"2026-11-29T18:00:00.000000Z","keys":%d}],"keys":[%s]}`,
		seq, node, node, seq, len(keys), strings.Join(ents, ","))
	if err := rdb.Set(context.Background(), "hk:snapshot", doc, 0).Err(); err != nil {
		t.Fatal(err)
	}
}

func hot(s *client.Subscriber, key string) bool { return s.Hot("redis", "0", []byte(key)) }

func TestSnapshotThenFollow(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := dial(t, r.Addr)
	p, err := publish.New(rdb, publish.Options{Channel: "hk", Node: "n1", Logger: quiet, SnapshotInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	e := func(typ, key string) *event.Event {
		return &event.Event{Type: typ, Proto: "redis", Server: "10.0.0.5:6379", NS: "0", Key: []byte(key), QPS: 5, TTLms: 60000, TS: time.Now()}
	}
	p.Emit(e("hot", "a"))
	p.Emit(e("hot", "b"))
	bin := e("hot", "")
	bin.Key = []byte{0xff, 0xfe}
	p.Emit(bin)
	seq := p.Stats().Seq
	eventually(t, "snapshot", func() bool {
		s, _, _ := publish.ReadSnapshot(context.Background(), rdb, "hk")
		return s.Seq == seq
	})

	rec := &recorder{}
	s := run(t, rdb, client.Options{Channel: "hk", Handler: rec})
	if !hot(s, "a") || !hot(s, "b") || !hot(s, "\xff\xfe") || len(s.HotSet()) != 3 {
		t.Fatalf("after snapshot: hot set %d entries", len(s.HotSet()))
	}
	if n, _ := rec.counts(); n != 1 {
		t.Errorf("%d snapshot callbacks", n)
	}
	p.Emit(e("cold", "a"))
	p.Emit(e("invalidate", "b"))
	p.Emit(e("hot", "c"))
	eventually(t, "c hot", func() bool { return hot(s, "c") })
	if hot(s, "a") || !hot(s, "b") {
		t.Errorf("a hot %v (want cold), b hot %v (invalidate must keep it)", hot(s, "a"), hot(s, "b"))
	}
	if _, n := rec.counts(); n != 3 {
		t.Errorf("%d event callbacks, want 3", n)
	}
	// The first three may arrive too, as stale: the publisher writes the
	// snapshot before it publishes the batch.
	if st := s.Stats(); st.Gaps != 0 || st.Reloads != 1 || st.Messages-st.Stale != 3 {
		t.Errorf("stats %+v", st)
	}
}

// TestSubscribeBeforeSnapshot publishes two messages exactly between the
// subscription and the snapshot read (from a hook on the GET): the one the
// snapshot already holds must be skipped, the newer one applied.
func TestSubscribeBeforeSnapshot(t *testing.T) {
	r := testutil.StartRedis(t)
	pub := dial(t, r.Addr)
	setSnapshot(t, pub, "n1", 10, "old")
	rdb := dial(t, r.Addr)
	rdb.AddHook(onGet{func() {
		pub.Publish(context.Background(), "hk", msg("n1", 10, "cold", "old")) // already in the snapshot
		pub.Publish(context.Background(), "hk", msg("n1", 11, "hot", "new"))
	}})
	s := run(t, rdb, client.Options{Channel: "hk"})
	eventually(t, "new hot", func() bool { return hot(s, "new") })
	if !hot(s, "old") {
		t.Error("a message older than the snapshot was applied over it")
	}
	if st := s.Stats(); st.Stale != 1 || st.Gaps != 0 {
		t.Errorf("stats %+v", st)
	}
}

type onGet struct{ f func() }

func (onGet) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h onGet) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	var once sync.Once
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "get" {
			once.Do(h.f)
		}
		return next(ctx, cmd)
	}
}
func (onGet) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestGapReloadsSnapshot(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := dial(t, r.Addr)
	ctx := context.Background()
	setSnapshot(t, rdb, "n1", 10, "k1")
	rec := &recorder{}
	s := run(t, rdb, client.Options{Channel: "hk", Handler: rec, RetryDelay: 20 * time.Millisecond})

	rdb.Publish(ctx, "hk", msg("n1", 11, "hot", "k2"))
	eventually(t, "k2", func() bool { return hot(s, "k2") })
	// 12 and 13 are lost; the snapshot holds their effect (k3 hot, k1 cold).
	setSnapshot(t, rdb, "n1", 13, "k2", "k3")
	// Unknown fields are ignored; a non-UTF-8 key comes as key_b64.
	rdb.Publish(ctx, "hk", `{"v":1,"seq":14,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key_b64":"/w==","qps":1,"ttl_ms":60000,"ts":"2026-11-29T18:00:00.000000Z","source":"detected","node":"n1","future":{"x":[1,2]}}`)
	eventually(t, "reload after gap", func() bool { return hot(s, "k3") })
	if hot(s, "k1") || !hot(s, "\xff") || !hot(s, "k2") {
		t.Errorf("after reload: k1 %v (want cold) \\xff %v k2 %v", hot(s, "k1"), hot(s, "\xff"), hot(s, "k2"))
	}
	if st := s.Stats(); st.Gaps != 1 || st.Reloads != 2 {
		t.Errorf("stats %+v", st)
	}

	// A gap the snapshot does not cover yet (the publisher writes it a
	// little later): the subscriber keeps the newer messages and retries.
	rdb.Publish(ctx, "hk", msg("n1", 20, "hot", "k20"))
	eventually(t, "k20", func() bool { return hot(s, "k20") })
	time.Sleep(50 * time.Millisecond)
	setSnapshot(t, rdb, "n1", 19, "k2", "k3", "k19")
	eventually(t, "retry found k19", func() bool { return hot(s, "k19") })
	if !hot(s, "k20") {
		t.Error("k20, newer than the snapshot, was lost by the reload")
	}
	if hot(s, "\xff") {
		t.Error("\\xff went cold in the snapshot but is still hot")
	}
}

// TestGapKeepsOtherNodesNewer: a gap from one node reloads a snapshot in
// which another node's section is older than messages already applied;
// those must be re-applied, not rolled back.
func TestGapKeepsOtherNodesNewer(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := dial(t, r.Addr)
	ctx := context.Background()
	doc := `{"v":1,"seq":10,"ts":"2026-11-29T18:00:00.000000Z","node":"n1","nodes":[` +
		`{"node":"n1","seq":10,"ts":"2026-11-29T18:00:00.000000Z","keys":1},` +
		`{"node":"n2","seq":5,"ts":"2026-11-29T18:00:00.000000Z","keys":0}],"keys":[` + msg("n1", 10, "hot", "old1") + `]}`
	rdb.Set(ctx, "hk:snapshot", doc, 0)
	s := run(t, rdb, client.Options{Channel: "hk", RetryDelay: 10 * time.Millisecond, MaxRetries: 1000, LogSize: 8})
	rdb.Publish(ctx, "hk", msg("n1", 11, "hot", "x"))
	rdb.Publish(ctx, "hk", msg("n1", 12, "cold", "old1"))
	rdb.Publish(ctx, "hk", msg("n2", 6, "hot", "y"))
	eventually(t, "y", func() bool { return hot(s, "y") })
	// n2 skips 7: reload; the snapshot still has n1 at 10.
	rdb.Publish(ctx, "hk", msg("n2", 8, "hot", "z"))
	eventually(t, "reload", func() bool { return s.Stats().Reloads >= 2 })
	if !hot(s, "x") || hot(s, "old1") || !hot(s, "y") || !hot(s, "z") {
		t.Errorf("x %v old1 %v y %v z %v: want n1's newer messages kept over its older section",
			hot(s, "x"), hot(s, "old1"), hot(s, "y"), hot(s, "z"))
	}
	// More messages than the log holds: the section is now too old to
	// replay onto, so the subscriber waits for a newer one.
	for i := uint64(13); i < 30; i++ {
		rdb.Publish(ctx, "hk", msg("n1", i, "hot", fmt.Sprint("m", i)))
	}
	rdb.Publish(ctx, "hk", msg("n2", 10, "hot", "w")) // gap again
	eventually(t, "m29", func() bool { return hot(s, "m29") && hot(s, "w") })
	time.Sleep(30 * time.Millisecond)
	if hot(s, "m13") {
		t.Fatal("reloaded over a section older than the log without waiting")
	}
	doc = `{"v":1,"seq":10,"ts":"2026-11-29T18:00:00.000000Z","node":"n1","nodes":[` +
		`{"node":"n1","seq":29,"ts":"2026-11-29T18:00:00.000000Z","keys":2},` +
		`{"node":"n2","seq":10,"ts":"2026-11-29T18:00:00.000000Z","keys":1}],"keys":[` +
		msg("n1", 13, "hot", "m13") + "," + msg("n1", 29, "hot", "m29") + "," + msg("n2", 10, "hot", "w") + `]}`
	rdb.Set(ctx, "hk:snapshot", doc, 0)
	eventually(t, "m13 from the newer section", func() bool { return hot(s, "m13") })
}

func TestPublisherRestartWithLowerSeq(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := dial(t, r.Addr)
	ctx := context.Background()
	setSnapshot(t, rdb, "n1", 5_000_000, "k1")
	s := run(t, rdb, client.Options{Channel: "hk", RetryDelay: 20 * time.Millisecond})
	// The node came back with its clock behind: its new section is small.
	setSnapshot(t, rdb, "n1", 100, "fresh")
	rdb.Publish(ctx, "hk", msg("n1", 101, "hot", "k101"))
	eventually(t, "restart handled", func() bool { return hot(s, "fresh") && hot(s, "k101") })
	if hot(s, "k1") {
		t.Error("the restarted node's old keys survived")
	}
	if st := s.Stats(); st.Restarts != 1 {
		t.Errorf("stats %+v", st)
	}
	rdb.Publish(ctx, "hk", msg("n1", 102, "hot", "k102"))
	eventually(t, "k102", func() bool { return hot(s, "k102") })
	if st := s.Stats(); st.Gaps != 0 || st.Stale != 0 {
		t.Errorf("after restart: stats %+v", st)
	}
}

func TestTwoNodesNoFalseGaps(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := dial(t, r.Addr)
	s := run(t, rdb, client.Options{Channel: "hk"})
	var pubs []*publish.Publisher
	for _, n := range []string{"a", "b"} {
		p, err := publish.New(rdb, publish.Options{Channel: "hk", Node: n, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(context.Background())
		pubs = append(pubs, p)
	}
	for i := 0; i < 100; i++ {
		p := pubs[i%2]
		p.Emit(&event.Event{Type: "hot", Proto: "redis", Server: "s:1", NS: "0", Key: []byte("shared"), TTLms: 60000, TS: time.Now()})
	}
	pubs[0].Emit(&event.Event{Type: "cold", Proto: "redis", Server: "s:1", NS: "0", Key: []byte("shared"), TS: time.Now()})
	eventually(t, "all messages", func() bool { return s.Stats().Messages == 101 })
	if !hot(s, "shared") {
		t.Error("node a's cold ended node b's hot")
	}
	if st := s.Stats(); st.Gaps != 0 || st.Stale != 0 || st.Reloads != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestReconnectReloads kills Redis and starts an empty one on the same
// port: the subscriber must resubscribe by itself and reload the (now
// empty) snapshot, dropping state it can no longer trust.
func TestReconnectReloads(t *testing.T) {
	port := testutil.FreePort(t)
	stop := startRedisOn(t, port)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	rdb := dial(t, addr)
	setSnapshot(t, rdb, "n1", 10, "old")
	rec := &recorder{}
	s := run(t, rdb, client.Options{Channel: "hk", Handler: rec})
	if !hot(s, "old") {
		t.Fatal("snapshot not applied")
	}
	stop()
	time.Sleep(100 * time.Millisecond)
	startRedisOn(t, port)
	eventually(t, "reload after reconnect", func() bool { return s.Stats().Reconnects == 1 && !hot(s, "old") })
	eventually(t, "message after reconnect", func() bool {
		rdb.Publish(context.Background(), "hk", msg("n2", 1, "hot", "new"))
		return hot(s, "new")
	})
	if n, _ := rec.counts(); n < 2 {
		t.Errorf("%d snapshot callbacks, want a second one after reconnecting", n)
	}
}

// TestEmptyChannelRestartKeepsHotSet: the channel's Redis comes back empty
// (no snapshot document): the hot set is kept, not emptied, until the
// publisher rewrites its snapshot, which then applies; a document that
// never comes back is believed after ConfirmTimeout (TestReconnectReloads).
func TestEmptyChannelRestartKeepsHotSet(t *testing.T) {
	port := testutil.FreePort(t)
	stop := startRedisOn(t, port)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	rdb := dial(t, addr)
	setSnapshot(t, rdb, "n1", 10, "old")
	s := run(t, rdb, client.Options{Channel: "hk", Handler: &recorder{}})
	if !hot(s, "old") {
		t.Fatal("snapshot not applied")
	}
	stop()
	time.Sleep(100 * time.Millisecond)
	startRedisOn(t, port)
	eventually(t, "reconnect", func() bool { return s.Stats().Reconnects == 1 && s.Stats().Reloads >= 2 })
	time.Sleep(time.Second)
	if !hot(s, "old") {
		t.Fatal("the hot set was emptied on a missing snapshot document")
	}
	setSnapshot(t, rdb, "n1", 11, "new")
	eventually(t, "the rewritten snapshot applied", func() bool { return hot(s, "new") && !hot(s, "old") })
}

// startRedisOn runs redis-server on a chosen port (so a test can restart it
// there) and returns a function that kills it.
func startRedisOn(t testing.TB, port int) func() {
	t.Helper()
	bin := testutil.Need(t, "redis-server")
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", t.TempDir(), "--protected-mode", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var once sync.Once
	stop := func() { once.Do(func() { _ = cmd.Process.Kill(); <-exited }) }
	t.Cleanup(stop)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			continue
		}
		_ = c.SetDeadline(time.Now().Add(time.Second))
		fmt.Fprint(c, "PING\r\n")
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err == nil && strings.HasPrefix(line, "+") {
			return stop
		}
	}
	t.Fatalf("redis-server on %s did not come up", addr)
	return nil
}
