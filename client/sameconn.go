package client

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// bypassKey marks a context whose pipeline the shim's own pipeline hook
// passes through untouched (never served from memory).
type bypassKey struct{}

// readThen sends the read cmd of key and then extra as one pipeline on one
// connection of the server holding key, past the shim's local serving: a
// message about the read (the absorbed-demand report) must follow it on
// the same connection. On a cluster the node is the one go-redis's slot
// map names now; if that node answers with a redirection (the slot moved
// or is moving), the read is sent again the ordinary way, without extra, so
// go-redis follows the redirection as for any read and the caller never
// sees it. It returns the read's error; extra's outcome is in extra.
func (s *Shim) readThen(ctx context.Context, key string, cmd, extra redis.Cmder, next redis.ProcessHook) error {
	var p redis.Pipeliner
	switch t := s.topo; t.kind {
	case topoClient:
		p = t.client.Pipeline()
	case topoCluster:
		n, err := t.cluster.MasterForKey(ctx, key)
		if err != nil {
			return next(ctx, cmd)
		}
		p = n.Pipeline()
	case topoRing:
		n, err := t.ring.GetShardClientForKey(key)
		if err != nil {
			return next(ctx, cmd)
		}
		p = n.Pipeline()
	}
	ctx = context.WithValue(ctx, bypassKey{}, true)
	_ = p.Process(ctx, cmd)
	_ = p.Process(ctx, extra)
	_, _ = p.Exec(ctx)
	if redirected(cmd.Err()) {
		return next(ctx, cmd)
	}
	return cmd.Err()
}

// redirected reports whether err is a cluster redirection or a retry the
// cluster client would have handled itself.
func redirected(err error) bool {
	var rerr redis.Error
	if err == nil || !errors.As(err, &rerr) {
		return false
	}
	m := err.Error()
	return strings.HasPrefix(m, "MOVED ") || strings.HasPrefix(m, "ASK ") ||
		strings.HasPrefix(m, "TRYAGAIN") || strings.HasPrefix(m, "CLUSTERDOWN")
}
