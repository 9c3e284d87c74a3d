// Package client follows the hot-key channel: it loads the snapshot, then
// applies the channel's messages, repairing from the snapshot whenever a
// publisher's seq shows a gap or the connection was lost. Caching shims are
// built on it. The protocol is in docs/channel-protocol.md.
package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotsniff/hotsniff/client/event"
	"github.com/hotsniff/hotsniff/client/event/envelope"
	"github.com/redis/go-redis/v9"
)

// DefaultChannel is the contract's default channel name.
const DefaultChannel = "hotsniff:hotkeys"

// SnapshotKey is where publishers keep the merged snapshot.
func SnapshotKey(channel string) string { return channel + ":snapshot" }

// Handler is told about every state change, from the Run goroutine, in
// order. It must not block for long: messages wait meanwhile.
type Handler interface {
	// Snapshot is called after the snapshot was (re)loaded and applied:
	// the hot set is now Snapshot.Keys plus any newer messages. After a
	// reload caused by a gap or a reconnect a careful cache drops its
	// cached values, since an invalidate may have been missed.
	Snapshot(s *event.Snapshot)
	// Event is called for each message applied (stale ones are not).
	Event(e *event.Event)
}

// HandlerFuncs adapts functions to Handler; nil functions are skipped.
type HandlerFuncs struct {
	OnSnapshot func(*event.Snapshot)
	OnEvent    func(*event.Event)
}

// Snapshot calls OnSnapshot.
func (h HandlerFuncs) Snapshot(s *event.Snapshot) {
	if h.OnSnapshot != nil {
		h.OnSnapshot(s)
	}
}

// Event calls OnEvent.
func (h HandlerFuncs) Event(e *event.Event) {
	if h.OnEvent != nil {
		h.OnEvent(e)
	}
}

// Options tune a Subscriber; zero values take the defaults.
type Options struct {
	Channel string // DefaultChannel if empty
	// Sharded uses SSUBSCRIBE. Nil: sharded on a cluster client, as the
	// publisher does.
	Sharded *bool
	Handler Handler // may be nil: then only the hot set is kept
	Logger  *slog.Logger
	// LogSize bounds the recent messages kept to re-apply over a snapshot
	// older than them (default 10000; sections lag the channel by up to
	// the publisher's snapshot interval, 1s by default).
	LogSize int
	// RetryDelay is the wait before reading the snapshot again when it is
	// older than a gap (default 250ms); after MaxRetries (default 20) the
	// subscriber carries on with what it has.
	RetryDelay time.Duration
	MaxRetries int
	// RestartWindow: a seq this far below the last one seen from a node
	// means that node restarted with a lower seq, not a late duplicate
	// (default 1<<20, far above any publisher's queue).
	RestartWindow uint64
	// PingInterval is how long the channel may stay silent before the
	// connection is checked with PING (default 15s).
	PingInterval time.Duration
	// ConfirmTimeout: a seq jump the snapshot has not confirmed this long
	// after it is undone, so a forged jump cannot silence a node (default
	// 5s; the publisher rewrites its section at least every second).
	ConfirmTimeout time.Duration
	// ChannelSecret, when set, is the shared secret of the daemons'
	// --channel-secret-file: only messages and snapshots signed with it are
	// applied. Without it a signed message is unwrapped unverified.
	ChannelSecret []byte
	// MaxHotEntries bounds the hot-set entries held (default 131072; a
	// daemon publishes at most --max-hot keys): past it new entries are
	// refused and counted (Stats.HotSetFull).
	MaxHotEntries int
	Now           func() time.Time
}

// Reasons a message is counted bad (docs/channel-protocol.md).
const (
	BadTooLarge = iota
	BadOutOfRange
	BadUndecodable
	BadSignature
	BadUnconfirmedSeq
	BadFlapping
	nBad
)

// BadReasons names the reasons, as in the bad_message{reason} counters.
var BadReasons = [nBad]string{"too_large", "out_of_range", "undecodable", "bad_signature", "unconfirmed_seq", "flapping"}

