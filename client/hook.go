package client

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

var _ redis.Hook = (*Shim)(nil)

// chain is the state of one go-redis hook chain. go-redis builds a chain
// per client object: the client Install was given, and every Conn and Tx
// cloned from it (rebuilding calls ProcessHook again with that object's own
// next). The first chain built is the installed client's: AddHook builds it
// before any clone can see the hook. The others are connections whose
// session state (SELECT, WATCH, MULTI) the shim must follow, because they
// may read another DB or sit inside an optimistic transaction.
type chain struct {
	main bool
	// db is the DB this chain's connection has selected (Conn, Tx).
	db atomic.Int64
	// watching: WATCH was sent and neither EXEC, DISCARD, UNWATCH nor RESET
	// since. Reads then belong to a transaction: a locally served value
	// would let EXEC succeed over another client's write (a lost update).
	watching atomic.Bool
	// queued: MULTI was sent, EXEC or DISCARD not yet.
	queued atomic.Bool
	// off: counted in Shim.connsOff (another DB, WATCH or MULTI); see settle.
	off atomic.Bool
	// mu guards the keys written inside MULTI: they change at EXEC, not
	// when queued, so they are dropped again after EXEC.
	mu         sync.Mutex
	queuedKeys []string
	queuedAll  bool
}

// maxQueuedKeys bounds the keys remembered per transaction; past it EXEC
// drops every cached value.
const maxQueuedKeys = 256

// queueWrite remembers the keys a command queued inside MULTI writes.
func (ch *chain) queueWrite(args []any) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	keys, all := writtenKeys(args, ch.queuedKeys)
	ch.queuedKeys, ch.queuedAll = keys, ch.queuedAll || all || len(keys) > maxQueuedKeys
	if ch.queuedAll {
		ch.queuedKeys = ch.queuedKeys[:0]
	}
}

// takeQueued returns and forgets the keys written inside MULTI.
func (ch *chain) takeQueued() (keys []string, all bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	keys, all = ch.queuedKeys, ch.queuedAll
	ch.queuedKeys, ch.queuedAll = nil, false
	return keys, all
}

// servable reports whether this chain may be answered from memory.
func (s *Shim) servable(ch *chain) bool {
	if s.deferred || s.poisoned.Load() {
		return false
	}
	if ch.main {
		return true
	}
	return !s.connsPoisoned.Load() && ch.db.Load() == s.db && !ch.watching.Load() && !ch.queued.Load()
}

// session commands change what a connection's later reads see.
const (
	sessNone = iota
	sessSelect
	sessWatch
	sessUnwatch // UNWATCH
	sessMulti
	sessEnd // EXEC, DISCARD, RESET
)

// sessionOp classifies args[0] without allocating: most commands are not
// session commands and are told apart by length and first letter.
func sessionOp(args []any) int {
	if len(args) == 0 {
		return sessNone
	}
	name, ok := args[0].(string)
	if !ok || len(name) < 4 || len(name) > 7 {
		return sessNone
	}
	switch name[0] | 0x20 {
	case 's':
		if strings.EqualFold(name, "select") {
			return sessSelect
		}
	case 'w':
		if strings.EqualFold(name, "watch") {
			return sessWatch
		}
	case 'u':
		if strings.EqualFold(name, "unwatch") {
			return sessUnwatch
		}
	case 'm':
		if strings.EqualFold(name, "multi") {
			return sessMulti
		}
	case 'e':
		if strings.EqualFold(name, "exec") {
			return sessEnd
		}
	case 'd':
		if strings.EqualFold(name, "discard") {
			return sessEnd
		}
	case 'r':
		if strings.EqualFold(name, "reset") {
			return sessEnd
		}
	}
	return sessNone
}

// selectedDB is the DB a SELECT names (-1: unparsable).
func selectedDB(args []any) int64 {
	if len(args) != 2 {
		return -1
	}
	n, err := strconv.ParseInt(argString(args[1]), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// DialHook implements redis.Hook: every connection's peer address is a
// server whose events apply (a failover client dials whichever master the
// sentinels name, under the placeholder address "FailoverClient").
func (s *Shim) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := next(ctx, network, addr)
		if err == nil && cn != nil {
			s.topo.dialed(cn.RemoteAddr())
		}
		return cn, err
	}
}

