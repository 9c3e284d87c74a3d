package client

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

var _ redis.Hook = (*Shim)(nil)

// DialHook implements redis.Hook.
func (s *Shim) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook: GET, MGET, HGET, HMGET and HGETALL of
// hot keys are answered locally; writes drop the keys they name; the rest
// passes untouched. Only commands built by go-redis's typed methods are
// served (rdb.Get, not rdb.Do("GET")): their reply types are known.
func (s *Shim) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !s.active.Load() {
			return next(ctx, cmd)
		}
		switch c := cmd.(type) {
		case *redis.StringCmd:
			args := c.Args()
			if len(args) == 2 && isName(args[0], "get") {
				return s.get(ctx, c, args, next)
			}
			if len(args) == 3 && isName(args[0], "hget") {
				return s.hget(ctx, c, args, next)
			}
		case *redis.SliceCmd:
			args := c.Args()
			if len(args) >= 2 && isName(args[0], "mget") {
				return s.mget(ctx, c, args, next)
			}
			if len(args) >= 3 && isName(args[0], "hmget") {
				return s.hmget(ctx, c, args, next)
			}
		case *redis.MapStringStringCmd:
			args := c.Args()
			if len(args) == 2 && isName(args[0], "hgetall") {
				return s.hgetall(ctx, c, args, next)
			}
		}
		return s.write(ctx, cmd, next)
	}
}

// ProcessPipelineHook implements redis.Hook. Pipelines (and MULTI/EXEC)
// are sent as they are, reads included: answering part of a transaction
// locally would break its atomicity. Their writes drop the keys they name.
func (s *Shim) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !s.active.Load() {
			return next(ctx, cmds)
		}
		var buf [8]string
		keys, all := buf[:0], false
		for _, c := range cmds {
			var a bool
			keys, a = writtenKeys(c.Args(), keys)
			all = all || a
		}
		if len(keys) == 0 && !all {
			return next(ctx, cmds)
		}
		s.invalidateWritten(keys, all)
		err := next(ctx, cmds)
		s.invalidateWritten(keys, all)
		return err
	}
}

func isName(a any, name string) bool {
	s, ok := a.(string)
	return ok && (s == name || strings.EqualFold(s, name))
}

// write passes a command on, dropping the keys it writes both before it is
// sent and after its reply: a refresh sent in between by another goroutine
// may have read the old value, and the second drop (which moves the entry's
// gen) keeps it from being stored. So a read after a write on this client
// never sees the old value.
func (s *Shim) write(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
	var buf [4]string
	keys, all := writtenKeys(cmd.Args(), buf[:0])
	if len(keys) == 0 && !all {
		return next(ctx, cmd)
	}
	s.invalidateWritten(keys, all)
	err := next(ctx, cmd)
	s.invalidateWritten(keys, all)
	return err
}

func (s *Shim) invalidateWritten(keys []string, all bool) {
	if all {
		s.invalidateAll(invalFlush)
		return
	}
	for _, k := range keys {
		s.invalidate(k, invalWrite)
	}
}

func (s *Shim) get(ctx context.Context, c *redis.StringCmd, args []any, next redis.ProcessHook) error {
	key, ok := args[1].(string)
	if !ok {
		return next(ctx, c)
	}
	act, v, t := s.acquire(key, kindString, nanotime())
	switch act {
	case actHit:
		if !v.exists {
			return redis.Nil
		}
		c.SetVal(v.str)
		return nil
	case actPass:
		return next(ctx, c)
	}
	err := s.fetch(ctx, t.e, c, next)
	switch {
	case err == nil:
		s.store(t, &value{exists: true, str: c.Val()})
	case errors.Is(err, redis.Nil):
		// Missing keys are cached too: a hot key that is missing is the
		// stampede this exists to stop.
		s.store(t, &value{})
	default:
		s.m.fetchErrors.Add(1)
		s.release(t)
	}
	return err
}

// mgetSlot is the plan for one key of an MGET.
type mgetSlot struct {
	act action
	v   *value
	t   ticket
}