// Stats are the subscriber's counters.
type Stats struct {
	Messages     uint64 // messages received
	Stale        uint64 // ignored: already reflected by the snapshot
	Invalid      uint64 // not decodable
	Gaps         uint64 // seq gaps seen
	Restarts     uint64 // publishers seen restarting with a lower seq
	Reloads      uint64 // snapshot loads
	ReloadErrors uint64
	Reconnects   uint64
	LogDropped   uint64
	HotKeys      int
	// Bad counts bad messages and snapshot entries by reason (BadReasons);
	// Invalid is their sum over the messages themselves.
	Bad [nBad]uint64
	// ChannelUp: subscribed and the last snapshot read succeeded.
	ChannelUp bool
	// HotSetFull counts hot entries refused past MaxHotEntries.
	HotSetFull uint64
}

// Subscriber follows one channel. Hot, HotSet and Stats may be called from
// any goroutine; Run from one.
type Subscriber struct {
	rdb     redis.UniversalClient
	opt     Options
	sharded bool
	log     *slog.Logger

	mu  sync.RWMutex
	set *hotSet

	// Owned by the Run goroutine.
	last       map[string]uint64 // highest seq seen (or loaded) per node
	pending    map[string]uint64 // node -> seq the snapshot must reach
	logbuf     []*event.Event    // recent messages, oldest first
	logFloor   map[string]uint64 // node -> highest seq dropped from logbuf
	retries    int
	lastReload time.Time
	retryAt    time.Time
	subscribed bool
	// reloadFailing keeps an outage to one warning, not one per retry.
	reloadFailing bool
	// missingSince: since when the snapshot document has been missing while
	// a hot set was held (zero: it is there); see reload.
	missingSince time.Time
	lastExpire   time.Time
	lastPrune    time.Time
	decoded      []*event.Event // reused by onMessage

	synced     chan struct{}
	syncedOnce sync.Once

	messages, stale, invalid, gaps, restarts, reloads, reloadErrs, reconnects, logDropped atomic.Uint64
	bad                                                                                   [nBad]atomic.Uint64

	// pendingSince: when each pending[node] was first set (Run goroutine).
	pendingSince map[string]time.Time
	// up: the channel is followed (subscribed, snapshot read). While it is
	// down a shim keeps what it holds (docs/channel-protocol.md §11).
	up     atomic.Bool
	onDown func(bool)
	flap   flapGuard
}

