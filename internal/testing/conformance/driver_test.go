// Package conformance is one suite that every client shim passes: a driver
// that starts real redis-servers (a cache and a channel server), publishes
// scripted channel messages (hot, cold, invalidate, v2 batches, gaps,
// snapshots), performs writes, and checks each shim's answers through a
// small adapter program per language. Whether a read was served locally or
// went to Redis is read from the cache server's INFO commandstats (and
// MONITOR for the absorbed-demand reports), never from the shim's own word.
//
// The adapter protocol (line-delimited JSON on stdin/stdout) is in README.md.
package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client/event"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	if os.Getenv("HOTSNIFF_CONFORMANCE_ADAPTER") == "1" {
		if err := runGoAdapter(os.Args[len(os.Args)-1], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "go adapter:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// shimLang is one shim under test: how to start its adapter.
type shimLang struct {
	name string
	// label is the shim's name in the docs' table.
	label string
	// modes are the client forms its adapter drives ("mode" in the
	// adapter's configuration), the standalone ones first; a mode named
	// "cluster" or "<form>-cluster" runs the cluster cases against a real
	// cluster.
	modes   []string
	prepare func(t testing.TB) // checks the runtime once, builds what needs building
	argv    func(cfg string) []string
	env     []string
}

var (
	nodeOnce sync.Once
	nodeErr  error
)

func repoDir(t testing.TB, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("../../../client", rel))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func langs(t testing.TB) []shimLang {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	py := pythonBin()
	pyDir := repoDir(t, "python")
	nodeDir := repoDir(t, "node")
	return []shimLang{
		{
			name: "go", label: "Go",
			// pool: a *redis.Client; conn: one *redis.Conn of it (a single
			// connection); cluster: a *redis.ClusterClient.
			modes:   []string{"pool", "conn", "cluster"},
			prepare: func(testing.TB) {},
			argv:    func(cfg string) []string { return []string{self, "-test.run=^$", cfg} },
			env:     []string{"HOTSNIFF_CONFORMANCE_ADAPTER=1"},
		},
		{
			name: "python", label: "Python",
			// sync: redis.Redis (pooled); single: single_connection_client;
			// asyncio: redis.asyncio.Redis; cluster: RedisCluster;
			// asyncio-cluster: redis.asyncio.cluster.RedisCluster.
			modes: []string{"sync", "single", "asyncio", "cluster", "asyncio-cluster"},
			prepare: func(t testing.TB) {
				t.Helper()
				out, err := exec.Command(py, "-c", "import redis; print(redis.__version__)").CombinedOutput()
				if err != nil {
					netnstest.Skip(t, "%s cannot import redis-py (apt-get install python3-redis): %v: %s", py, err, out)
				}
			},
			argv: func(cfg string) []string { return []string{py, "-m", "hotsniff_shim.conformance_adapter", cfg} },
			env:  []string{"PYTHONPATH=" + pyDir, "PYTHONDONTWRITEBYTECODE=1"},
		},
		nodeLang("node-ioredis", "ioredis", nodeDir, "Node (ioredis)", []string{"single", "cluster"}),
		// createClientPool is refused at install (the Node shim's own tests
		// check the message), so the suite has no pool mode for it.
		nodeLang("node-redis", "node-redis", nodeDir, "Node (node-redis)", []string{"single", "cluster"}),
	}
}

// nodeLang is the Node shim on one client library.
func nodeLang(name, lib, nodeDir, label string, modes []string) shimLang {
	return shimLang{
		name: name, label: label, modes: modes,
		prepare: func(t testing.TB) {
			t.Helper()
			if _, err := exec.LookPath("node"); err != nil {
				netnstest.Skip(t, "node not installed (apt-get install nodejs npm)")
			}
			if _, err := os.Stat(filepath.Join(nodeDir, "node_modules")); err != nil {
				netnstest.Skip(t, "client/node has no node_modules: run `npm ci` there")
			}
			nodeOnce.Do(func() {
				cmd := exec.Command("npm", "run", "--silent", "build")
				cmd.Dir = nodeDir
				if out, err := cmd.CombinedOutput(); err != nil {
					nodeErr = fmt.Errorf("npm run build in client/node: %v: %s", err, out)
				}
			})
			if nodeErr != nil {
				t.Fatal(nodeErr)
			}
		},
		argv: func(cfg string) []string {
			return []string{"node", filepath.Join(nodeDir, "dist", "conformance-adapter.js"), cfg}
		},
		env: []string{"HOTSNIFF_NODE_CLIENT=" + lib},
	}
}

// pythonBin is Debian's python3 (the one python3-redis is installed for),
// not whatever python3 comes first on PATH.
func pythonBin() string {
	if p := os.Getenv("HOTSNIFF_PYTHON"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

// adapter is one running adapter process.
type adapter struct {
	t      testing.TB
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *testutil.Buffer
	mu     sync.Mutex
}

func startAdapter(t testing.TB, l shimLang, cfg adapterConfig) *adapter {
	t.Helper()
	b, _ := json.Marshal(cfg)
	argv := l.argv(string(b))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), l.env...)
	a := &adapter{t: t, cmd: cmd, stderr: &testutil.Buffer{Max: 1 << 20}}
	cmd.Stderr = a.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	a.in, a.out = in, bufio.NewReaderSize(outp, 1<<20)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s adapter: %v", l.name, err)
	}
	t.Cleanup(func() {
		_ = a.in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s adapter stderr:\n%s", l.name, a.stderr.String())
		}
	})
	var ready map[string]any
	a.read(&ready)
	if ready["ready"] != true {
		t.Fatalf("%s adapter not ready: %v\n%s", l.name, ready, a.stderr.String())
	}
	return a
}

