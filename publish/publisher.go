// Package publish sends hot-key events to a Redis pub/sub channel and keeps
// the channel's snapshot key current (docs/events.md, docs/channel-protocol.md),
// or writes them to a stream as JSONL or a text table.
package publish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotsniff/hotsniff/event"
	"github.com/redis/go-redis/v9"
)

// DefaultChannel is the contract's default channel name.
const DefaultChannel = "hotsniff:hotkeys"

// Emitter takes hot-key events. Implementations never block for long.
type Emitter interface {
	Emit(e *event.Event)
}

// Options tune a Publisher. Zero values take the defaults.
type Options struct {
	// Channel is the pub/sub channel; DefaultChannel if empty.
	Channel string
	// Node names this publisher in "node"; the hostname if empty. It must be
	// unique among the publishers of a channel.
	Node string
	// Sharded uses SPUBLISH instead of PUBLISH. Nil means: sharded when the
	// client is a cluster client.
	Sharded *bool
	// QueueSize bounds the events waiting to be published (default 10000);
	// Emit drops and counts events beyond it.
	QueueSize int
	// BatchWindow is how long the first event of a batch waits for more
	// (default 2ms); MaxBatch caps a batch (default 500).
	BatchWindow time.Duration
	MaxBatch    int
	// Format is FormatV1 (one event per message, the default) or FormatV2
	// (a batch of events per message).
	Format string
	// Budget caps this node's channel messages per second (0: no cap).
	// When it is spent, refreshes are shed (counted in Stats.Shed) and
	// every other event waits, batched, for the next message allowed
	// (counted in Stats.Delayed).
	Budget float64
	// SnapshotInterval is the least time between two snapshot writes when
	// the set keeps changing (default 1s).
	SnapshotInterval time.Duration
	// SnapshotTTL is how long this publisher's section outlives its last
	// write (default 60s); the section is rewritten every SnapshotTTL/3
	// even without changes, so only a dead publisher's section ages out.
	SnapshotTTL time.Duration
	// BackoffMin and BackoffMax bound the retry delay while Redis fails
	// (defaults 100ms and 2s). The maximum is short on purpose: a channel
	// Redis that restarted empty has no snapshot until each publisher
	// rewrites its section, and subscribers believe a missing document
	// after 5 s; a retry every 2 s at worst costs nothing.
	BackoffMin, BackoffMax time.Duration
	// StartSeq is the seq before the first message. Zero means the start
	// time in Unix microseconds, so seq keeps growing across restarts and a
	// restart shows to subscribers as a forward jump.
	StartSeq uint64
	// Secret, when set, signs every message and the snapshot document
	// (--channel-secret-file; docs/channel-protocol.md, "Trust model").
	Secret []byte
	// Adopt, when set, makes the publisher take over the hot set its
	// predecessor published for the same node: before its first section
	// write it reads the node's section back, keeps its entries in the
	// section and passes them to Adopt (which must not block), so a restart
	// never writes an empty section over them. Until the read succeeds
	// nothing is written or published (events queue, bounded).
	Adopt  func(prev []*event.Event)
	Logger *slog.Logger
	// Now is the clock (tests).
	Now func() time.Time
}

