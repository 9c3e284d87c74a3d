package publish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hotsniff/hotsniff/event"
	"github.com/redis/go-redis/v9"
)

// ManualOptions say where an operator's event goes.
type ManualOptions struct {
	Channel string // DefaultChannel if empty
	// Node is the "node" of the message; "manual@<hostname>" if empty, so
	// it never shares a seq space with a daemon on the same host.
	Node    string
	Sharded *bool // nil: sharded on a cluster client
	Now     func() time.Time
	// Secret signs the message and the snapshot (Options.Secret).
	Secret []byte
}

// ManualNode is the default node name of operator events from this host.
func ManualNode() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "unknown"
	}
	return "manual@" + h
}

// ManualResult tells what Manual did.
type ManualResult struct {
	Event *event.Event
	// Receivers is the number of subscribers that got the message (for
	// sharded pub/sub: on the shard owning the channel).
	Receivers int64
}

// Manual publishes one operator-declared event (hot or cold, source manual)
// and updates the snapshot first, synchronously: a hot event adds the key
// for its ttl (0: until removed), a cold event removes it. Manual entries
// are stored in the snapshot apart from any node's section, so any host
// can remove what another added.
func Manual(ctx context.Context, rdb redis.UniversalClient, opt ManualOptions, e *event.Event) (*ManualResult, error) {
	if e.Type != event.TypeHot && e.Type != event.TypeCold {
		return nil, fmt.Errorf("publish manual event: type must be hot or cold, not %q", e.Type)
	}
	if len(e.Key) == 0 {
		return nil, errors.New("publish manual event: empty key")
	}
	if opt.Channel == "" {
		opt.Channel = DefaultChannel
	}
	if opt.Node == "" {
		opt.Node = ManualNode()
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	sharded := IsCluster(rdb)
	if opt.Sharded != nil {
		sharded = *opt.Sharded
	}
	now := opt.Now()
	c := *e
	c.Key = bytes.Clone(e.Key)
	c.V = event.Version
	c.Source = event.SourceManual
	c.Node = opt.Node
	// One-shot publishers take their seq from the clock, so two runs from
	// one host still count upwards.
	c.Seq = uint64(now.UnixMicro())
	if c.TS.IsZero() {
		c.TS = now
	}
	if c.Type == event.TypeCold {
		c.TTLms = 0
	}
	c.QPS = 0
	s := &section{
		field: "m:" + entryID(&c),
		del:   c.Type == event.TypeCold,
		ttl:   time.Duration(c.TTLms) * time.Millisecond,
		keys:  []*event.Event{&c},
		seq:   c.Seq, ts: now, node: c.Node,
	}
	if err := writeSection(ctx, rdb, opt.Channel, s, opt.Secret); err != nil {
		return nil, err
	}
	b, err := c.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encode event: %w", err)
	}
	if len(b) > room(opt.Secret) {
		return nil, fmt.Errorf("publish manual event: %w (%d bytes, at most %d)", errOversize, len(b), room(opt.Secret))
	}
	b = seal(opt.Secret, b)
	var cmd *redis.IntCmd
	if sharded {
		cmd = rdb.SPublish(ctx, opt.Channel, b)
	} else {
		cmd = rdb.Publish(ctx, opt.Channel, b)
	}
	if err := cmd.Err(); err != nil {
		return nil, fmt.Errorf("publish on %s: %w", opt.Channel, err)
	}
	return &ManualResult{Event: &c, Receivers: cmd.Val()}, nil
}