// ProcessHook implements redis.Hook: GET, MGET, HGET, HMGET and HGETALL of
// hot keys are answered locally; writes drop the keys they name; the rest
// passes untouched. Only commands built by go-redis's typed methods are
// served (rdb.Get, not rdb.Do("GET")): their reply types are known.
func (s *Shim) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	ch := &chain{main: s.processChains.Add(1) == 1}
	ch.db.Store(s.db)
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if op := sessionOp(args); op != sessNone {
			return s.session(ctx, ch, cmd, args, op, next)
		}
		if ch.queued.Load() {
			ch.queueWrite(args)
		}
		if !s.active.Load() {
			return next(ctx, cmd)
		}
		if !s.servable(ch) {
			return s.write(ctx, cmd, next)
		}
		switch c := cmd.(type) {
		case *redis.StringCmd:
			if len(args) == 2 && isName(args[0], "get") {
				return s.get(ctx, c, args, next)
			}
			if len(args) == 3 && isName(args[0], "hget") {
				return s.hget(ctx, c, args, next)
			}
		case *redis.SliceCmd:
			if len(args) >= 2 && isName(args[0], "mget") {
				return s.mget(ctx, c, args, next)
			}
			if len(args) >= 3 && isName(args[0], "hmget") {
				return s.hmget(ctx, c, args, next)
			}
		case *redis.MapStringStringCmd:
			if len(args) == 2 && isName(args[0], "hgetall") {
				return s.hgetall(ctx, c, args, next)
			}
		}
		return s.write(ctx, cmd, next)
	}
}

// session passes a session command on and follows its effect on the chain.
func (s *Shim) session(ctx context.Context, ch *chain, cmd redis.Cmder, args []any, op int, next redis.ProcessHook) error {
	switch op {
	case sessWatch:
		// Set before sending: a read racing the reply must not be served.
		ch.watching.Store(true)
	case sessMulti:
		ch.queued.Store(true)
	}
	s.settle(ch)
	err := next(ctx, cmd)
	switch op {
	case sessSelect:
		if err == nil {
			s.selected(ch, selectedDB(args))
		}
	case sessUnwatch:
		ch.watching.Store(false)
	case sessEnd:
		// EXEC and DISCARD end WATCH too, whatever their reply; RESET also
		// goes back to DB 0. EXEC ran the queued writes just now.
		ch.watching.Store(false)
		ch.queued.Store(false)
		if keys, all := ch.takeQueued(); len(keys) > 0 || all {
			s.invalidateWritten(keys, all)
		}
		if isName(args[0], "reset") && err == nil {
			s.selected(ch, 0)
		}
	}
	s.settle(ch)
	return err
}

// settle keeps Shim.connsOff, the number of Conn and Tx chains whose
// connection may not be served (on another DB, after WATCH, inside MULTI).
// go-redis builds a Conn's pipeline hook chain apart from its single
// commands and gives the shim nothing that ties the two together, so a
// Conn's pipeline cannot know its own Conn's session: it is served only
// while no Conn or Tx at all is off, which holds for the Conn it runs on.
func (s *Shim) settle(ch *chain) {
	if ch.main {
		return
	}
	off := ch.db.Load() != s.db || ch.watching.Load() || ch.queued.Load()
	if ch.off.Swap(off) != off {
		if off {
			s.connsOff.Add(1)
		} else {
			s.connsOff.Add(-1)
		}
	}
}

// selected records that a chain's connection now reads DB db. On the
// installed client that is one pooled connection among many, chosen at
// random by each later command: nothing it reads can be trusted any more.
func (s *Shim) selected(ch *chain, db int64) {
	if ch.main {
		if db != s.db {
			s.poison("SELECT on the pooled client: its connections no longer all read the same DB")
		}
		return
	}
	ch.db.Store(db)
}

// poison turns local serving off for good (writes still invalidate).
func (s *Shim) poison(why string) {
	if s.poisoned.CompareAndSwap(false, true) {
		s.log.Error("local serving disabled", "reason", why)
		s.invalidateAll(invalFlush)
	}
}

