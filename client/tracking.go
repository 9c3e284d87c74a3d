package client

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// invalidateChannel is where Redis sends tracking invalidations for a
// client redirecting them to a RESP2 connection.
const invalidateChannel = "__redis__:invalidate"

// tracker is server-assisted invalidation, done the way that works with any
// go-redis version and any application protocol setting: two dedicated RESP2
// connections to the cache server,
//
//   - sub, subscribed to __redis__:invalidate: it receives the invalidations;
//   - ctl, which runs CLIENT TRACKING ON REDIRECT <sub's id> (default mode)
//     and then reads each tracked key once (EXISTS k, with the value when
//     one is cached: probe), which makes the server remember that key for
//     this client.
//
// Default mode costs the server one lookup per write whatever the number of
// tracked keys, where BCAST prefixes cost a scan of every prefix on every
// write (1,024 prefixes cut a server's SET rate about fourfold). The keys
// tracked are the cached ones, at most MaxTrackedKeys: keys beyond the cap
// rely on the channel's invalidate events and the local expiry, which bounds
// staleness for every key anyway. The server forgets a key once it has sent
// its invalidation, so an invalidated key is registered again. Whenever
// tracking may have lapsed (either connection replaced) every cached value is
// dropped.
type tracker struct {
	s        *Shim
	addr     string
	sub, ctl *redis.Client

	subID    atomic.Int64  // CLIENT ID of sub's connection, once subscribed
	connID   atomic.Int64  // CLIENT ID of sub's newest connection
	ctlEpoch atomic.Uint64 // bumped whenever ctl opens a connection
	kicks    chan struct{}

	established atomic.Bool
	disabled    bool // the server refused tracking: stop trying

	// rearm: keys whose invalidation arrived, to register again (listen
	// goroutine adds, ctl goroutine takes).
	rearmMu sync.Mutex
	rearm   map[string]struct{}

	// Owned by the ctl goroutine. cn is ctl's one connection: tracking is
	// a property of a connection, so every command goes through it.
	cn *redis.Conn
	// registered: keys the server tracks for us, until it sends their
	// invalidation (it forgets them then); kept at most MaxTrackedKeys,
	// cached or not, since a key cannot be unregistered otherwise.
	registered map[string]struct{}
	redirect   int64
	epoch      uint64
}

func newTracker(s *Shim, o *redis.Options) *tracker {
	t := &tracker{s: s, addr: o.Addr, kicks: make(chan struct{}, 1),
		registered: map[string]struct{}{}, rearm: map[string]struct{}{}}
	base := *o
	base.Protocol = 2 // so invalidations arrive as pub/sub messages
	base.PoolSize = 1
	base.MinIdleConns = 0
	base.MaxIdleConns = 1
	base.MaxActiveConns = 0
	base.ClientName = ""
	// The application's own client-side cache, push handling and limiter
	// are for its data connections, not these two.
	base.ClientSideCache = nil
	base.ClientSideCacheConfig = nil
	base.PushNotificationProcessor = nil
	base.MaintNotificationsConfig = nil
	base.Limiter = nil
	subOpt, ctlOpt := base, base
	subOpt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		id, err := cn.ClientID(ctx).Result()
		if err == nil {
			t.connID.Store(id)
		}
		return err
	}
	ctlOpt.OnConnect = func(context.Context, *redis.Conn) error {
		t.ctlEpoch.Add(1)
		return nil
	}
	// Idle connections must not be reaped: closing ctl's ends tracking.
	ctlOpt.ConnMaxIdleTime = -1
	ctlOpt.ConnMaxLifetime = 0
	t.sub = redis.NewClient(&subOpt)
	t.ctl = redis.NewClient(&ctlOpt)
	return t
}

func (t *tracker) close() error {
	// cn belongs to the ctl goroutine, which has ended: closing ctl's pool
	// closes it too.
	return errors.Join(t.sub.Close(), t.ctl.Close())
}

// kick asks for the prefixes to be brought up to date with the hot set.
func (t *tracker) kick() {
	select {
	case t.kicks <- struct{}{}:
	default:
	}
}

func (t *tracker) run(ctx context.Context) {
	done := make(chan struct{})
	go func() { defer close(done); t.listen(ctx) }()
	defer func() { <-done }()
	defer t.resetConn()
	tick := time.NewTicker(t.s.opt.TrackingCheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.kicks:
		case <-tick.C:
			if t.disabled {
				continue
			}
			// A PING both keeps ctl's connection and notices it was
			// replaced (OnConnect moves the epoch): then re-establish.
			if t.cn != nil {
				pctx, cancel := context.WithTimeout(ctx, time.Second)
				if t.cn.Ping(pctx).Err() != nil && ctx.Err() == nil {
					t.resetConn()
				}
				cancel()
			}
		}
		if !t.disabled {
			t.sync(ctx)
		}
	}
}