func (a *adapter) read(v any) {
	a.t.Helper()
	type res struct {
		line []byte
		err  error
	}
	ch := make(chan res, 1)
	go func() { l, err := a.out.ReadBytes('\n'); ch <- res{l, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			a.t.Fatalf("adapter: %v\n%s", r.err, a.stderr.String())
		}
		if err := json.Unmarshal(r.line, v); err != nil {
			a.t.Fatalf("adapter reply %q: %v", r.line, err)
		}
	case <-time.After(30 * time.Second):
		a.t.Fatalf("adapter did not answer\n%s", a.stderr.String())
	}
}

// send writes a request without waiting for the answer (see recv).
func (a *adapter) send(req map[string]any) {
	a.t.Helper()
	b, _ := json.Marshal(req)
	if _, err := a.in.Write(append(b, '\n')); err != nil {
		a.t.Fatalf("adapter write: %v\n%s", err, a.stderr.String())
	}
}

func (a *adapter) recv() map[string]any {
	a.t.Helper()
	var out map[string]any
	a.read(&out)
	if e, ok := out["error"]; ok {
		a.t.Fatalf("adapter error: %v", e)
	}
	return out
}

func (a *adapter) do(req map[string]any) map[string]any {
	a.t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.send(req)
	return a.recv()
}

// servers are shared by the cases of one shim; each case has its own
// channel name and keys.
type servers struct {
	cache, chanSrv *testutil.Redis
	cacheC, chanC  *redis.Client
	// cluster is started the first time a cluster mode needs it.
	clusterOnce sync.Once
	cluster     *testutil.Cluster
	clusterC    *redis.ClusterClient
	// nodeC are clients of single cluster nodes by address (see node).
	nodeMu sync.Mutex
	nodeC  map[string]*redis.Client
}

// node is a client of the cluster node at addr, kept open for the shim's
// test: a new connection for each measure would count its own HELLO.
func (s *servers) node(addr string) *redis.Client {
	s.nodeMu.Lock()
	defer s.nodeMu.Unlock()
	c := s.nodeC[addr]
	if c == nil {
		c = redis.NewClient(&redis.Options{Addr: addr})
		s.nodeC[addr] = c
	}
	return c
}

