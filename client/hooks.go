package client

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// ReadThen sends cmd then extra on one connection of the server holding key,
// past the shim's own serving, with next sending through rdb (a client
// without the shim, as the hook's next is): the pipeline an absorbed-demand
// report rides on. For tests of that guarantee.
func (s *Shim) ReadThen(ctx context.Context, rdb redis.UniversalClient, key string, cmd, extra redis.Cmder) error {
	return s.readThen(ctx, key, cmd, extra, func(ctx context.Context, c redis.Cmder) error { return rdb.Process(ctx, c) })
}

// Servers lists the addresses whose events apply to this client now.
func (s *Shim) Servers() []string {
	var out []string
	for a := range *s.servers.Load() {
		out = append(out, a)
	}
	return out
}
