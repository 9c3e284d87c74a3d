package client

import (
	"context"
	"errors"
	"net"
	"sort"
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
//   - ctl, which runs CLIENT TRACKING ON REDIRECT <sub's id> BCAST PREFIX k…
//     with one prefix per hot key.
//
// BCAST mode reports writes by any client to keys starting with a prefix,
// so Redis needs no knowledge of what was read; a prefix equal to a hot key
// also matches longer keys, which only costs a spurious invalidation.
// Redis rejects overlapping prefixes, so a key already covered by a shorter
// one is not added, and a key that is a prefix of a tracked one forces a
// rebuild (OFF, then ON with the minimal set). Whenever tracking may have
// lapsed (either connection replaced, a rebuild) every cached value is
// dropped; the local expiry bounds staleness in the meantime regardless.
type tracker struct {
	s        *Shim
	sub, ctl *redis.Client

	subID    atomic.Int64  // CLIENT ID of sub's connection, once subscribed
	connID   atomic.Int64  // CLIENT ID of sub's newest connection
	ctlEpoch atomic.Uint64 // bumped whenever ctl opens a connection
	kicks    chan struct{}

	established atomic.Bool
	disabled    bool // the server refused tracking: stop trying

	// Owned by the ctl goroutine.
	prefixes map[string]struct{}
	redirect int64
	epoch    uint64
}

func newTracker(s *Shim, o *redis.Options) *tracker {
	t := &tracker{s: s, kicks: make(chan struct{}, 1), prefixes: map[string]struct{}{}}
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
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			_ = t.ctl.Ping(pctx).Err()
			cancel()
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
			if m.PayloadSlice == nil {
				t.s.invalidate(m.Payload, invalTracking)
			}
			for _, k := range m.PayloadSlice {
				t.s.invalidate(k, invalTracking)
			}
		}
	}
}

// sync brings the server's prefixes up to date with the hot keys.
func (t *tracker) sync(ctx context.Context) {
	id := t.subID.Load()
	if id == 0 {
		return // not subscribed yet
	}
	want := t.s.hotKeys()
	epoch := t.ctlEpoch.Load()
	full := !t.established.Load() || id != t.redirect || epoch != t.epoch
	var add []string
	if !full {
		stale := 0
		for p := range t.prefixes {
			if !coveredBy(p, want) {
				stale++
			}
		}
		for _, k := range minimalPrefixes(want) {
			if _, ok := t.prefixes[k]; ok || hasPrefixIn(k, t.prefixes) {
				continue
			}
			if isPrefixOfAny(k, t.prefixes) {
				full = true
				break
			}
			add = append(add, k)
		}
		// Keys that went cold stay tracked (spurious invalidations only)
		// until they outnumber the live ones.
		if stale > len(want)+16 {
			full = true
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if full {
		_ = t.ctl.Do(cctx, "client", "tracking", "off").Err()
		t.prefixes = map[string]struct{}{}
		t.established.Store(false)
		add = minimalPrefixes(want)
		if len(add) == 0 {
			// BCAST with no prefix would track every key.
			t.redirect, t.epoch = id, epoch
			t.established.Store(true)
			t.s.invalidateAll(invalFlush)
			return
		}
	}
	if len(add) == 0 {
		return
	}
	args := []any{"client", "tracking", "on", "redirect", id, "bcast"}
	for _, k := range add {
		args = append(args, "prefix", k)
	}
	if err := t.ctl.Do(cctx, args...).Err(); err != nil {
		if ctx.Err() != nil {
			return
		}
		var rerr redis.Error
		if errors.As(err, &rerr) && !strings.Contains(err.Error(), "redirect") && !strings.Contains(err.Error(), "overlap") {
			// An old server, or ACLs without CLIENT: channel invalidate
			// messages and the local expiry remain.
			t.disabled = true
			t.s.log.Info("server-assisted invalidation unavailable", "err", err)
			return
		}
		t.s.log.Debug("client tracking", "err", err)
		t.established.Store(false)
		return
	}
	if t.ctlEpoch.Load() != epoch {
		// ctl reconnected under us: the command ran on a fresh connection
		// that lacks the earlier prefixes. Rebuild next time.
		t.established.Store(false)
		return
	}
	for _, k := range add {
		t.prefixes[k] = struct{}{}
	}
	if full {
		t.redirect, t.epoch = id, epoch
		t.established.Store(true)
		// Writes made while tracking was off went unreported.
		t.s.invalidateAll(invalFlush)
	}
}

// minimalPrefixes drops keys that have another key of the list as a
// prefix (Redis rejects overlapping BCAST prefixes; the shorter one covers
// the longer).
func minimalPrefixes(keys []string) []string {
	sorted := append([]string(nil), keys...)
	sort.Strings(sorted)
	out := sorted[:0]
	for _, k := range sorted {
		// In sorted order a prefix comes right before the keys it covers,
		// so comparing with the last kept key is enough.
		if len(out) > 0 && strings.HasPrefix(k, out[len(out)-1]) {
			continue
		}
		out = append(out, k)
	}
	return out
}

func hasPrefixIn(k string, prefixes map[string]struct{}) bool {
	for p := range prefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

func isPrefixOfAny(k string, prefixes map[string]struct{}) bool {
	for p := range prefixes {
		if strings.HasPrefix(p, k) {
			return true
		}
	}
	return false
}

func coveredBy(p string, keys []string) bool {
	for _, k := range keys {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// trackers runs one tracker per master the client writes to (one for a
// plain client; every master of a cluster, every shard of a ring), adding
// and retiring them as the topology changes. Each tracks every hot key: a
// write can only happen where the key's slot is, and tracking it everywhere
// means a slot that moves to another master is covered there already.
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