// New returns a Subscriber; Run starts it.
func New(rdb redis.UniversalClient, opt Options) *Subscriber {
	if opt.Channel == "" {
		opt.Channel = DefaultChannel
	}
	_, cluster := rdb.(*redis.ClusterClient)
	sharded := cluster
	if opt.Sharded != nil {
		sharded = *opt.Sharded
	}
	if opt.Handler == nil {
		opt.Handler = HandlerFuncs{}
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.LogSize <= 0 {
		opt.LogSize = 10000
	}
	if opt.RetryDelay <= 0 {
		opt.RetryDelay = 250 * time.Millisecond
	}
	if opt.MaxRetries <= 0 {
		opt.MaxRetries = 20
	}
	if opt.RestartWindow == 0 {
		opt.RestartWindow = 1 << 20
	}
	if opt.PingInterval <= 0 {
		opt.PingInterval = 15 * time.Second
	}
	if opt.MaxHotEntries <= 0 {
		opt.MaxHotEntries = 1 << 17
	}
	if opt.ConfirmTimeout <= 0 {
		opt.ConfirmTimeout = 5 * time.Second
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &Subscriber{
		rdb: rdb, opt: opt, sharded: sharded,
		log: opt.Logger.With("component", "client", "channel", opt.Channel),
		set: newHotSet(opt.MaxHotEntries), last: map[string]uint64{}, pending: map[string]uint64{}, logFloor: map[string]uint64{},
		pendingSince: map[string]time.Time{}, flap: newFlapGuard(),
		synced: make(chan struct{}),
	}
}

// Subscribe follows channel until ctx ends, calling h for each change.
func Subscribe(ctx context.Context, rdb redis.UniversalClient, channel string, h Handler) error {
	return New(rdb, Options{Channel: channel, Handler: h}).Run(ctx)
}

// Synced is closed once the first snapshot has been applied.
func (s *Subscriber) Synced() <-chan struct{} { return s.synced }

// Hot reports whether key is hot for proto and ns on any server.
func (s *Subscriber) Hot(proto, ns string, key []byte) bool {
	_, ok := s.Lookup(proto, ns, key)
	return ok
}

// Lookup returns the live entry for key (the one with the longest ttl when
// several servers or nodes report it). The event is shared: do not modify.
func (s *Subscriber) Lookup(proto, ns string, key []byte) (*event.Event, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.set.hot(proto, ns, key, s.opt.Now())
}

// HotUntil is Hot counting only the entries match accepts (nil: all), and
// reports until when the key stays hot without a refresh (zero time: until
// a cold message).
func (s *Subscriber) HotUntil(proto, ns string, key []byte, match func(*event.Event) bool) (time.Time, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.set.hotUntil(proto, ns, key, s.opt.Now(), match)
}

// HotSet returns the live entries (shared events: do not modify).
func (s *Subscriber) HotSet() []*event.Event {
	now := s.opt.Now()
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*event.Event, 0, len(s.set.m))
	for _, en := range s.set.m {
		if en.expires.IsZero() || now.Before(en.expires) {
			out = append(out, en.ev)
		}
	}
	return out
}

// Stats returns the counters.
func (s *Subscriber) Stats() Stats {
	s.mu.RLock()
	n, full := len(s.set.m), s.set.full
	s.mu.RUnlock()
	st := Stats{
		Messages: s.messages.Load(), Stale: s.stale.Load(), Invalid: s.invalid.Load(),
		Gaps: s.gaps.Load(), Restarts: s.restarts.Load(), Reloads: s.reloads.Load(),
		ReloadErrors: s.reloadErrs.Load(), Reconnects: s.reconnects.Load(),
		LogDropped: s.logDropped.Load(), HotKeys: n, ChannelUp: s.up.Load(), HotSetFull: uint64(full),
	}
	for i := range st.Bad {
		st.Bad[i] = s.bad[i].Load()
	}
	return st
}

// ChannelUp reports whether the channel is followed right now: subscribed,
// and the last snapshot read succeeded.
func (s *Subscriber) ChannelUp() bool { return s.up.Load() }

// setUp records the channel's state and tells the shim when it changes.
func (s *Subscriber) setUp(up bool) {
	if s.up.Swap(up) != up && s.onDown != nil {
		s.onDown(!up)
	}
}

// Run subscribes, then loads the snapshot (in that order, so nothing
// published in between is missed: those messages wait in the subscription
// and are applied after the snapshot when newer than it), then follows the
// channel until ctx ends. It keeps reconnecting while Redis is down and
// returns nil when ctx ends.
func (s *Subscriber) Run(ctx context.Context) error {
	var ps *redis.PubSub
	if s.sharded {
		ps = s.rdb.SSubscribe(ctx, s.opt.Channel)
	} else {
		ps = s.rdb.Subscribe(ctx, s.opt.Channel)
	}
	// A blocked read only notices ctx at its deadline; closing the
	// subscription ends it at once.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	defer ps.Close()

	const backoffMin, backoffMax = 100 * time.Millisecond, 5 * time.Second
	backoff := backoffMin
	failing := false
	for {
		if ctx.Err() != nil {
			return nil
		}
		timeout := s.opt.PingInterval
		if !s.retryAt.IsZero() {
			d := time.Until(s.retryAt)
			if d <= 0 {
				s.reload(ctx)
				continue
			}
			timeout = min(timeout, d)
		}
		msg, err := ps.ReceiveTimeout(ctx, timeout)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Quiet channel: expire lapsed entries and check the link.
				s.expire()
				if perr := ps.Ping(ctx); perr != nil && ctx.Err() == nil {
					s.log.Debug("ping subscription", "err", perr)
				}
				continue
			}
			if !failing {
				s.log.Warn("subscription lost; reconnecting", "err", err)
			}
			failing = true
			s.subscribed = false
			s.setUp(false)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			backoff = min(2*backoff, backoffMax)
			continue
		}
		backoff = backoffMin
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Channel != s.opt.Channel {
				continue
			}
			switch m.Kind {
			case "subscribe", "ssubscribe":
				if failing || s.subscribed {
					s.reconnects.Add(1)
					s.log.Info("subscription restored; reloading snapshot")
				}
				failing = false
				s.subscribed = true
				// Anything may have been missed while away.
				s.reload(ctx)
			case "sunsubscribe":
				// The server dropped us (the slot moved): follow it.
				s.subscribed = false
				if err := ps.SSubscribe(ctx, s.opt.Channel); err != nil && ctx.Err() == nil {
					s.log.Warn("resubscribe sharded channel", "err", err)
				}
			}
		case *redis.Message:
			failing = false
			s.onMessage(ctx, m.Payload)
		}
	}
}