// mget serves the hot members locally and sends only the rest, as one
// MGET, merging the replies back in order. An MGET with no local member is
// sent unchanged.
func (s *Shim) mget(ctx context.Context, c *redis.SliceCmd, args []any, next redis.ProcessHook) error {
	n := len(args) - 1
	var buf [16]mgetSlot
	slots := buf[:0]
	if n > len(buf) {
		slots = make([]mgetSlot, 0, n)
	}
	now := nanotime()
	hits := 0
	for _, a := range args[1:] {
		key, ok := a.(string)
		if !ok {
			slots = append(slots, mgetSlot{})
			continue
		}
		act, v, t := s.acquire(key, kindString, now)
		if act == actHit {
			hits++
		}
		slots = append(slots, mgetSlot{act: act, v: v, t: t})
	}
	if hits == 0 {
		var err error
		if n == 1 && slots[0].act == actFetch {
			err = s.fetch(ctx, slots[0].t.e, c, next) // a one-key MGET is a refresh read
		} else {
			err = next(ctx, c)
		}
		vals := c.Val()
		for i := range slots {
			if slots[i].act != actFetch {
				continue
			}
			if err != nil || len(vals) != n {
				s.m.fetchErrors.Add(1)
				s.release(slots[i].t)
				continue
			}
			s.store(slots[i].t, stringValue(vals[i]))
		}
		return err
	}
	out := make([]any, n)
	var remote []any
	var idx []int
	if hits < n {
		remote = make([]any, 1, n-hits+1)
		remote[0] = args[0]
		idx = make([]int, 0, n-hits)
	}
	for i := range slots {
		if slots[i].act == actHit {
			if v := slots[i].v; v.exists {
				out[i] = v.str
			}
			continue
		}
		remote = append(remote, args[i+1])
		idx = append(idx, i)
	}
	if len(idx) > 0 {
		rc := redis.NewSliceCmd(ctx, remote...)
		var err error
		if len(idx) == 1 && slots[idx[0]].act == actFetch {
			err = s.fetch(ctx, slots[idx[0]].t.e, rc, next) // the one key sent is a refresh read
		} else {
			err = next(ctx, rc)
		}
		rv := rc.Val()
		if err == nil && len(rv) != len(idx) {
			err = errors.New("mget: reply length does not match the keys sent")
		}
		if err != nil {
			for _, i := range idx {
				if slots[i].act == actFetch {
					s.m.fetchErrors.Add(1)
					s.release(slots[i].t)
				}
			}
			return err
		}
		for j, i := range idx {
			out[i] = rv[j]
			if slots[i].act == actFetch {
				s.store(slots[i].t, stringValue(rv[j]))
			}
		}
	}
	c.SetVal(out)
	return nil
}

// stringValue is an MGET element (a string, or nil for a missing key) as a
// cached value.
func stringValue(x any) *value {
	if str, ok := x.(string); ok {
		return &value{exists: true, str: str}
	}
	return &value{}
}

// hashFor returns the cached hash for key, fetching it with HGETALL when
// this caller holds the refresh token. Nil: pass the caller's command on.
func (s *Shim) hashFor(ctx context.Context, key string, next redis.ProcessHook) *value {
	act, v, t := s.acquire(key, kindHash, nanotime())
	switch act {
	case actHit:
		return v
	case actPass:
		return nil
	}
	hc := redis.NewMapStringStringCmd(ctx, "hgetall", key)
	if err := s.fetch(ctx, t.e, hc, next); err != nil {
		// WRONGTYPE and the like: the caller's own command gets the
		// server's answer.
		s.m.fetchErrors.Add(1)
		s.release(t)
		return nil
	}
	m := hc.Val()
	if len(m) > s.opt.MaxHashFields {
		t.e.uncacheable.Store(true)
		s.release(t)
		return nil
	}
	v = &value{exists: len(m) > 0, hash: m}
	s.store(t, v)
	return v
}

func (s *Shim) hget(ctx context.Context, c *redis.StringCmd, args []any, next redis.ProcessHook) error {
	key, ok1 := args[1].(string)
	field, ok2 := args[2].(string)
	if !ok1 || !ok2 {
		return next(ctx, c)
	}
	v := s.hashFor(ctx, key, next)
	if v == nil {
		return next(ctx, c)
	}
	f, ok := v.hash[field]
	if !ok {
		return redis.Nil
	}
	c.SetVal(f)
	return nil
}

func (s *Shim) hmget(ctx context.Context, c *redis.SliceCmd, args []any, next redis.ProcessHook) error {
	key, ok := args[1].(string)
	if !ok {
		return next(ctx, c)
	}
	for _, a := range args[2:] {
		if _, ok := a.(string); !ok {
			return next(ctx, c)
		}
	}
	v := s.hashFor(ctx, key, next)
	if v == nil {
		return next(ctx, c)
	}
	out := make([]any, len(args)-2)
	for i, a := range args[2:] {
		if f, ok := v.hash[a.(string)]; ok {
			out[i] = f
		}
	}
	c.SetVal(out)
	return nil
}

func (s *Shim) hgetall(ctx context.Context, c *redis.MapStringStringCmd, args []any, next redis.ProcessHook) error {
	key, ok := args[1].(string)
	if !ok {
		return next(ctx, c)
	}
	v := s.hashFor(ctx, key, next)
	if v == nil {
		return next(ctx, c)
	}
	// A copy: the cached map is shared and must not change under readers.
	out := make(map[string]string, len(v.hash))
	for k, f := range v.hash {
		out[k] = f
	}
	c.SetVal(out)
	return nil
}
