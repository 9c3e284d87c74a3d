package client

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotsniff/hotsniff/client/event"
	"github.com/redis/go-redis/v9"
)

// ShimOptions tune a Shim; zero values take the defaults.
type ShimOptions struct {
	// Channel is the hot-key channel (DefaultChannel if empty).
	Channel string
	// ChannelClient is where the channel lives. Nil: the cache client
	// itself (the daemon publishes to any Redis; often a separate one).
	ChannelClient redis.UniversalClient
	// Servers are extra "ip:port" addresses whose events apply to this
	// client, for when the sniffer sees another address than the client
	// dials (NAT, proxies, a Kubernetes Service in front of the pod).
	Servers []string
	// AnyServer applies events for any server (only ns and key must
	// match): for a client whose server address cannot be known.
	AnyServer bool
	// LocalTTL is how long a cached value is served before one caller
	// refreshes it (default 50ms). It bounds staleness, see
	// docs/client-shim.md.
	LocalTTL time.Duration
	// StaleGrace is how long past LocalTTL the old value is still served
	// to other callers while one refresh is in flight (default 100ms);
	// after it they go to Redis themselves, and a refresh in flight that
	// long loses its token to the next caller. A served value was read
	// from Redis at most LocalTTL+StaleGrace ago.
	StaleGrace time.Duration
	// MaxEntries bounds the cached keys (default 10000); the keys seen once
	// are bounded by 4×MaxEntries (at least 1024).
	MaxEntries int
	// MaxHashFields: a hash with more fields is not cached (default 1000).
	MaxHashFields int
	// MaxBytes bounds the bytes of the cached values (keys, values, hash
	// fields; default 64 MiB): past it a fetched value is not kept.
	MaxBytes int64
	// MaxValueBytes: a value (a whole hash) larger than this is not cached
	// (default 1 MiB).
	MaxValueBytes int
	// MaxKeyBytes: keys longer than this are never cached nor held as hot
	// (default 16 KiB).
	MaxKeyBytes int
	// HotModeLinger ends hot-running mode this long after the last hot
	// message (default 2m, above the daemon's 60s ttl_ms refreshes); keys
	// with ttl_ms 0 (manual, until cold) keep the mode on.
	HotModeLinger time.Duration
	// DisableTracking turns off server-assisted invalidation (CLIENT
	// TRACKING ... BCAST on a dedicated connection).
	DisableTracking bool
	// TrackingCheck is how often the tracking connection is checked
	// (default 1s).
	TrackingCheck time.Duration
	// MaxTrackedKeys caps the keys registered for server-assisted
	// invalidation per master (default 1024): the cached keys up to the cap;
	// the others are bounded by LocalTTL and the channel's invalidates.
	MaxTrackedKeys int
	// ChannelSecret is the daemons' shared secret (--channel-secret-file):
	// set, only signed channel messages and snapshots are applied.
	ChannelSecret []byte
	// DisableAbsorbedReports stops the shim from telling the daemon how
	// many reads it served locally (an ECHO pipelined after each refresh
	// read, see docs/client-shim.md). Without reports the daemon sees only
	// refresh reads and turns the key cold while it is still in demand.
	DisableAbsorbedReports bool
	Logger                 *slog.Logger
	// Subscriber tunes the channel subscriber (Channel, Handler and Logger
	// are set by the shim).
	Subscriber Options
}

