package client

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client kinds Install accepts.
const (
	topoClient  = iota // *redis.Client: one server (also failover/sentinel clients)
	topoCluster        // *redis.ClusterClient
	topoRing           // *redis.Ring
)

// maxDialed bounds the dialed peer addresses remembered.
const maxDialed = 1024

// topology knows which servers the installed client talks to: the events
// about them apply. It is the union of ShimOptions.Servers, the configured
// addresses (resolved), the cluster's or ring's nodes as go-redis knows
// them now, and the peer of every connection go-redis dialed (which is how
// a failover client's master, reached through a dialer under the
// placeholder address "FailoverClient", becomes known).
type topology struct {
	s       *Shim
	kind    int
	client  *redis.Client
	cluster *redis.ClusterClient
	ring    *redis.Ring

	mu       sync.Mutex
	dialedTo map[string]struct{}
	resolved map[string]resolvedAddr // host:port -> ip:port list
	hooked   map[*redis.Client]bool  // node clients carrying nodeHook
}

type resolvedAddr struct {
	addrs []string
	at    time.Time
}

func newTopology(s *Shim, rdb redis.UniversalClient) (*topology, error) {
	t := &topology{s: s, dialedTo: map[string]struct{}{}, resolved: map[string]resolvedAddr{}, hooked: map[*redis.Client]bool{}}
	switch c := rdb.(type) {
	case *redis.Client:
		t.kind, t.client = topoClient, c
	case *redis.ClusterClient:
		t.kind, t.cluster = topoCluster, c
	case *redis.Ring:
		t.kind, t.ring = topoRing, c
	default:
		return nil, fmt.Errorf("install shim: unsupported client %T (want *redis.Client, *redis.ClusterClient or *redis.Ring)", rdb)
	}
	return t, nil
}

// ns is the DB events must name.
func (t *topology) ns() int {
	switch t.kind {
	case topoClient:
		return t.client.Options().DB
	case topoRing:
		return t.ring.Options().DB
	}
	return 0 // a cluster has DB 0 only
}

// hookNodes makes every node client of a cluster or ring carry nodeHook,
// now and as go-redis creates them: transactions (Watch) run on a node
// client directly, and their writes must still invalidate.
func (t *topology) hookNodes(ctx context.Context) {
	add := func(n *redis.Client) {
		t.mu.Lock()
		done := t.hooked[n]
		t.hooked[n] = true
		t.mu.Unlock()
		if !done {
			n.AddHook(nodeHook{t.s})
		}
	}
	each := func(ctx context.Context, n *redis.Client) error { add(n); return nil }
	switch t.kind {
	case topoCluster:
		t.cluster.OnNewNode(add)
		_ = t.cluster.ForEachShard(ctx, each)
	case topoRing:
		t.ring.OnNewNode(add)
		_ = t.ring.ForEachShard(ctx, each)
	}
}

// dialed records a connection's peer.
func (t *topology) dialed(a net.Addr) {
	if a == nil {
		return
	}
	addr := normAddr(a.String())
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, known := t.dialedTo[addr]; known {
		return
	}
	if len(t.dialedTo) >= maxDialed {
		clear(t.dialedTo)
	}
	t.dialedTo[addr] = struct{}{}
	// Copy on write: matches reads the set without a lock; t.mu orders
	// this against refresh's store.
	old := *t.s.servers.Load()
	if _, ok := old[addr]; ok {
		return
	}
	set := make(map[string]struct{}, len(old)+1)
	for k := range old {
		set[k] = struct{}{}
	}
	set[addr] = struct{}{}
	t.s.servers.Store(&set)
}

// nodes lists the addresses go-redis has for the client's servers now.
func (t *topology) nodes(ctx context.Context) []string {
	var mu sync.Mutex
	var out []string
	each := func(_ context.Context, n *redis.Client) error {
		mu.Lock()
		out = append(out, n.Options().Addr)
		mu.Unlock()
		return nil
	}
	switch t.kind {
	case topoClient:
		o := t.client.Options()
		if o.Network == "" || o.Network == "tcp" {
			out = append(out, o.Addr)
		}
	case topoCluster:
		_ = t.cluster.ForEachShard(ctx, each)
	case topoRing:
		_ = t.ring.ForEachShard(ctx, each)
	}
	return out
}

