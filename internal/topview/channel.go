package topview

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/client"
	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/termtext"
)

// ChannelSource is the fleet view: it follows the hot-key channel as a
// shim does (snapshot first, then every message, repaired on gaps), so it
// sees the hot keys of every node publishing there, and samples that hot
// set every interval.
type ChannelSource struct {
	rdb      redis.UniversalClient
	channel  string
	sub      *client.Subscriber
	label    string
	interval time.Duration
	last     time.Time
	cancel   context.CancelFunc
	done     chan error
}

// NewChannelSource starts following channel on rdb; label names it in the
// header. Close stops it.
func NewChannelSource(rdb redis.UniversalClient, channel, label string, interval time.Duration, log *slog.Logger) (*ChannelSource, error) {
	return NewSignedChannelSource(rdb, channel, label, interval, log, nil)
}

// NewSignedChannelSource is NewChannelSource accepting only messages and
// snapshots signed with secret (nil: any, envelopes unwrapped).
func NewSignedChannelSource(rdb redis.UniversalClient, channel, label string, interval time.Duration, log *slog.Logger, secret []byte) (*ChannelSource, error) {
	if interval <= 0 {
		return nil, fmt.Errorf("interval %v: must be positive", interval)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sub := client.New(rdb, client.Options{Channel: channel, Logger: log, ChannelSecret: secret})
	ctx, cancel := context.WithCancel(context.Background())
	c := &ChannelSource{rdb: rdb, channel: channel, sub: sub, label: label, interval: interval, cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- sub.Run(ctx) }()
	return c, nil
}

// Close stops following the channel.
func (c *ChannelSource) Close() error {
	c.cancel()
	return <-c.done
}

// Next waits for the first snapshot, then for each interval, and returns
// the hot set of every node.
func (c *ChannelSource) Next(ctx context.Context) (Snapshot, error) {
	if c.last.IsZero() {
		select {
		case <-c.sub.Synced():
		case <-ctx.Done():
			return Snapshot{}, ctx.Err()
		case <-time.After(max(c.interval, 5*time.Second)):
			st := c.sub.Stats()
			return Snapshot{}, fmt.Errorf("channel %s: snapshot not read yet (%d errors; retrying)", c.label, st.ReloadErrors)
		}
	} else if err := sleepUntil(ctx, c.last.Add(c.interval)); err != nil {
		return Snapshot{}, err
	}
	c.last = time.Now()
	s := c.Fetch()
	c.overlayRates(ctx, &s)
	return s, nil
}

// maxSnapshot bounds the snapshot document read for rates.
const maxSnapshot = 64 << 20

// overlayRates takes each key's rates from the snapshot: daemons keep the
// rates there current (every second or so, when they move) without
// publishing, while the channel carries them only with hot messages.
// Membership and verdicts stay the channel's. A snapshot that cannot be
// read leaves the channel's rates.
func (c *ChannelSource) overlayRates(ctx context.Context, s *Snapshot) {
	n, err := c.rdb.StrLen(ctx, client.SnapshotKey(c.channel)).Result()
	if err != nil || n == 0 || n > maxSnapshot {
		return
	}
	b, err := c.rdb.Get(ctx, client.SnapshotKey(c.channel)).Bytes()
	if err != nil {
		return
	}
	var snap event.Snapshot
	if json.Unmarshal(b, &snap) != nil {
		return
	}
	fresh := make(map[string]*event.Event, len(snap.Keys))
	for _, e := range snap.Keys {
		if e != nil {
			fresh[rowID(e)] = e
		}
	}
	for i := range s.Keys {
		k := &s.Keys[i]
		if f, ok := fresh[rowID(k)]; ok && f.Prefix == k.Prefix {
			k.QPS, k.WriteQPS, k.AbsorbedQPS = f.QPS, f.WriteQPS, f.AbsorbedQPS
			k.BytesPS, k.Sample, k.QPSLowerBound, k.Capped = f.BytesPS, f.Sample, f.QPSLowerBound, f.Capped
		}
	}
}

// Synced is closed once the snapshot was read.
func (c *ChannelSource) Synced() <-chan struct{} { return c.sub.Synced() }

// Fetch returns the hot set as the channel left it: rates are those of
// each key's last hot event, or of the snapshot it was loaded from (Next
// adds the snapshot's current rates).
func (c *ChannelSource) Fetch() Snapshot {
	hs := c.sub.HotSet()
	keys := make([]event.Event, len(hs))
	nodes := map[string]bool{}
	for i, e := range hs {
		keys[i] = *e
		keys[i].Type = event.TypeHot
		nodes[e.Node] = true
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Node < keys[j].Node })
	return Snapshot{Source: c.label + " · " + termtext.Count(len(nodes), "node", "nodes"), TS: time.Now(), Keys: keys}
}
