package client

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// bigHashMemory is how long a "too many fields" verdict is remembered for
// a key, across its entry being dropped and re-admitted: a big hash rarely
// shrinks, and asking again costs only an HLEN.
const bigHashMemory = time.Minute

// hashFor returns the cached hash for key, fetching it when this caller
// holds the refresh token. Nil: pass the caller's command on.
//
// Cacheability is decided without fetching the hash: the first fetch of an
// entry sends HLEN (O(1)) and only sends HGETALL when the hash has at most
// MaxHashFields fields. A larger hash is remembered (on the entry, and for
// bigHashMemory by key), so neither this nor a later admission ever
// transfers it. Refreshes of a small hash send HGETALL alone and re-check
// its size, so a hash that grew is dropped at its next refresh.
func (s *Shim) hashFor(ctx context.Context, key string, next redis.ProcessHook) *value {
	act, v, t := s.acquireWait(key, kindHash, nanotime())
	switch act {
	case actHit:
		return v
	case actPass:
		return nil
	}
	if !t.e.sized.Load() {
		lc := redis.NewIntCmd(ctx, "hlen", key)
		if err := next(ctx, lc); err != nil {
			// WRONGTYPE and the like: the caller's own command gets the
			// server's answer.
			s.m.fetchErrors.Add(1)
			s.release(t)
			return nil
		}
		if lc.Val() > int64(s.opt.MaxHashFields) {
			s.tooBig(t)
			return nil
		}
		t.e.sized.Store(true)
	}
	hc := redis.NewMapStringStringCmd(ctx, "hgetall", key)
	if err := s.fetch(ctx, t.e, hc, next); err != nil {
		s.m.fetchErrors.Add(1)
		s.release(t)
		return nil
	}
	m := hc.Val()
	if len(m) > s.opt.MaxHashFields {
		s.tooBig(t)
		return nil
	}
	// An empty reply proves the key is missing (a key of another type
	// answers WRONGTYPE).
	v = &value{exists: len(m) > 0, hash: m}
	s.store(t, v)
	return v
}

// tooBig marks a fetch's key as a hash too big to cache.
func (s *Shim) tooBig(t ticket) {
	t.e.uncacheable.Store(true)
	s.release(t)
	s.m.uncacheable.Add(1)
	s.mu.Lock()
	if len(s.big) >= max(s.opt.MaxEntries, 1024) {
		clear(s.big)
	}
	s.big[t.e.key] = nanotime() + int64(bigHashMemory)
	s.mu.Unlock()
}