// startCluster returns the shim's 3-master cluster, starting it once.
func (s *servers) startCluster(t testing.TB) *testutil.Cluster {
	s.clusterOnce.Do(func() {
		s.cluster = testutil.StartCluster(t, 3)
		s.clusterC = redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.cluster.Addrs})
		s.nodeC = map[string]*redis.Client{}
		t.Cleanup(func() {
			s.clusterC.Close()
			s.nodeMu.Lock()
			defer s.nodeMu.Unlock()
			for _, c := range s.nodeC {
				c.Close()
			}
		})
	})
	if s.cluster == nil {
		t.Fatal("cluster did not start")
	}
	return s.cluster
}

func startServers(t testing.TB) *servers {
	t.Helper()
	testutil.Need(t, "redis-server")
	s := &servers{cache: testutil.StartRedis(t), chanSrv: testutil.StartRedis(t)}
	s.cacheC = redis.NewClient(&redis.Options{Addr: s.cache.Addr})
	s.chanC = redis.NewClient(&redis.Options{Addr: s.chanSrv.Addr})
	t.Cleanup(func() { s.cacheC.Close(); s.chanC.Close() })
	return s
}

var caseSeq atomic.Int64

// env is one case: its channel, its scripted publisher and its adapter.
type env struct {
	t    *testing.T
	lang shimLang
	mode string
	s    *servers
	// chanC is where the scripted publisher writes (the shared channel
	// server unless the case has its own).
	chanC   *redis.Client
	channel string
	node    string
	seq     uint64
	sent    int // messages published on the channel
	a       *adapter
	cfg     adapterConfig
	// snap is the hot set the scripted publisher keeps in its snapshot.
	snap map[string]*event.Event
	// lastFetch is when the last read that reached Redis started; deadline
	// (if set) is when the case's own timer (a hot entry's ttl, the mode's
	// linger) ends. A read expected to be local that ends after
	// lastFetch+LocalTTL or after deadline may rightly have gone to Redis
	// on a machine too loaded to keep the case's pace: it is logged and
	// slipped is set, not failed.
	lastFetch time.Time
	deadline  time.Time
	slipped   bool
	// snapWrap, when set, transforms the snapshot document before it is
	// stored (signing it); msgWrap likewise each channel message.
	snapWrap, msgWrap func([]byte) []byte
	// cluster: the case runs against the shim's cluster.
	cluster bool
	// outage is the case's own channel server, for the case that stops it.
	outage *testutil.Redis
}

func newEnv(t *testing.T, l shimLang, mode string, s *servers) *env {
	n := caseSeq.Add(1)
	e := &env{
		t: t, lang: l, mode: mode, s: s, chanC: s.chanC,
		channel: fmt.Sprintf("hk%d", n), node: "sniffer-1", seq: uint64(time.Now().UnixMicro()),
		snap: map[string]*event.Event{},
		cfg: adapterConfig{Cache: s.cache.Addr, ChannelAddr: s.chanSrv.Addr,
			LocalTTLms: 5000, StaleGraceMs: 100, LingerMs: 120000, Mode: mode},
	}
	e.cfg.Channel = e.channel
	ctx := context.Background()
	if err := s.cacheC.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	return e
}

// start runs the adapter (after the case set up config and snapshot).
func (e *env) start() { e.t.Helper(); e.a = startAdapter(e.t, e.lang, e.cfg) }

// ev builds an event about key at the cache server from the scripted node.
func (e *env) ev(typ, key string) *event.Event {
	ev := &event.Event{V: 1, Type: typ, Proto: "redis", Server: e.home(key), NS: "0", Key: []byte(key),
		TTLms: 60000, TS: time.Now(), Source: event.SourceDetected, Node: e.node}
	if typ == event.TypeHot {
		ev.QPS = 1500
	}
	return ev
}

// publish sends events one message each, numbering them in sequence.
func (e *env) publish(evs ...*event.Event) {
	e.t.Helper()
	for _, ev := range evs {
		if ev.Seq == 0 {
			e.seq++
			ev.Seq = e.seq
		}
		e.track(ev)
		b, err := json.Marshal(ev)
		if err != nil {
			e.t.Fatal(err)
		}
		e.raw(string(b))
	}
}