func (o *Options) defaults(rdb redis.UniversalClient) error {
	if o.Channel == "" {
		o.Channel = DefaultChannel
	}
	if o.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("get hostname for node name: %w", err)
		}
		o.Node = h
	}
	if o.Sharded == nil {
		s := IsCluster(rdb)
		o.Sharded = &s
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 10000
	}
	if o.BatchWindow <= 0 {
		o.BatchWindow = 2 * time.Millisecond
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 500
	}
	if o.SnapshotInterval <= 0 {
		o.SnapshotInterval = time.Second
	}
	if o.SnapshotTTL <= 0 {
		o.SnapshotTTL = time.Minute
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = 100 * time.Millisecond
	}
	if o.BackoffMax < o.BackoffMin {
		o.BackoffMax = max(2*time.Second, o.BackoffMin)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.StartSeq == 0 {
		o.StartSeq = uint64(o.Now().UnixMicro())
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	f, err := ParseFormat(o.Format)
	if err != nil {
		return err
	}
	o.Format = f
	if o.Budget < 0 {
		return fmt.Errorf("message budget %v: must not be negative", o.Budget)
	}
	if o.Format == FormatV2 {
		o.MaxBatch = min(o.MaxBatch, event.MaxBatchEvents)
	}
	o.Logger = o.Logger.With("component", "publish")
	return nil
}

// Stats are the publisher's counters, for metrics.
type Stats struct {
	Published      map[string]uint64 // by event type
	Errors         uint64            // failed publish or snapshot round trips
	Dropped        uint64            // events refused because the queue was full (or after Close)
	QueueLen       int
	QueueCap       int
	Batches        uint64
	SnapshotWrites uint64
	Reconnects     uint64 // recoveries after a failure
	HotKeys        int
	Seq            uint64
	Connected      bool
	// Messages counts channel messages sent (with FormatV2 one carries a
	// batch of events).
	Messages uint64
	// Shed counts refreshes left out because the message budget was spent;
	// Delayed counts events that waited for it.
	Shed, Delayed uint64
	// Oversize counts events too long for any channel message: dropped.
	Oversize uint64
	// LastLag is the time from Emit to Redis's acknowledgement for the
	// oldest event of the last batch published.
	LastLag time.Duration
	// Adopted says the previous daemon's section has been read (Options.Adopt);
	// AdoptedKeys is how many hot keys it held.
	Adopted     bool
	AdoptedKeys int
	// Superseded says a newer daemon for this node took over its snapshot
	// section: this publisher has stopped publishing.
	Superseded bool
}

type queued struct {
	ev *event.Event
	at time.Time
}

// Publisher publishes events on the channel from one background goroutine.
type Publisher struct {
	rdb   redis.UniversalClient
	opt   Options
	log   *slog.Logger
	queue chan queued

	mu       sync.Mutex // guards seq, set, dirty, closed and the queue order
	seq      uint64
	set      *hotSet
	dirty    bool
	closed   bool
	stop     chan context.Context
	done     chan struct{}
	ctx      context.Context // cancelled when Close gives up
	cancel   context.CancelFunc
	pub      [3]atomic.Uint64 // hot, cold, invalidate
	errs     atomic.Uint64
	drops    atomic.Uint64
	batches  atomic.Uint64
	snaps    atomic.Uint64
	recon    atomic.Uint64
	lag      atomic.Int64
	up       atomic.Bool
	bud      budget        // guarded by mu
	kick     chan struct{} // UpdateRates changed the set: a snapshot is due
	msgs     atomic.Uint64
	shed     atomic.Uint64
	delayed  atomic.Uint64
	oversize atomic.Uint64

	closeErr   error // set by drain before done closes
	adopted    atomic.Bool
	adoptKeys  atomic.Int64
	superseded atomic.Bool
}

// New starts a publisher. It does not need Redis to be up.
func New(rdb redis.UniversalClient, opt Options) (*Publisher, error) {
	if rdb == nil {
		return nil, errors.New("start publisher: no redis client")
	}
	if err := opt.defaults(rdb); err != nil {
		return nil, fmt.Errorf("start publisher: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{
		rdb: rdb, opt: opt, log: opt.Logger,
		queue: make(chan queued, opt.QueueSize),
		seq:   opt.StartSeq, set: newHotSet(),
		stop: make(chan context.Context, 1), done: make(chan struct{}),
		ctx: ctx, cancel: cancel,
		dirty: true, // announce this node's (empty) section at once
		bud:   newBudget(opt.Budget, opt.Now()),
		kick:  make(chan struct{}, 1),
	}
	p.up.Store(true)
	p.adopted.Store(opt.Adopt == nil)
	go p.run()
	return p, nil
}

// Node is the publisher's node name.
func (p *Publisher) Node() string { return p.opt.Node }

// Channel is the channel published on.
func (p *Publisher) Channel() string { return p.opt.Channel }

// Emit stamps e with this publisher's v, seq and node (so a caller that also
// prints e prints what subscribers receive), updates the hot set and queues
// a copy. It never blocks on Redis: when the queue is full the message is
// dropped and counted, which subscribers see as a seq gap and repair from
// the snapshot, which does include the dropped event's effect.
func (p *Publisher) Emit(e *event.Event) {
	if e == nil {
		return
	}
	now := p.opt.Now()
	c := *e
	c.Key = bytes.Clone(e.Key) // the caller's key may alias a packet buffer
	c.V = event.Version
	c.Node = p.opt.Node
	if c.Source == "" {
		c.Source = event.SourceDetected
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.drops.Add(1)
		return
	}
	if p.bud.exhausted(now) && p.set.shed(&c, now) {
		// Before seq is taken: a shed refresh is no gap to subscribers.
		p.shed.Add(1)
		return
	}
	p.seq++
	c.Seq = p.seq
	e.V, e.Seq, e.Node, e.Source = c.V, c.Seq, c.Node, c.Source
	if p.set.apply(&c, now) {
		p.dirty = true
	}
	// Sending under the lock keeps the queue in seq order.
	select {
	case p.queue <- queued{ev: &c, at: now}:
	default:
		p.drops.Add(1)
	}
}

// Stats returns the counters.
func (p *Publisher) Stats() Stats {
	p.mu.Lock()
	n, seq := len(p.set.m), p.seq
	p.mu.Unlock()
	return Stats{
		Published: map[string]uint64{
			event.TypeHot: p.pub[0].Load(), event.TypeCold: p.pub[1].Load(), event.TypeInvalidate: p.pub[2].Load(),
		},
		Errors: p.errs.Load(), Dropped: p.drops.Load(),
		QueueLen: len(p.queue), QueueCap: cap(p.queue),
		Batches: p.batches.Load(), SnapshotWrites: p.snaps.Load(), Reconnects: p.recon.Load(),
		HotKeys: n, Seq: seq, Connected: p.up.Load(),
		LastLag:  time.Duration(p.lag.Load()),
		Messages: p.msgs.Load(), Shed: p.shed.Load(), Delayed: p.delayed.Load(),
		Oversize: p.oversize.Load(),
		Adopted:  p.adopted.Load(), AdoptedKeys: int(p.adoptKeys.Load()), Superseded: p.superseded.Load(),
	}
}

// HotSet returns the current hot set (shared events: do not modify).
func (p *Publisher) HotSet() []*event.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.set.expire(p.opt.Now())
	return p.set.events()
}

// Close stops taking events and publishes what is queued, plus a last
// snapshot, until ctx ends; then it abandons the rest. It does not close
// the Redis client.
func (p *Publisher) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.done
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.stop <- ctx
	select {
	case <-p.done:
		return p.closeErr
	case <-ctx.Done():
		p.cancel()
		<-p.done
		return fmt.Errorf("flush publisher: %w", ctx.Err())
	}
}