func (o *ShimOptions) defaults() {
	if o.Channel == "" {
		o.Channel = DefaultChannel
	}
	if o.LocalTTL <= 0 {
		o.LocalTTL = 50 * time.Millisecond
	}
	if o.StaleGrace <= 0 {
		o.StaleGrace = 100 * time.Millisecond
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 10000
	}
	if o.MaxHashFields <= 0 {
		o.MaxHashFields = 1000
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 64 << 20
	}
	if o.MaxValueBytes <= 0 {
		o.MaxValueBytes = 1 << 20
	}
	if o.MaxKeyBytes <= 0 {
		o.MaxKeyBytes = 16 << 10
	}
	if o.HotModeLinger <= 0 {
		o.HotModeLinger = 2 * time.Minute
	}
	if o.TrackingCheck <= 0 {
		o.TrackingCheck = time.Second
	}
	if o.MaxTrackedKeys <= 0 {
		o.MaxTrackedKeys = 1024
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Shim serves hot keys of one go-redis client from local memory. It is a
// redis.Hook: Install adds it, and the application keeps calling go-redis.
type Shim struct {
	opt  ShimOptions
	ns   string
	db   int64
	log  *slog.Logger
	sub  *Subscriber
	topo *topology

	servers atomic.Pointer[map[string]struct{}]

	// active is hot-running mode: false makes the hook a pass-through.
	active atomic.Bool
	// bytes: the cached values' size (value.size summed).
	bytes atomic.Int64
	// chanDown: the channel is down; held keys do not lapse meanwhile
	// (their values are still refreshed every LocalTTL).
	chanDown atomic.Bool
	// lastHot is when the last hot message (or snapshot with our keys)
	// arrived, on the shim clock.
	lastHot atomic.Int64

	// Hook chains built so far (see chain): the first of each is the
	// installed client's.
	processChains, pipelineChains atomic.Int64
	// poisoned: the installed client's pool selected another DB; nothing
	// is served any more. connsPoisoned: a Conn's pipeline changed its
	// session; no Conn or Tx is served any more.
	poisoned, connsPoisoned atomic.Bool
	// connsOff: Conn and Tx chains now on another DB or inside WATCH or
	// MULTI (see settle); a Conn's pipeline is served only at 0.
	connsOff atomic.Int64
	// deferred: go-redis's own client-side cache is on for this client; it
	// already answers every read from memory, so the shim serves nothing.
	deferred bool

	mu      sync.RWMutex
	hot     map[string]int64 // hot keys for this client -> until (0: until cold)
	entries map[string]*cacheEntry
	seen    map[string]struct{} // hot keys read once, not yet admitted
	big     map[string]int64    // hashes found too big -> verdict valid until

	trackers trackers
	m        metrics
	// noReport: the server refused a report; do not send more.
	noReport atomic.Bool

	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

// Install subscribes to the hot-key channel and adds the shim to rdb's
// hooks: from then on reads of hot keys are served locally. rdb is a
// *redis.Client (also as returned by NewFailoverClient or
// NewUniversalClient), a *redis.ClusterClient or a *redis.Ring. Close stops
// it (go-redis cannot remove a hook: a closed shim passes everything
// through). Install it before the client is used by other goroutines.
func Install(rdb redis.UniversalClient, opt ShimOptions) (*Shim, error) {
	s, err := NewShim(rdb, opt)
	if err != nil {
		return nil, err
	}
	rdb.AddHook(s)
	return s, nil
}

// NewShim is Install without adding the hook, for applications that order
// their hooks themselves (add it with rdb.AddHook, once, to rdb only).
func NewShim(rdb redis.UniversalClient, opt ShimOptions) (*Shim, error) {
	opt.defaults()
	s := &Shim{
		opt:     opt,
		log:     opt.Logger.With("component", "client-shim"),
		hot:     make(map[string]int64),
		entries: make(map[string]*cacheEntry),
		seen:    make(map[string]struct{}),
		big:     make(map[string]int64),
	}
	topo, err := newTopology(s, rdb)
	if err != nil {
		return nil, err
	}
	s.topo = topo
	db := topo.ns()
	s.db, s.ns = int64(db), strconv.Itoa(db)
	s.m.init()
	for _, a := range opt.Servers {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("parse server %q: %w", a, err)
		}
	}
	if topo.kind == topoClient && cscOn(topo.client.Options()) {
		s.deferred = true
		s.log.Info("go-redis client-side cache is on for this client: it serves reads from memory itself, the shim defers to it (set its MaxStaleness to bound staleness)")
	}
	empty := map[string]struct{}{}
	s.servers.Store(&empty)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	ictx, icancel := context.WithTimeout(ctx, 5*time.Second)
	topo.hookNodes(ictx)
	topo.refresh(ictx)
	icancel()

	chc := opt.ChannelClient
	if chc == nil {
		chc = rdb
	}
	so := opt.Subscriber
	so.Channel = opt.Channel
	so.Handler = shimHandler{s}
	so.Logger = opt.Logger
	if opt.ChannelSecret != nil {
		so.ChannelSecret = opt.ChannelSecret
	}
	s.sub = New(chc, so)
	s.chanDown.Store(true) // until the first snapshot
	s.sub.onDown = func(down bool) {
		s.chanDown.Store(down)
		if down {
			s.log.Warn("hot-key channel down: serving the keys held, refreshed from the cache server, until it returns")
		} else {
			s.log.Info("hot-key channel up")
		}
	}
	s.goRun(func() {
		if err := s.sub.Run(ctx); err != nil {
			s.log.Error("hot-key subscriber stopped", "err", err)
		}
	})
	s.goRun(func() { s.housekeep(ctx) })
	if !opt.DisableTracking {
		s.trackers.init(s)
		s.goRun(func() { s.trackers.supervise(ctx) })
	}
	return s, nil
}

func (s *Shim) goRun(f func()) {
	s.wg.Add(1)
	go func() { defer s.wg.Done(); f() }()
}

// Close stops following the channel and empties the cache; the hook stays
// installed as a pass-through.
func (s *Shim) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.active.Store(false)
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	for _, e := range s.entries {
		s.setVal(e, nil)
	}
	clear(s.entries)
	clear(s.seen)
	s.mu.Unlock()
	return s.trackers.closeAll()
}

// Synced is closed once the first snapshot has been loaded.
func (s *Shim) Synced() <-chan struct{} { return s.sub.Synced() }

// Subscriber is the channel subscriber the shim follows.
func (s *Shim) Subscriber() *Subscriber { return s.sub }

// cscOn reports whether go-redis enables its client-side cache for a
// client with these options: configured, RESP3, DB 0, and no credentials
// provider (go-redis turns it off otherwise).
func cscOn(o *redis.Options) bool {
	return (o.ClientSideCacheConfig != nil || o.ClientSideCache != nil) && o.Protocol != 2 && o.DB == 0 &&
		o.CredentialsProvider == nil && o.CredentialsProviderContext == nil && o.StreamingCredentialsProvider == nil
}

// normAddr writes ip:port one way (IPv4-mapped IPv6 as IPv4, zones kept).
func normAddr(a string) string {
	ap, err := netip.ParseAddrPort(a)
	if err != nil {
		return a
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
}

// matches reports whether an event is for this client: proto redis, our
// DB, and our server (or a manual event naming none).
func (s *Shim) matches(e *event.Event) bool {
	if e.Proto != "redis" || e.NS != s.ns || e.Prefix || len(e.Key) > s.opt.MaxKeyBytes {
		return false
	}
	if s.opt.AnyServer || e.Server == "" {
		return true
	}
	_, ok := (*s.servers.Load())[normAddr(e.Server)]
	return ok
}

// cacheable is matches restricted to entries that allow local caching: a
// key published "cacheable":false (written too often for a local copy to
// last) is not hot for the shim, so it is neither admitted nor served, and
// a copy cached before the verdict is dropped when it arrives.
func (s *Shim) cacheable(e *event.Event) bool { return !e.Uncacheable && s.matches(e) }

// shimHandler feeds the subscriber's changes into the shim, on the
// subscriber's goroutine.
type shimHandler struct{ s *Shim }

func (h shimHandler) Event(e *event.Event) {
	s := h.s
	if !s.matches(e) {
		return
	}
	key := string(e.Key)
	switch e.Type {
	case event.TypeHot, event.TypeCold:
		// Ask the subscriber rather than trust this one message: another
		// node may still report the key hot after this node's cold.
		until, ok := s.sub.HotUntil("redis", s.ns, e.Key, s.cacheable)
		if e.Type == event.TypeHot {
			s.lastHot.Store(nanotime())
		}
		s.setHot(key, monoOf(until), ok)
	case event.TypeInvalidate:
		s.invalidate(key, invalEvent)
	}
}

func (h shimHandler) Snapshot(*event.Snapshot) {
	s := h.s
	hot := make(map[string]int64)
	for _, e := range s.sub.HotSet() {
		if !s.matches(e) {
			continue
		}
		if until, ok := s.sub.HotUntil("redis", s.ns, e.Key, s.cacheable); ok {
			hot[string(e.Key)] = monoOf(until)
		}
	}
	if len(hot) > 0 {
		s.lastHot.Store(nanotime())
	}
	s.mu.Lock()
	s.hot = hot
	var gone []*cacheEntry
	for k, e := range s.entries {
		if until, ok := hot[k]; ok {
			e.hotUntil.Store(until)
		} else {
			gone = append(gone, e)
		}
	}
	s.mu.Unlock()
	for _, e := range gone {
		s.drop(e, evictNotHot)
	}
	// Keys still hot keep their values: a reload (a gap, a daemon restart,
	// a reconnect) must not send every reader to the server at once; an
	// invalidate lost meanwhile is bounded by LocalTTL like a foreign write.
	s.updateMode(nanotime())
	s.trackers.kick()
}

// setHot records key as hot until until, or not hot.
func (s *Shim) setHot(key string, until int64, hot bool) {
	s.mu.Lock()
	e := s.entries[key]
	if hot {
		s.hot[key] = until
		if e != nil {
			e.hotUntil.Store(until)
		}
	} else {
		delete(s.hot, key)
		delete(s.seen, key)
	}
	s.mu.Unlock()
	if !hot && e != nil {
		s.drop(e, evictNotHot)
		s.m.invalidations[invalCold].Add(1)
	}
	s.updateMode(nanotime())
	s.trackers.kick()
}

// updateMode turns hot-running mode on while keys are hot and a hot
// message came within HotModeLinger (or a key is hot until cold); when it
// ends, everything cached goes.
func (s *Shim) updateMode(now int64) {
	if s.closed.Load() {
		return
	}
	s.mu.RLock()
	n := len(s.hot)
	forever := false
	for _, u := range s.hot {
		if u == 0 {
			forever = true
			break
		}
	}
	s.mu.RUnlock()
	on := n > 0 && (forever || now-s.lastHot.Load() < int64(s.opt.HotModeLinger) || s.chanDown.Load())
	if was := s.active.Swap(on); was && !on {
		s.log.Info("hot-running mode ended")
		s.mu.Lock()
		for k, e := range s.entries {
			e.mu.Lock()
			s.setVal(e, nil)
			e.mu.Unlock()
			delete(s.entries, k)
			s.m.evictions[evictModeEnd].Add(1)
		}
		clear(s.seen)
		s.mu.Unlock()
	}
}

// housekeep ages out keys whose hot entry lapsed, values long expired and
// the mode, and follows the client's servers (cluster nodes come and go,
// a DNS name may move).
func (s *Shim) housekeep(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	lastResolve := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := nanotime()
		var lapsed []string
		var idle []*cacheEntry
		down := s.chanDown.Load()
		s.mu.Lock()
		for k, u := range s.hot {
			if u != 0 && now >= u && !down {
				delete(s.hot, k)
				delete(s.seen, k)
				lapsed = append(lapsed, k)
			}
		}
		for _, e := range s.entries {
			// Not read for a while (the value expired and nobody refreshed
			// it): the key may be hot at another client, not here.
			if v := e.val.Load(); v != nil && now-v.expires > int64(10*time.Second) {
				idle = append(idle, e)
			}
		}
		s.mu.Unlock()
		for _, k := range lapsed {
			s.mu.RLock()
			e := s.entries[k]
			s.mu.RUnlock()
			if e != nil {
				s.drop(e, evictNotHot)
			}
		}
		for _, e := range idle {
			s.drop(e, evictIdle)
		}
		s.updateMode(now)
		if len(lapsed) > 0 {
			s.trackers.kick()
		}
		if time.Since(lastResolve) > time.Second {
			// Cheap: go-redis's current view of the nodes, and DNS at
			// most every 30s per name.
			lastResolve = time.Now()
			s.topo.refresh(ctx)
		}
	}
}

// trackedKeys picks the keys one master should track: cached keys it owns,
// those already registered first (no churn), at most MaxTrackedKeys.
func (s *Shim) trackedKeys(registered map[string]struct{}, owns func(string) bool) map[string]struct{} {
	s.mu.RLock()
	keys := make([]string, 0, min(len(s.entries), 4*s.opt.MaxTrackedKeys))
	for k := range s.entries {
		keys = append(keys, k)
	}
	s.mu.RUnlock()
	out := make(map[string]struct{}, min(len(keys), s.opt.MaxTrackedKeys))
	for _, k := range keys {
		if _, ok := registered[k]; ok && len(out) < s.opt.MaxTrackedKeys && owns(k) {
			out[k] = struct{}{}
		}
	}
	for _, k := range keys {
		if len(out) >= s.opt.MaxTrackedKeys {
			break
		}
		if _, ok := out[k]; !ok && owns(k) {
			out[k] = struct{}{}
		}
	}
	return out
}