// track keeps the scripted publisher's own hot set (for snapshots).
func (e *env) track(ev *event.Event) {
	if ev.Node != e.node {
		return
	}
	switch ev.Type {
	case event.TypeHot:
		e.snap[string(ev.Key)] = ev
	case event.TypeCold:
		delete(e.snap, string(ev.Key))
	}
}

func (e *env) raw(msg string) {
	e.t.Helper()
	if e.msgWrap != nil {
		msg = string(e.msgWrap([]byte(msg)))
	}
	if err := e.chanC.Publish(context.Background(), e.channel, msg).Err(); err != nil {
		e.t.Fatal(err)
	}
	e.sent++
}

// batch sends events in one v2 envelope.
func (e *env) batch(evs ...*event.Event) {
	e.t.Helper()
	for _, ev := range evs {
		e.seq++
		ev.Seq = e.seq
		e.track(ev)
	}
	b, err := json.Marshal(&event.Batch{V: event.BatchVersion, Node: e.node, Events: evs})
	if err != nil {
		e.t.Fatal(err)
	}
	e.raw(string(b))
}

// writeSnapshot stores the scripted publisher's hot set as the snapshot
// document, reflecting seq.
func (e *env) writeSnapshot() {
	e.t.Helper()
	snap := event.Snapshot{V: 1, Seq: e.seq, TS: time.Now().UTC().Format(event.TSFormat), Node: e.node,
		Nodes: []event.SnapshotNode{{Node: e.node, Seq: e.seq, Keys: len(e.snap)}}}
	for _, ev := range e.snap {
		snap.Keys = append(snap.Keys, ev)
	}
	b, err := json.Marshal(&snap)
	if err != nil {
		e.t.Fatal(err)
	}
	if e.snapWrap != nil {
		b = e.snapWrap(b)
	}
	if err := e.chanC.Set(context.Background(), e.channel+":snapshot", b, 0).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// sync waits until the adapter's subscriber received every message sent,
// then a little longer for it to apply them.
func (e *env) sync() {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := e.a.do(map[string]any{"op": "stats"})
		if n, _ := st["messages"].(float64); int(n) >= e.sent {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("adapter received %v of %d messages", st["messages"], e.sent)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(30 * time.Millisecond)
}

// waitReload waits for a snapshot reload beyond the count given (reloads
// after a gap are rate-limited to one per ~250 ms).
func (e *env) waitReload(before float64) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.stat("reloads") <= before {
		if time.Now().After(deadline) {
			e.t.Fatal("no snapshot reload")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(30 * time.Millisecond)
}

func (e *env) stat(name string) float64 {
	e.t.Helper()
	v, _ := e.a.do(map[string]any{"op": "stats"})[name].(float64)
	return v
}

// cmdstats returns INFO commandstats of the cache server: command ->
// calls and rejected_calls.
func (e *env) cmdstats() map[string][2]int {
	e.t.Helper()
	if !e.cluster {
		return e.cmdstatsOf(e.s.cacheC)
	}
	// A cluster's reads are counted where they land: sum the masters.
	out := map[string][2]int{}
	for _, a := range e.s.cluster.Addrs {
		for k, v := range e.cmdstatsOf(e.s.node(a)) {
			out[k] = [2]int{out[k][0] + v[0], out[k][1] + v[1]}
		}
	}
	return out
}

func (e *env) cmdstatsOf(c *redis.Client) map[string][2]int {
	e.t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][2]int{}
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		var v [2]int
		for _, f := range strings.Split(fields, ",") {
			k, val, _ := strings.Cut(f, "=")
			n, _ := strconv.Atoi(val)
			switch k {
			case "calls":
				v[0] = n
			case "rejected_calls":
				v[1] = n
			}
		}
		out[name] = v
	}
	return out
}

// expectBurst checks a burst's values: n of them, each want.
func (e *env) expectBurst(vals []any, n int, want string) {
	e.t.Helper()
	if len(vals) != n {
		e.t.Errorf("burst answered %d values, want %d", len(vals), n)
	}
	for i, v := range vals {
		if v != want {
			e.t.Errorf("read %d = %v, want %s", i, v, want)
		}
	}
}

// holdCache keeps the server holding key (see home) busy for d (a Lua
// loop; every command sent to it meanwhile waits, as behind a slow refresh
// on a loaded machine) and returns once it is; the channel is closed when
// the server is free again.
func (e *env) holdCache(key string, d time.Duration) <-chan struct{} {
	e.t.Helper()
	const busy = `local t = redis.call('TIME') local s = t[1] * 1000000 + t[2]
while true do local n = redis.call('TIME') if n[1] * 1000000 + n[2] - s > tonumber(ARGV[1]) then return 1 end end`
	addr := e.home(key)
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: d + 5*time.Second})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer c.Close()
		if err := c.Eval(context.Background(), busy, nil, d.Microseconds()).Err(); err != nil {
			e.t.Errorf("hold the cache server %s: %v", addr, err)
		}
	}()
	// Running once a PING on another connection gets no answer in 10 ms.
	p := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 10 * time.Millisecond, MaxRetries: -1})
	defer p.Close()
	for start := time.Now(); p.Ping(context.Background()).Err() == nil; {
		if time.Since(start) > d/2 {
			e.t.Fatalf("the cache server %s was not held within %v", addr, d/2)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return done
}

// remote runs f and returns how many times each command reached the
// cache server meanwhile.
func (e *env) remote(f func()) map[string]int {
	e.t.Helper()
	before := e.cmdstats()
	f()
	after := e.cmdstats()
	d := map[string]int{}
	for k, v := range after {
		if n := v[0] - before[k][0]; n != 0 && k != "info" {
			d[k] = n
		}
	}
	return d
}

// get reads key through the shim and returns its value (nil for a missing
// key) and how many GETs reached Redis.
func (e *env) get(key string) (any, int) {
	e.t.Helper()
	var v any
	d := e.remote(func() { v = e.a.do(map[string]any{"op": "get", "key": key})["value"] })
	return v, d["get"]
}

// expectGets reads key n times and checks each read's value and whether
// it reached Redis (1) or was served locally (0).
func (e *env) expectGets(key string, want any, remote ...int) {
	e.t.Helper()
	for i, r := range remote {
		start := time.Now()
		v, n := e.get(key)
		if v != want {
			e.t.Errorf("read %d of %q = %v, want %v", i+1, key, v, want)
		}
		if n != r {
			valid := e.lastFetch.Add(time.Duration(e.cfg.LocalTTLms) * time.Millisecond)
			if !e.deadline.IsZero() && e.deadline.Before(valid) {
				valid = e.deadline
			}
			if r == 0 && n == 1 && time.Now().After(valid) {
				e.t.Logf("read %d of %q went to Redis, but it ended %v after the cached value's time was up: the machine is too slow for this case's pace",
					i+1, key, time.Since(valid))
				e.slipped = true
			} else {
				e.t.Errorf("read %d of %q: %d GETs reached Redis, want %d", i+1, key, n, r)
			}
		}
		if n > 0 {
			e.lastFetch = start
		}
	}
}

// warm reads a hot key until it is cached: the first read records it, the
// second fetches it, the third is served locally.
func (e *env) warm(key string, want any) {
	e.t.Helper()
	e.expectGets(key, want, 1, 1, 0)
}

func (e *env) set(key, val string) {
	e.t.Helper()
	if err := e.cache().Set(context.Background(), key, val, 0).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// cache is another client of the case's cache: the cache server, or the
// cluster (routing each key to its master).
func (e *env) cache() redis.Cmdable {
	if e.cluster {
		return e.s.clusterC
	}
	return e.s.cacheC
}

// setDB writes key in another DB of the cache server.
func (e *env) setDB(db int, key, val string) {
	e.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: e.s.cache.Addr, DB: db})
	defer c.Close()
	if err := c.Set(context.Background(), key, val, 0).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// useCluster points the case at the shim's cluster (a cluster mode).
func (e *env) useCluster() {
	e.t.Helper()
	cl := e.s.startCluster(e.t)
	e.cluster = true
	e.cfg.Cache, e.cfg.ClusterAddrs = cl.Addrs[0], cl.Addrs
	ctx := context.Background()
	if err := e.s.clusterC.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		if err := c.FlushAll(ctx).Err(); err != nil {
			return err
		}
		return c.ConfigResetStat(ctx).Err()
	}); err != nil {
		e.t.Fatal(err)
	}
}

