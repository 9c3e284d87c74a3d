package client

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// ReadThen exposes readThen to the external tests, with next sending
// through rdb (a client without the shim, as the hook's next is).
func (s *Shim) ReadThen(ctx context.Context, rdb redis.UniversalClient, key string, cmd, extra redis.Cmder) error {
	return s.readThen(ctx, key, cmd, extra, func(ctx context.Context, c redis.Cmder) error { return rdb.Process(ctx, c) })
}

// Servers lists the addresses whose events apply now.
func (s *Shim) Servers() []string {
	var out []string
	for a := range *s.servers.Load() {
		out = append(out, a)
	}
	return out
}