// onMessage applies one message: a single event, or a batch of them (the
// v2 envelope), each in order. Untrusted: its length is checked before
// anything else, then its signature, then its JSON and ranges.
func (s *Subscriber) onMessage(ctx context.Context, payload string) {
	s.messages.Add(1)
	if len(payload) > event.MaxMessageBytes+envelope.Overhead {
		// Before even copying it.
		s.badMessage(fmt.Errorf("message of %d bytes: %w", len(payload), event.ErrTooLarge))
		return
	}
	body, err := s.open([]byte(payload), event.MaxMessageBytes)
	if err != nil {
		s.badMessage(err)
		return
	}
	evs, err := event.DecodeMessage(s.decoded[:0], body)
	s.decoded = evs[:0]
	if err != nil {
		// A batch is all or nothing: a bad one is dropped whole, and the
		// seq gap it leaves makes the next message reload the snapshot.
		s.badMessage(err)
		return
	}
	for i, e := range evs {
		evs[i] = nil
		s.onEvent(ctx, e)
	}
}

var errSignature = errors.New("not signed with the channel secret")

// open checks a message's or snapshot's size and envelope and returns the
// body to parse: with a secret, only a signed envelope whose MAC matches;
// without, an envelope is unwrapped unverified and anything else is the body.
func (s *Subscriber) open(b []byte, limit int) ([]byte, error) {
	if len(b) > limit+envelope.Overhead {
		return nil, fmt.Errorf("%d bytes, at most %d: %w", len(b), limit, event.ErrTooLarge)
	}
	if s.opt.ChannelSecret != nil {
		body, err := envelope.Open(s.opt.ChannelSecret, b)
		if err != nil {
			return nil, errSignature
		}
		return body, nil
	}
	if body, ok := envelope.Unwrap(b); ok {
		return body, nil
	}
	return b, nil
}

// badMessage counts a rejected message by reason; it is skipped, never
// fatal, and leaves every seq and cached value alone.
func (s *Subscriber) badMessage(err error) {
	s.invalid.Add(1)
	r := BadUndecodable
	switch {
	case errors.Is(err, event.ErrTooLarge):
		r = BadTooLarge
	case errors.Is(err, event.ErrOutOfRange):
		r = BadOutOfRange
	case errors.Is(err, errSignature):
		r = BadSignature
	}
	s.bad[r].Add(1)
	s.log.Debug("bad channel message", "reason", BadReasons[r], "err", err)
}

