package client

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// pipeSlot is the plan for one command of a pipeline.
type pipeSlot struct {
	local bool   // answered from memory, not sent
	t     ticket // GET: the refresh token this command holds
}

// pipeline serves the hot reads of a plain pipeline (Pipelined) from
// memory and sends the rest as one pipeline, in their order. Each served
// command gets exactly what go-redis would have set: its value, or
// redis.Nil, and the pipeline returns the first error in command order as
// go-redis does. A pipeline that writes anything is sent whole, so its
// reads see its own writes. GET may refresh its key (its reply is stored);
// hash reads are only served from a fresh value (a pipeline cannot fetch
// the hash on the side); an MGET is served only when all its keys have
// fresh values.
func (s *Shim) pipeline(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
	var kb [8]string
	for _, c := range cmds {
		if keys, all := writtenKeys(c.Args(), kb[:0]); len(keys) > 0 || all {
			return s.writePipeline(ctx, cmds, next)
		}
	}
	var buf [16]pipeSlot
	slots := buf[:0]
	if len(cmds) > len(buf) {
		slots = make([]pipeSlot, 0, len(cmds))
	}
	now := nanotime()
	nlocal := 0
	for _, c := range cmds {
		sl := s.planPipe(c, now)
		if sl.local {
			nlocal++
		}
		slots = append(slots, sl)
	}
	if nlocal == 0 {
		err := next(ctx, cmds)
		s.storePipe(cmds, slots)
		return err
	}
	var err error
	if nlocal < len(cmds) {
		remote := make([]redis.Cmder, 0, len(cmds)-nlocal)
		for i, c := range cmds {
			if !slots[i].local {
				remote = append(remote, c)
			}
		}
		err = next(ctx, remote)
		s.storePipe(cmds, slots)
		if err != nil && !sentErr(remote, err) {
			// Not a command's reply (a connection error): go-redis
			// returns it as it is.
			return err
		}
	}
	for _, c := range cmds {
		if e := c.Err(); e != nil {
			return e
		}
	}
	return nil
}

// sentErr reports whether err is the error of one of cmds.
func sentErr(cmds []redis.Cmder, err error) bool {
	for _, c := range cmds {
		if c.Err() == err {
			return true
		}
	}
	return false
}

// planPipe decides one pipelined command, answering it when it can.
func (s *Shim) planPipe(cmd redis.Cmder, now int64) pipeSlot {
	args := cmd.Args()
	switch c := cmd.(type) {
	case *redis.StringCmd:
		if len(args) == 2 && isName(args[0], "get") {
			key, ok := args[1].(string)
			if !ok {
				return pipeSlot{}
			}
			act, v, t := s.acquire(key, kindString, now)
			switch act {
			case actHit:
				if v.exists {
					c.SetVal(v.str)
					c.SetErr(nil)
				} else {
					c.SetErr(redis.Nil)
				}
				return pipeSlot{local: true}
			case actFetch:
				return pipeSlot{t: t}
			}
			return pipeSlot{}
		}
		if len(args) == 3 && isName(args[0], "hget") {
			key, ok1 := args[1].(string)
			field, ok2 := args[2].(string)
			if !ok1 || !ok2 {
				return pipeSlot{}
			}
			if v := s.peek(key, kindHash, now); v != nil {
				if f, ok := v.hash[field]; ok {
					c.SetVal(f)
					c.SetErr(nil)
				} else {
					c.SetErr(redis.Nil)
				}
				return pipeSlot{local: true}
			}
		}
	case *redis.SliceCmd:
		if len(args) >= 2 && isName(args[0], "mget") {
			return s.planPipeMGet(c, args, now)
		}
		if len(args) >= 3 && isName(args[0], "hmget") {
			key, ok := args[1].(string)
			if !ok {
				return pipeSlot{}
			}
			if v := s.peek(key, kindHash, now); v != nil {
				c.SetVal(hmgetReply(v, args[2:]))
				c.SetErr(nil)
				return pipeSlot{local: true}
			}
		}
	case *redis.MapStringStringCmd:
		if len(args) == 2 && isName(args[0], "hgetall") {
			key, ok := args[1].(string)
			if !ok {
				return pipeSlot{}
			}
			if v := s.peek(key, kindHash, now); v != nil {
				c.SetVal(copyHash(v))
				c.SetErr(nil)
				return pipeSlot{local: true}
			}
		}
	}
	return pipeSlot{}
}

// planPipeMGet serves a pipelined MGET only when every key has a fresh
// value; otherwise it is sent whole (and nothing is counted as served).
func (s *Shim) planPipeMGet(c *redis.SliceCmd, args []any, now int64) pipeSlot {
	if s.topo.crossSlot(args[1:]) {
		return pipeSlot{}
	}
	vals := make([]*value, len(args)-1)
	ents := make([]*cacheEntry, len(args)-1)
	for i, a := range args[1:] {
		key, ok := a.(string)
		if !ok {
			return pipeSlot{}
		}
		e := s.fresh(key, kindString, now)
		if e == nil {
			return pipeSlot{}
		}
		ents[i] = e
		vals[i] = e.val.Load()
		if vals[i] == nil {
			return pipeSlot{}
		}
	}
	out := make([]any, len(vals))
	for i, v := range vals {
		if v.exists {
			out[i] = v.str
		}
	}
	s.m.hits.Add(uint64(len(vals)))
	for _, e := range ents {
		s.countHit(e)
	}
	c.SetVal(out)
	c.SetErr(nil)
	return pipeSlot{local: true}
}

// storePipe stores the replies of the commands that held refresh tokens.
func (s *Shim) storePipe(cmds []redis.Cmder, slots []pipeSlot) {
	for i := range slots {
		if t := slots[i].t; t.e != nil {
			if c, ok := cmds[i].(*redis.StringCmd); ok {
				s.storeGet(t, c, c.Err())
			} else {
				s.release(t)
			}
		}
	}
}