// home is the server holding key: the cache server, or on a cluster the
// key's master.
func (e *env) home(key string) string {
	e.t.Helper()
	if e.cluster {
		return e.owner(key)
	}
	return e.s.cache.Addr
}

// owner is the cluster master holding key now.
func (e *env) owner(key string) string {
	e.t.Helper()
	c, err := e.s.clusterC.MasterForKey(context.Background(), key)
	if err != nil {
		e.t.Fatal(err)
	}
	return c.Options().Addr
}

// bad returns the adapter's count of bad channel messages for reason.
func (e *env) bad(reason string) float64 {
	e.t.Helper()
	m, _ := e.a.do(map[string]any{"op": "stats"})["bad_messages"].(map[string]any)
	v, _ := m[reason].(float64)
	return v
}

// monitor streams the cache server's MONITOR lines until stopped.
type monitor struct {
	c     net.Conn
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

func (e *env) monitor() *monitor {
	e.t.Helper()
	c, err := net.Dial("tcp", e.s.cache.Addr)
	if err != nil {
		e.t.Fatal(err)
	}
	fmt.Fprint(c, "MONITOR\r\n")
	r := bufio.NewReader(c)
	if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		e.t.Fatalf("MONITOR: %q %v", l, err)
	}
	m := &monitor{c: c, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			m.mu.Lock()
			m.lines = append(m.lines, strings.TrimRight(l, "\r\n"))
			m.mu.Unlock()
		}
	}()
	e.t.Cleanup(func() { c.Close(); <-m.done })
	return m
}