// onEvent applies one event, checking its seq against the last one seen
// from its node.
func (s *Subscriber) onEvent(ctx context.Context, e *event.Event) {
	now := s.opt.Now()
	reload := false
	last, known := s.last[e.Node]
	switch {
	case !known:
		// First word from this node since the last snapshot without it:
		// nothing to compare with.
		s.last[e.Node] = e.Seq
	case e.Seq <= last:
		if last-e.Seq <= s.opt.RestartWindow {
			// Already in the snapshot we loaded (or a duplicate).
			s.stale.Add(1)
			return
		}
		s.restarts.Add(1)
		s.log.Info("publisher restarted", "node", e.Node, "seq", e.Seq, "last", last)
		s.forget(e.Node)
		s.last[e.Node] = e.Seq
		reload = s.want(e.Node, e.Seq-1)
	case e.Seq > last+1:
		s.gaps.Add(1)
		s.log.Debug("seq gap", "node", e.Node, "seq", e.Seq, "last", last)
		s.last[e.Node] = e.Seq
		reload = s.want(e.Node, e.Seq-1)
	default:
		s.last[e.Node] = e.Seq
	}
	if e.Type == event.TypeHot && s.flap.held(e, now) {
		// The verdict flaps: keep the key cacheable (values are still
		// refreshed every LocalTTL, so staleness stays bounded).
		s.bad[BadFlapping].Add(1)
		c := *e
		c.Uncacheable = false
		e = &c
	}
	s.remember(e)
	s.mu.Lock()
	s.set.apply(e, now)
	if now.Sub(s.lastExpire) > time.Second && s.up.Load() {
		s.set.expire(now)
		s.lastExpire = now
	}
	s.mu.Unlock()
	s.opt.Handler.Event(e)
	if now.Sub(s.lastPrune) > time.Second {
		s.lastPrune = now
		for _, e := range s.flap.prune(now) {
			// A verdict held back while the key flapped, now steady.
			s.mu.Lock()
			s.set.apply(e, now)
			s.mu.Unlock()
			s.opt.Handler.Event(e)
		}
	}
	if reload {
		s.reload(ctx)
	}
}

// remember logs e. Every message is kept, not only those after a gap: a
// reload caused by one node must not roll another node's entries back to
// its older section.
func (s *Subscriber) remember(e *event.Event) {
	if len(s.logbuf) >= s.opt.LogSize {
		// Drop the oldest quarter at once, so the copy is amortised.
		n := max(s.opt.LogSize/4, 1)
		for _, old := range s.logbuf[:n] {
			s.logFloor[old.Node] = max(s.logFloor[old.Node], old.Seq)
		}
		s.logbuf = s.logbuf[:copy(s.logbuf, s.logbuf[n:])]
		s.logDropped.Add(uint64(n))
	}
	s.logbuf = append(s.logbuf, e)
}

// forget drops a restarted node's logged messages: their seqs belong to its
// previous run and would compare wrongly with the new one's.
func (s *Subscriber) forget(node string) {
	kept := s.logbuf[:0]
	for _, e := range s.logbuf {
		if e.Node != node {
			kept = append(kept, e)
		}
	}
	clear(s.logbuf[len(kept):])
	s.logbuf = kept
	delete(s.logFloor, node)
}

// want records that node's section must reach seq to repair a gap, and
// reports whether to reload now (else the retry timer will).
func (s *Subscriber) want(node string, seq uint64) bool {
	if seq > s.pending[node] {
		if _, ok := s.pending[node]; !ok {
			s.pendingSince[node] = time.Now()
		}
		s.pending[node] = seq
		s.retries = 0 // a new gap gets its own round of retries
	}
	if time.Since(s.lastReload) >= s.opt.RetryDelay {
		return true
	}
	s.retryAt = s.lastReload.Add(s.opt.RetryDelay)
	return false
}

func (s *Subscriber) expire() {
	now := s.opt.Now()
	for _, e := range s.flap.prune(now) {
		// A verdict held back while the key flapped, now steady: apply it.
		s.mu.Lock()
		s.set.apply(e, now)
		s.mu.Unlock()
		s.opt.Handler.Event(e)
	}
	if !s.up.Load() {
		// Channel down: nothing lapses (docs/channel-protocol.md §11).
		return
	}
	s.mu.Lock()
	s.set.expire(now)
	s.lastExpire = now
	s.mu.Unlock()
}