// listen follows the invalidation channel; every (re)subscription means
// sub has a new connection id, and tracking must be redirected to it.
func (t *tracker) listen(ctx context.Context) {
	ps := t.sub.Subscribe(ctx, invalidateChannel)
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	defer ps.Close()
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, 15*time.Second)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				_ = ps.Ping(ctx)
				continue
			}
			// A dropped connection (invalidations lost), or a null
			// payload go-redis cannot decode (a FLUSHALL): drop everything.
			t.established.Store(false)
			t.subID.Store(0)
			t.s.invalidateAll(invalFlush)
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				// Redirect only to a connection that listens already, or
				// the first invalidations would be lost.
				t.subID.Store(t.connID.Load())
				t.kick()
			}
		case *redis.Message:
			keys := m.PayloadSlice
			if keys == nil {
				keys = []string{m.Payload}
			}
			t.rearmMu.Lock()
			for _, k := range keys {
				t.s.invalidate(k, invalTracking)
				// The server has forgotten k for us: register it again.
				t.rearm[k] = struct{}{}
			}
			t.rearmMu.Unlock()
			t.kick()
		}
	}
}

// registerBatch bounds one pipeline of registrations, so registering many keys
// never holds the server's event loop for long.
const registerBatch = 256

// sync makes the server track the keys the shim caches (up to the cap).
func (t *tracker) sync(ctx context.Context) {
	id := t.subID.Load()
	if id == 0 {
		return // not subscribed yet
	}
	epoch := t.ctlEpoch.Load()
	full := !t.established.Load() || id != t.redirect || epoch != t.epoch
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if full {
		t.established.Store(false)
		clear(t.registered)
		t.resetConn()
		t.cn = t.ctl.Conn()
		err := t.cn.Do(cctx, "client", "tracking", "on", "redirect", id).Err()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var rerr redis.Error
			if errors.As(err, &rerr) && !strings.Contains(err.Error(), "redirect") {
				// An old server, or ACLs without CLIENT: channel invalidate
				// messages and the local expiry remain.
				t.disabled = true
				t.s.log.Info("server-assisted invalidation unavailable", "err", err)
				return
			}
			t.s.log.Debug("client tracking", "err", err)
			t.resetConn()
			return
		}
	}
	t.rearmMu.Lock()
	for k := range t.rearm {
		delete(t.registered, k)
	}
	clear(t.rearm)
	t.rearmMu.Unlock()
	want := t.s.trackedKeys(t.registered, t.owns)
	// Keys no longer cached stay registered at the server until written
	// (then one spurious invalidation frees them): they keep counting
	// against the cap, which so bounds what the server holds for us.
	room := t.s.opt.MaxTrackedKeys - len(t.registered)
	var add []string
	for k := range want {
		if room <= 0 {
			break
		}
		if _, ok := t.registered[k]; !ok {
			add = append(add, k)
			room--
		}
	}
	probes := make([]probe, registerBatch)
	for len(add) > 0 {
		n := min(len(add), registerBatch)
		cmds, err := t.cn.Pipelined(cctx, func(p redis.Pipeliner) error {
			for i, k := range add[:n] {
				probes[i] = t.s.newProbe(cctx, p, k)
			}
			return nil
		})
		if err != nil && ctx.Err() != nil {
			return
		}
		// A read sent after the registrations' replies came back runs
		// after them at the server; one sent before may not.
		sent := nanotime()
		for i := range n {
			kind, sum, ok := probes[i].result()
			if !ok {
				// An error reply or a lost connection: not registered, and
				// what is cached cannot be checked.
				t.s.invalidate(add[i], invalTracking)
				continue
			}
			t.registered[add[i]] = struct{}{}
			t.s.tracked(add[i], sent, kind, sum)
		}
		if err != nil && (len(cmds) == 0 || isConnErr(err)) {
			t.established.Store(false)
			t.resetConn()
			return
		}
		add = add[n:]
	}
	if t.ctlEpoch.Load() != epoch {
		// ctl reconnected under us: tracking is off on the new connection.
		t.established.Store(false)
		return
	}
	if full {
		t.redirect, t.epoch = id, epoch
		t.established.Store(true)
		// Writes made while tracking was off went unreported.
		t.s.invalidateAll(invalFlush)
	}
}

// probe is one key's registration: EXISTS registers a key (any read does),
// and reading a cached key in full as well tells whether the value cached
// missed a write (tracked). The full reads are not GET and HGETALL, so the
// server's command statistics keep telling the application's reads from
// the shim's; an ACL that denies them only costs the comparison.
type probe struct {
	ex   *redis.IntCmd    // EXISTS: registers; for a string, tells "" from missing
	str  *redis.StringCmd // GETRANGE k 0 -1: the whole string
	scan *redis.ScanCmd   // HSCAN k 0 COUNT n: the whole hash (cursor 0)
}