// run is the only goroutine talking to Redis.
func (p *Publisher) run() {
	defer close(p.done)
	defer p.cancel()
	var (
		batch     []queued
		lastSnap  time.Time
		backoff   = p.opt.BackoffMin
		failing   bool
		heartbeat = time.NewTicker(p.opt.SnapshotTTL / 3)
		snapTimer = time.NewTimer(0) // fires when a rate-limited snapshot is due
		window    = time.NewTimer(time.Hour)
	)
	defer heartbeat.Stop()
	defer snapTimer.Stop()
	defer window.Stop()

	for {
		if len(batch) == 0 {
			select {
			case q := <-p.queue:
				batch = append(batch, q)
			case <-heartbeat.C:
				p.markDirty()
				lastSnap = time.Time{}
			case <-snapTimer.C:
			case <-p.kick:
			case ctx := <-p.stop:
				p.drain(ctx, batch)
				return
			}
			// Gather what arrives within the window into the same pipeline.
			window.Reset(p.opt.BatchWindow)
		gather:
			for len(batch) > 0 && len(batch) < p.opt.MaxBatch {
				select {
				case q := <-p.queue:
					batch = append(batch, q)
				case <-window.C:
					break gather
				}
			}
			if !window.Stop() {
				select {
				case <-window.C:
				default:
				}
			}
		}

		send := batch
		if !failing && len(batch) > 0 {
			ok, waited := p.waitBudget(&batch)
			if !ok {
				return
			}
			// One event per message (v1): send what the budget allows
			// now, the rest next round, so the rate stays smooth.
			send = batch[:p.budgetAllows(len(batch))]
			if waited {
				p.delayed.Add(uint64(len(send)))
			}
		}
		snapDue := p.isDirty() && (failing || time.Since(lastSnap) >= p.opt.SnapshotInterval)
		err := p.flush(p.ctx, send, snapDue)
		if err != nil {
			p.errs.Add(1)
			if !failing {
				p.log.Warn("redis unavailable; events queue until it is back", "err", err, "queued", len(p.queue)+len(batch))
			}
			failing = true
			p.up.Store(false)
			// Jitter spreads a DaemonSet's reconnects after a Redis restart.
			d := backoff/2 + rand.N(backoff/2+1)
			backoff = min(2*backoff, p.opt.BackoffMax)
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case ctx := <-p.stop:
				t.Stop()
				p.drain(ctx, batch)
				return
			}
			continue
		}
		if failing {
			p.log.Info("redis reachable again; publishing resumed")
			p.recon.Add(1)
			failing = false
			p.up.Store(true)
			backoff = p.opt.BackoffMin
			// The server may have restarted empty: rewrite our section now.
			p.markDirty()
			if ferr := p.flush(p.ctx, nil, true); ferr == nil {
				lastSnap = time.Now()
			}
		}
		if snapDue {
			lastSnap = time.Now()
		}
		batch = batch[:copy(batch, batch[len(send):])]
		if p.isDirty() {
			// Changes not yet in the snapshot: come back when allowed.
			snapTimer.Reset(max(time.Until(lastSnap.Add(p.opt.SnapshotInterval)), 0))
		}
	}
}