// ProcessPipelineHook implements redis.Hook. Plain pipelines serve their
// hot reads locally (pipeline.go): the installed client's, and a Conn's (or
// a Tx's, or a batch of go-redis's autopipeliner) while no Conn or Tx is on
// another DB or inside WATCH/MULTI (see settle). Transactions (MULTI/EXEC)
// are sent as they are, reads included: answering part of a transaction
// locally would break its atomicity. Their writes drop the keys they name.
func (s *Shim) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	// go-redis builds the plain pipeline chain, then the MULTI/EXEC one.
	n := s.pipelineChains.Add(1)
	main, tx := n == 1, n == 2
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if main && ctx.Value(bypassKey{}) != nil {
			// The shim's own read-then-report pipeline (sameconn.go).
			return next(ctx, cmds)
		}
		if sel, other := pipelineSession(cmds, s.db); sel || other {
			switch {
			case main || tx:
				if sel {
					s.poison("SELECT in a pipeline on the pooled client")
				}
			default:
				// A Conn's pipeline changed its session: this chain cannot
				// tell the Conn's single commands, so no Conn is served.
				s.connsPoisoned.Store(true)
			}
			return s.writePipeline(ctx, cmds, next)
		}
		if !s.active.Load() {
			return s.writePipeline(ctx, cmds, next)
		}
		if !isTx(cmds) && !s.deferred && !s.poisoned.Load() &&
			(main || !tx && !s.connsPoisoned.Load() && s.connsOff.Load() == 0) {
			return s.pipeline(ctx, cmds, next)
		}
		return s.writePipeline(ctx, cmds, next)
	}
}

// pipelineSession reports whether cmds select another DB than db (sel) or
// hold another session command than a MULTI/EXEC wrapper (other). A SELECT
// of the client's own DB changes nothing the shim relies on: go-redis sends
// one in the pipeline that opens each connection of a client on DB > 0.
func pipelineSession(cmds []redis.Cmder, db int64) (sel, other bool) {
	tx := isTx(cmds)
	for i, c := range cmds {
		switch sessionOp(c.Args()) {
		case sessNone:
		case sessSelect:
			if selectedDB(c.Args()) != db {
				sel = true
			}
		case sessMulti, sessEnd:
			if tx && (i == 0 || i == len(cmds)-1) {
				continue
			}
			other = true
		default:
			other = true
		}
	}
	return sel, other
}

// isTx reports whether cmds is a MULTI ... EXEC transaction.
func isTx(cmds []redis.Cmder) bool {
	if len(cmds) < 2 {
		return false
	}
	a := cmds[0].Args()
	return len(a) == 1 && isName(a[0], "multi")
}

// writePipeline sends cmds as they are, dropping the keys they write
// before and after.
func (s *Shim) writePipeline(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
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
	act, v, t := s.acquireWait(key, kindString, nanotime())
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
	s.storeGet(t, c, err)
	return err
}

// storeGet caches a GET's reply: a value, or redis.Nil, which proves the
// key is missing (a key of another type gets WRONGTYPE, never stored).
func (s *Shim) storeGet(t ticket, c *redis.StringCmd, err error) {
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
	if s.topo.crossSlot(args[1:]) {
		// The server answers CROSSSLOT for the whole command; serving
		// part of it would turn that error into a reply.
		return next(ctx, c)
	}
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
			s.storeMGet(slots[i].t, vals[i])
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
				s.storeMGet(slots[i].t, rv[j])
			}
		}
	}
	c.SetVal(out)
	return nil
}

// storeMGet caches an MGET element if it proves something: a string is a
// string value, but nil is either a missing key or a key of another type
// (MGET answers nil for a hash), so nil is not cached and the token goes
// back (the next GET of the key learns which).
func (s *Shim) storeMGet(t ticket, x any) {
	if str, ok := x.(string); ok {
		s.store(t, &value{exists: true, str: str})
		return
	}
	s.release(t)
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
	c.SetVal(hmgetReply(v, args[2:]))
	return nil
}

func hmgetReply(v *value, fields []any) []any {
	out := make([]any, len(fields))
	for i, a := range fields {
		if f, ok := v.hash[argString(a)]; ok {
			out[i] = f
		}
	}
	return out
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
	c.SetVal(copyHash(v))
	return nil
}

// copyHash is a fresh map: the cached one is shared and must not change
// under readers.
func copyHash(v *value) map[string]string {
	out := make(map[string]string, len(v.hash))
	for k, f := range v.hash {
		out[k] = f
	}
	return out
}