// newProbe queues key's registration on p, reading it as what it is cached
// as when there is a value or a fetch to check (probeKind).
func (s *Shim) newProbe(ctx context.Context, p redis.Pipeliner, key string) probe {
	pr := probe{ex: p.Exists(ctx, key)}
	switch s.probeKind(key) {
	case kindString:
		pr.str = p.GetRange(ctx, key, 0, -1)
	case kindHash:
		// A hash not yet sized may be big: the scan then stops after
		// about MaxHashFields fields, short of the whole (no match).
		pr.scan = p.HScan(ctx, key, 0, "", int64(s.opt.MaxHashFields)+1)
	}
	return pr
}

// result reads a probe's replies: whether it registered the key, and what
// it read as a value of kind (kind 0: nothing to compare, which tracked
// treats as a mismatch).
func (pr probe) result() (kind uint8, sum uint64, ok bool) {
	n, err := pr.ex.Result()
	if err != nil {
		return 0, 0, false
	}
	switch {
	case pr.str != nil && pr.str.Err() == nil:
		return kindString, (&value{exists: n == 1, str: pr.str.Val()}).sum(kindString), true
	case pr.scan != nil && pr.scan.Err() == nil:
		fields, cursor := pr.scan.Val()
		if cursor != 0 || len(fields)%2 != 0 {
			break // not the whole hash in one reply
		}
		m := make(map[string]string, len(fields)/2)
		for i := 0; i < len(fields); i += 2 {
			m[fields[i]] = fields[i+1]
		}
		return kindHash, (&value{exists: len(m) > 0, hash: m}).sum(kindHash), true
	}
	return 0, 0, true // EXISTS alone, or WRONGTYPE: no value to compare
}

// resetConn drops ctl's connection (tracking ends with it).
func (t *tracker) resetConn() {
	if t.cn != nil {
		_ = t.cn.Close()
		t.cn = nil
	}
	t.established.Store(false)
}

// isConnErr tells a lost connection from a command's own error reply.
func isConnErr(err error) bool {
	var rerr redis.Error
	return err != nil && !errors.As(err, &rerr)
}

// owns reports whether this master holds key now (a cluster's slot map;
// every master otherwise): a key is registered where it can be written.
func (t *tracker) owns(key string) bool { return t.s.topo.owner(key, t.addr) }

// trackers runs one tracker per master the client writes to (one for a
// plain client; every master of a cluster, every shard of a ring), adding
// and retiring them as the topology changes. Each tracks the cached keys
// its master holds (owns): a write can only happen there, and a key that
// moves is registered at its new master within TrackingCheck, where the
// registration's read checks the value cached (tracked).
type trackers struct {
	s  *Shim
	mu sync.Mutex
	m  map[string]*trackerRun
}

type trackerRun struct {
	t      *tracker
	cancel context.CancelFunc
	done   chan struct{}
}

func (ts *trackers) init(s *Shim) {
	ts.s = s
	ts.m = map[string]*trackerRun{}
}

// supervise reconciles the trackers with the masters every TrackingCheck.
func (ts *trackers) supervise(ctx context.Context) {
	tick := time.NewTicker(ts.s.opt.TrackingCheck)
	defer tick.Stop()
	for {
		ts.reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (ts *trackers) reconcile(ctx context.Context) {
	want := ts.s.topo.masters(ctx)
	if ctx.Err() != nil || len(want) == 0 {
		// Unknown (the cluster is unreachable): keep what runs.
		return
	}
	var gone []*trackerRun
	ts.mu.Lock()
	for addr, o := range want {
		if _, ok := ts.m[addr]; ok {
			continue
		}
		t := newTracker(ts.s, o)
		rctx, cancel := context.WithCancel(ctx)
		r := &trackerRun{t: t, cancel: cancel, done: make(chan struct{})}
		ts.m[addr] = r
		ts.s.goRun(func() { defer close(r.done); t.run(rctx) })
	}
	for addr, r := range ts.m {
		if _, ok := want[addr]; !ok {
			delete(ts.m, addr)
			gone = append(gone, r)
		}
	}
	ts.mu.Unlock()
	for _, r := range gone {
		r.cancel()
		<-r.done
		_ = r.t.close()
	}
}

// kick asks every tracker to bring its prefixes up to date.
func (ts *trackers) kick() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, r := range ts.m {
		r.t.kick()
	}
}

// established reports whether tracking runs on every master.
func (ts *trackers) established() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.m) == 0 {
		return false
	}
	for _, r := range ts.m {
		if !r.t.established.Load() {
			return false
		}
	}
	return true
}

// closeAll stops every tracker (their runs end with the shim's context).
func (ts *trackers) closeAll() error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var errs []error
	for addr, r := range ts.m {
		r.cancel()
		<-r.done
		errs = append(errs, r.t.close())
		delete(ts.m, addr)
	}
	return errors.Join(errs...)
}