func (p *Publisher) markDirty() {
	p.mu.Lock()
	p.dirty = true
	p.mu.Unlock()
}

func (p *Publisher) isDirty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dirty || len(p.set.m) > 0 && p.hasExpired()
}

// hasExpired is called with mu held.
func (p *Publisher) hasExpired() bool {
	now := p.opt.Now()
	for _, en := range p.set.m {
		if !en.expires.IsZero() && !now.Before(en.expires) {
			return true
		}
	}
	return false
}

// flush writes the snapshot first when due, so that a subscriber that sees
// one of these messages and reloads finds a snapshot at least that recent,
// then publishes the batch in one pipeline.
func (p *Publisher) flush(ctx context.Context, batch []queued, snap bool) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if !p.adopted.Load() {
		if err := p.adopt(ctx); err != nil {
			return err
		}
		snap = true
	}
	if p.superseded.Load() {
		return nil // the newer daemon publishes for this node
	}
	p.budgetTake(len(batch))
	if snap {
		if err := p.writeSnapshot(ctx); err != nil {
			p.budgetRefund(len(batch))
			return err
		}
		if p.superseded.Load() {
			p.budgetRefund(len(batch))
			return nil
		}
	}
	if len(batch) == 0 {
		return nil
	}
	evs := make([]*event.Event, len(batch))
	for i, q := range batch {
		evs[i] = q.ev
	}
	sent := make([]bool, len(batch))
	msgs, err := encodeMessages(evs, p.opt.Format, p.opt.Node, p.opt.MaxBatch, p.opt.Secret, sent)
	if err != nil {
		p.budgetRefund(len(batch))
		return err
	}
	for i, ok := range sent {
		if !ok {
			if p.oversize.Add(1) == 1 {
				p.log.Warn("event too long for a channel message: dropped (subscribers see a seq gap and reload the snapshot)",
					"key_bytes", len(evs[i].Key), "limit", event.MaxMessageBytes)
			}
		}
	}
	if len(msgs) > 0 {
		cmds, err := p.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, b := range msgs {
				if *p.opt.Sharded {
					pipe.SPublish(ctx, p.opt.Channel, b)
				} else {
					pipe.Publish(ctx, p.opt.Channel, b)
				}
			}
			return nil
		})
		if err != nil {
			p.budgetRefund(len(batch))
			for _, c := range cmds {
				if c.Err() != nil {
					return fmt.Errorf("publish on %s: %w", p.opt.Channel, c.Err())
				}
			}
			return fmt.Errorf("publish on %s: %w", p.opt.Channel, err)
		}
	}
	for i, q := range batch {
		if !sent[i] {
			continue
		}
		switch q.ev.Type {
		case event.TypeHot:
			p.pub[0].Add(1)
		case event.TypeCold:
			p.pub[1].Add(1)
		case event.TypeInvalidate:
			p.pub[2].Add(1)
		}
	}
	p.batches.Add(1)
	p.msgs.Add(uint64(len(msgs)))
	p.lag.Store(int64(time.Since(batch[0].at)))
	return nil
}