// refresh recomputes the server set.
func (t *topology) refresh(ctx context.Context) {
	set := make(map[string]struct{})
	for _, a := range t.s.opt.Servers {
		set[normAddr(a)] = struct{}{}
	}
	for _, a := range t.nodes(ctx) {
		for _, r := range t.resolve(ctx, a) {
			set[r] = struct{}{}
		}
	}
	t.mu.Lock()
	for a := range t.dialedTo {
		set[a] = struct{}{}
	}
	t.s.servers.Store(&set)
	t.mu.Unlock()
}

// resolve turns host:port into ip:port (events carry the IP the sniffer
// saw), caching each answer for 30s (a DNS name may move).
func (t *topology) resolve(ctx context.Context, a string) []string {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return nil // "FailoverClient" and the like: known by dialing
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return []string{netip.AddrPortFrom(ip.Unmap(), atoiPort(port)).String()}
	}
	t.mu.Lock()
	r, ok := t.resolved[a]
	t.mu.Unlock()
	if ok && time.Since(r.at) < 30*time.Second {
		return r.addrs
	}
	if host == "" {
		host = "localhost"
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	ips, err := net.DefaultResolver.LookupHost(rctx, host)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			t.s.log.Warn("resolve cache server; using the other known addresses", "addr", a, "err", err)
		}
		return r.addrs
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, normAddr(net.JoinHostPort(ip, port)))
	}
	t.mu.Lock()
	if len(t.resolved) >= maxDialed {
		clear(t.resolved)
	}
	t.resolved[a] = resolvedAddr{addrs: out, at: time.Now()}
	t.mu.Unlock()
	return out
}

func atoiPort(p string) uint16 {
	n, _ := strconv.ParseUint(p, 10, 16)
	return uint16(n)
}

// masters lists the servers that take writes, with the options to dial
// each: tracking (CLIENT TRACKING) must run on every one, since a hot key
// may be written wherever its slot is, now or after a reshard.
func (t *topology) masters(ctx context.Context) map[string]*redis.Options {
	out := map[string]*redis.Options{}
	var mu sync.Mutex
	each := func(_ context.Context, n *redis.Client) error {
		o := n.Options()
		mu.Lock()
		out[o.Addr] = o
		mu.Unlock()
		return nil
	}
	switch t.kind {
	case topoClient:
		o := t.client.Options()
		if o.Network == "" || o.Network == "tcp" {
			out[o.Addr] = o
		}
	case topoCluster:
		_ = t.cluster.ForEachMaster(ctx, each)
	case topoRing:
		_ = t.ring.ForEachShard(ctx, each)
	}
	return out
}

// owner reports whether the master at addr holds key now: on a cluster by
// go-redis's slot map, on a ring by the ring's own sharding; a plain or
// sentinel client has one master. A key is registered for tracking only
// where it is held: a registration elsewhere would read the key as missing
// and drop the value cached from its shard (tracked).
func (t *topology) owner(key, addr string) bool {
	switch t.kind {
	case topoRing:
		c, err := t.ring.GetShardClientForKey(key)
		return err != nil || c.Options().Addr == addr // unknown: register
	case topoCluster:
	default:
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := t.cluster.MasterForKey(ctx, key)
	if err != nil {
		return true // unknown: register, a MOVED reply only costs a round trip
	}
	return c.Options().Addr == addr
}

// crossSlot reports whether a cluster command's keys span hash slots
// (go-redis sends such an MGET as one command, which Redis refuses).
func (t *topology) crossSlot(keys []any) bool {
	if t.kind != topoCluster || len(keys) < 2 {
		return false
	}
	first := keySlot(argString(keys[0]))
	for _, k := range keys[1:] {
		if keySlot(argString(k)) != first {
			return true
		}
	}
	return false
}

// nodeHook rides on the node clients of a cluster or ring: it serves
// nothing (the cluster-level hook does), but records dialed peers and makes
// writes sent straight to a node (transactions under Watch) invalidate.
type nodeHook struct{ s *Shim }

func (h nodeHook) DialHook(next redis.DialHook) redis.DialHook { return h.s.DialHook(next) }

func (h nodeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.s.active.Load() {
			return next(ctx, cmd)
		}
		return h.s.write(ctx, cmd, next)
	}
}

func (h nodeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.s.active.Load() {
			return next(ctx, cmds)
		}
		return h.s.writePipeline(ctx, cmds, next)
	}
}