// reload reads the snapshot and rebuilds the hot set from it plus the
// logged messages that are newer than it.
func (s *Subscriber) reload(ctx context.Context) {
	s.reloads.Add(1)
	s.lastReload = time.Now()
	s.retryAt = time.Time{}
	wasDown := !s.up.Load()
	snap, err := s.readSnapshot(ctx)
	missing := errors.Is(err, errNoSnapshot)
	if missing {
		err = nil
		s.mu.RLock()
		held := len(s.set.m) > 0
		s.mu.RUnlock()
		if held || len(s.last) > 0 {
			// No document where there was one: the channel's Redis
			// restarted empty (or was flushed). Publishers rewrite their
			// sections about every second, so this is not a fresh snapshot
			// saying nothing is hot: keep the hot set and read again. Still
			// missing after ConfirmTimeout, it is believed (no publisher is
			// left), so held keys never outlive their publishers by more.
			if s.missingSince.IsZero() {
				s.missingSince = time.Now()
				s.log.Warn("snapshot missing (the channel's Redis restarted empty?); keeping the hot set until it is rewritten")
			}
			if time.Since(s.missingSince) < s.opt.ConfirmTimeout {
				s.reloadFailing = false
				s.retryAt = time.Now().Add(s.opt.RetryDelay)
				if s.subscribed {
					s.setUp(true)
				}
				s.syncedOnce.Do(func() { close(s.synced) })
				return
			}
		}
	}
	s.missingSince = time.Time{}
	if errors.Is(err, errBadSnapshot) {
		// A hostile or broken document: keep the state we have, try again
		// later, count it; the channel itself is fine.
		s.reloadErrs.Add(1)
		s.retryAt = time.Now().Add(s.opt.RetryDelay)
		if !s.reloadFailing {
			s.log.Warn("bad snapshot ignored; keeping the current hot set", "err", err)
		}
		s.reloadFailing = true
		// The channel itself works: follow its messages meanwhile, and do
		// not keep an application waiting for a first sync that a broken
		// or hostile document would never give.
		if s.subscribed {
			s.setUp(true)
		}
		s.syncedOnce.Do(func() { close(s.synced) })
		return
	}
	if err != nil {
		s.setUp(false)
		s.reloadErrs.Add(1)
		if ctx.Err() == nil {
			if !s.reloadFailing {
				s.log.Warn("reload snapshot; retrying", "err", err)
			}
			s.reloadFailing = true
			s.retryAt = time.Now().Add(s.opt.RetryDelay)
		}
		return
	}
	s.reloadFailing = false
	now := s.opt.Now()
	sec := make(map[string]uint64, len(snap.Nodes))
	for _, n := range snap.Nodes {
		sec[n.Node] = n.Seq
	}
	set := newHotSet(s.opt.MaxHotEntries)
	set.full = s.set.full // cumulative
	for _, e := range snap.Keys {
		if e != nil && e.Type != event.TypeCold {
			set.put(e, now)
		}
	}
	// A node with no section in a snapshot document that exists neither
	// confirms nor denies its keys: typically the channel Redis restarted
	// empty and other daemons rewrote their sections before this node's
	// daemon (its reconnect backoff). Its entries are carried over (they
	// lapse by their own ttl, which restarts for those served through a
	// channel outage), and the snapshot is read again every second until
	// the section is back or they lapse, so a channel restart does not
	// send the node's hot keys back to their shards. A document missing
	// past ConfirmTimeout (above) is believed: nothing is carried.
	carried := !missing && set.carry(s.set, sec, now, wasDown)
	for _, e := range s.logbuf {
		if q, ok := sec[e.Node]; ok && e.Seq > q {
			set.apply(e, now)
		}
	}
	for n, q := range sec {
		if l, ok := s.last[n]; !ok || q > l {
			s.last[n] = q
		}
		if f := s.logFloor[n]; f > q {
			// Messages between the section and the log are gone: wait for
			// a newer section.
			if _, ok := s.pending[n]; !ok {
				s.pendingSince[n] = time.Now()
			}
			s.pending[n] = max(s.pending[n], f)
		}
	}
	for n, want := range s.pending {
		q, ok := sec[n]
		switch {
		case !ok || q >= want:
			delete(s.pending, n)
			delete(s.pendingSince, n)
		case time.Since(s.pendingSince[n]) >= s.opt.ConfirmTimeout:
			s.unconfirmed(n, q)
		}
	}
	s.mu.Lock()
	s.set = set
	s.lastExpire = now
	s.mu.Unlock()
	if len(s.pending) == 0 {
		s.retries = 0
	} else if s.retries++; s.retries > s.opt.MaxRetries {
		s.log.Warn("snapshot never caught up with the channel; carrying on", "nodes", len(s.pending))
		for n := range s.pending {
			s.unconfirmed(n, sec[n])
		}
		clear(s.logFloor)
		s.retries = 0
	} else {
		// The publisher writes its snapshot at most every second or so.
		s.retryAt = time.Now().Add(s.opt.RetryDelay)
	}
	if carried && s.retryAt.IsZero() {
		// A daemon rewrites its section within a second of reaching the
		// channel Redis again (after its own reconnect backoff).
		s.retryAt = time.Now().Add(max(s.opt.RetryDelay, time.Second))
	}
	s.opt.Handler.Snapshot(snap)
	if s.subscribed {
		s.setUp(true)
	}
	s.syncedOnce.Do(func() { close(s.synced) })
}