// writeSnapshot writes this node's section: the whole hot set and the seq it
// reflects. The copy is taken under the lock so set and seq agree.
func (p *Publisher) writeSnapshot(ctx context.Context) error {
	now := p.opt.Now()
	p.mu.Lock()
	p.set.expire(now)
	keys := p.set.events()
	seq := p.seq
	p.dirty = false
	p.mu.Unlock()
	s := &section{
		field: "n:" + p.opt.Node,
		ttl:   p.opt.SnapshotTTL,
		meta:  &event.SnapshotNode{Node: p.opt.Node, Seq: seq, TS: now.UTC().Format(event.TSFormat), Keys: len(keys)},
		keys:  keys, seq: seq, ts: now, node: p.opt.Node, guard: true,
	}
	if err := writeSection(ctx, p.rdb, p.opt.Channel, s, p.opt.Secret); err != nil {
		if errors.Is(err, errSuperseded) {
			if !p.superseded.Swap(true) {
				p.log.Info("a newer daemon for this node took over its snapshot section; this one stops publishing", "node", p.opt.Node, "seq", seq)
			}
			return nil
		}
		p.markDirty()
		return err
	}
	p.snaps.Add(1)
	return nil
}

// adopt reads the previous daemon's section for this node, keeps its keys in
// the hot set (those not already there) and hands them to Options.Adopt.
func (p *Publisher) adopt(ctx context.Context) error {
	sec, ok, bad, err := ReadSection(ctx, p.rdb, p.opt.Channel, p.opt.Node)
	if err != nil {
		return err
	}
	now := p.opt.Now()
	p.mu.Lock()
	var took []*event.Event
	for _, e := range sec.Keys {
		if _, there := p.set.m[entryID(e)]; there {
			continue
		}
		e.Node = p.opt.Node
		p.set.apply(e, now)
		took = append(took, e)
	}
	if ok && sec.Seq >= p.seq {
		// The clock went back since the previous daemon started: seq
		// must still grow, or subscribers would take our messages for
		// old ones and the section guard would refuse our writes.
		p.log.Warn("previous daemon's seq is ahead of the clock; continuing from it", "prev_seq", sec.Seq, "seq", p.seq)
		p.seq = sec.Seq + 1
	}
	p.dirty = true
	p.mu.Unlock()
	if bad > 0 {
		p.log.Warn("previous snapshot section had undecodable entries; skipped", "node", p.opt.Node, "skipped", bad)
	}
	p.adoptKeys.Store(int64(len(took)))
	if len(took) > 0 {
		p.opt.Adopt(took)
	}
	p.adopted.Store(true)
	p.log.Info("adopted the previous hot set of this node", "node", p.opt.Node, "keys", len(took), "found", ok, "prev_seq", sec.Seq)
	return nil
}

// ErrChannelDown is returned by Close when the channel Redis was already
// unreachable: Close tries once and does not wait for it.
var ErrChannelDown = errors.New("channel Redis unreachable")

// drain publishes what is left after Close, until ctx ends. When Redis was
// already failing it tries once: waiting out ctx for a server that has been
// down would only delay the exit.
func (p *Publisher) drain(ctx context.Context, batch []queued) {
	wasDown := !p.up.Load()
	for {
		for len(batch) < p.opt.MaxBatch {
			select {
			case q := <-p.queue:
				batch = append(batch, q)
				continue
			default:
			}
			break
		}
		if ctx.Err() != nil {
			p.drops.Add(uint64(len(batch) + len(p.queue)))
			return
		}
		last := len(batch) == 0 || len(p.queue) == 0
		if err := p.flush(ctx, batch, last && p.isDirty()); err != nil {
			p.errs.Add(1)
			lost := len(batch) + len(p.queue)
			if wasDown {
				p.closeErr = fmt.Errorf("%w: %v", ErrChannelDown, err)
				p.drops.Add(uint64(lost))
				return
			}
			// Keep trying while the caller lets us: Redis may be
			// restarting just as we shut down.
			t := time.NewTimer(p.opt.BackoffMin)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
			}
			p.log.Warn("flush on close failed; events lost", "err", err, "lost", lost)
			p.drops.Add(uint64(lost))
			return
		}
		if last {
			return
		}
		batch = batch[:0]
	}
}