// monitorLine is one MONITOR line: "+1700000000.123456 [0 127.0.0.1:5555] "GET" "k"".
type monitorLine struct {
	client string
	args   []string
}

func parseMonitor(l string) (monitorLine, bool) {
	i := strings.Index(l, " [")
	j := strings.Index(l, "] ")
	if i < 0 || j < i {
		return monitorLine{}, false
	}
	db, cl, _ := strings.Cut(l[i+2:j], " ")
	_ = db
	var args []string
	rest := l[j+2:]
	for len(rest) > 0 {
		if rest[0] == ' ' {
			rest = rest[1:]
			continue
		}
		s, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return monitorLine{}, false
		}
		u, err := strconv.Unquote(s)
		if err != nil {
			return monitorLine{}, false
		}
		args = append(args, u)
		rest = rest[len(s):]
	}
	return monitorLine{client: cl, args: args}, true
}

// settle waits for MONITOR to have delivered what ran so far, then returns
// the lines.
func (m *monitor) settle(e *env) []monitorLine {
	e.t.Helper()
	marker := fmt.Sprintf("monitor-marker-%d", time.Now().UnixNano())
	e.s.cacheC.Echo(context.Background(), marker)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		m.mu.Lock()
		lines := append([]string(nil), m.lines...)
		m.mu.Unlock()
		for _, l := range lines {
			if strings.Contains(l, marker) {
				var out []monitorLine
				for _, l := range lines {
					if ml, ok := parseMonitor(l); ok && !(len(ml.args) == 2 && ml.args[1] == marker) {
						out = append(out, ml)
					}
				}
				return out
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.t.Fatal("MONITOR never showed the marker")
	return nil
}