// unconfirmed undoes a seq jump the snapshot never reached: the node's seq
// goes back to its section's (possibly lower), so its real messages apply
// again and a forged jump silences it for ConfirmTimeout at most.
func (s *Subscriber) unconfirmed(node string, sectionSeq uint64) {
	s.bad[BadUnconfirmedSeq].Add(1)
	s.log.Warn("seq jump not confirmed by the snapshot; following the node's section", "node", node,
		"jump", s.pending[node]+1, "section", sectionSeq)
	s.last[node] = sectionSeq
	delete(s.pending, node)
	delete(s.pendingSince, node)
	delete(s.logFloor, node)
	// Logged messages above the section would compare wrongly now.
	kept := s.logbuf[:0]
	for _, e := range s.logbuf {
		if e.Node != node || e.Seq <= sectionSeq {
			kept = append(kept, e)
		}
	}
	clear(s.logbuf[len(kept):])
	s.logbuf = kept
}

// errBadSnapshot marks a snapshot that was read but is not applied.
var errBadSnapshot = errors.New("bad snapshot")

// errNoSnapshot: there is no snapshot document (the empty snapshot comes
// with it).
var errNoSnapshot = errors.New("no snapshot document")

func (s *Subscriber) readSnapshot(ctx context.Context) (*event.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	key := SnapshotKey(s.opt.Channel)
	// Size before reading it at all: the document is untrusted.
	n, err := s.rdb.StrLen(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("read snapshot %s: %w", key, err)
	}
	if n > int64(event.MaxSnapshotBytes+envelope.Overhead) {
		s.bad[BadTooLarge].Add(1)
		return nil, fmt.Errorf("%w %s: %d bytes: %w", errBadSnapshot, key, n, event.ErrTooLarge)
	}
	b, err := s.rdb.Get(ctx, key).Bytes()
	if err == redis.Nil {
		return &event.Snapshot{V: event.Version}, errNoSnapshot
	}
	if err != nil {
		return nil, fmt.Errorf("read snapshot %s: %w", key, err)
	}
	body, err := s.open(b, event.MaxSnapshotBytes)
	if err != nil {
		s.badMessage(err)
		return nil, fmt.Errorf("%w %s: %w", errBadSnapshot, key, err)
	}
	snap, bad, err := event.DecodeSnapshot(body)
	if err != nil {
		s.badMessage(err)
		return nil, fmt.Errorf("%w %s: %w", errBadSnapshot, key, err)
	}
	if bad > 0 {
		s.bad[BadOutOfRange].Add(uint64(bad))
		s.log.Debug("snapshot entries skipped", "count", bad)
	}
	return snap, nil
}
