package client

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// epoch anchors the shim's monotonic clock: nanoseconds since epoch fit an
// atomic int64 and compare without wall-clock jumps.
var epoch = time.Now()

func nanotime() int64 { return int64(time.Since(epoch)) }

// monoOf converts an expiry from the Subscriber (zero: none) to the shim
// clock (0: none).
func monoOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(int64(t.Sub(epoch)), 1)
}

// Kinds of cached value: a key is cached as what the application reads it
// as, and a read of the other kind passes through (Redis answers WRONGTYPE
// or whatever is right).
const (
	kindString uint8 = iota + 1
	kindHash
)

// value is one cached reply. It is never modified after it is stored, so
// readers share it without locks.
type value struct {
	expires int64 // shim clock
	exists  bool  // kindString: false caches a missing key (redis.Nil)
	str     string
	hash    map[string]string // kindHash; empty map: missing key
	size    int64             // bytes counted against MaxBytes
}

// valueOverhead approximates what a cached value costs beyond its bytes
// (the value struct, a map bucket share per hash field).
const valueOverhead, fieldOverhead = 64, 48

func (v *value) bytes(key string) int64 {
	n := int64(len(key) + len(v.str) + valueOverhead)
	for f, x := range v.hash {
		n += int64(len(f) + len(x) + fieldOverhead)
	}
	return n
}

// sumSeed keys value fingerprints: random per process, so no value can be
// crafted to match another's.
var sumSeed = maphash.MakeSeed()

// sum fingerprints v as a value of kind: what the server held, compared
// with what a tracking registration read (regCheck). A hash's fields are
// summed in any order.
func (v *value) sum(kind uint8) uint64 {
	var h maphash.Hash
	h.SetSeed(sumSeed)
	if kind != kindHash {
		if v.exists {
			h.WriteByte(1)
		} else {
			h.WriteByte(0)
		}
		h.WriteString(v.str)
		return h.Sum64()
	}
	n := uint64(len(v.hash))
	var lb [8]byte
	for f, x := range v.hash {
		h.Reset()
		binary.LittleEndian.PutUint64(lb[:], uint64(len(f)))
		h.Write(lb[:])
		h.WriteString(f)
		h.WriteString(x)
		n += h.Sum64()
	}
	return n
}

// regCheck is what a tracking registration read, for a fetch that was in
// flight then: a fetch sent before done stores its value only if it is what
// the registration saw (sum), since a write between the two was reported to
// no one.
type regCheck struct {
	done int64
	sum  uint64
}

// setVal swaps e's value and keeps the byte count (callers hold e.mu or
// own e outright).
func (s *Shim) setVal(e *cacheEntry, v *value) {
	old := e.val.Swap(v)
	var d int64
	if v != nil {
		d += v.size
	}
	if old != nil {
		d -= old.size
	}
	if d != 0 {
		s.bytes.Add(d)
	}
}

// cacheEntry is a hot key admitted to the local cache.
type cacheEntry struct {
	key  string
	kind uint8
	// hotUntil is when the key stops being hot unless refreshed (0: until
	// cold), copied from the hot set so a hit needs no other lookup.
	hotUntil atomic.Int64
	val      atomic.Pointer[value]
	// refreshing is the start time of the one fetch in flight (0: none): the
	// caller that set it goes to Redis, the others keep the current value.
	refreshing atomic.Int64
	// wake is closed when the fetch in flight ends (stored or given up):
	// a lone read waits on it rather than joining a stampede (acquireWait).
	wake atomic.Pointer[chan struct{}]
	// gen counts invalidations; a fetch stores its result only if gen has
	// not moved since it was sent, so a reply read before a write never
	// lands after the write's invalidation.
	gen atomic.Uint64
	// mu orders stores against invalidations (never taken on a hit).
	mu sync.Mutex
	// check: the latest tracking registration's read, for fetches sent
	// before it (guarded by mu).
	check regCheck
	// uncacheable: the hash is larger than MaxHashFields.
	uncacheable atomic.Bool
	// sized: HLEN showed the hash small enough to fetch whole.
	sized atomic.Bool
	// rep counts local reads for the absorbed-demand report (report.go).
	rep absorbed
}

// action is what a read of one key does.
type action uint8

const (
	actPass  action = iota // go to Redis, store nothing
	actHit                 // serve v
	actFetch               // go to Redis and store the reply (holds the refresh token)
)

// ticket is a fetch in progress: the entry, the gen it was sent at and its
// refresh token.
type ticket struct {
	e     *cacheEntry
	gen   uint64
	token int64
	wake  chan struct{} // closed when the fetch ends
}

// begin makes the ticket of a fetch that just took e's refresh token.
func begin(e *cacheEntry, gen uint64, token int64) ticket {
	w := make(chan struct{})
	e.wake.Store(&w)
	return ticket{e: e, gen: gen, token: token, wake: w}
}

// end tells the reads waiting on t's fetch that it is over.
func (t ticket) end() {
	if t.wake != nil {
		close(t.wake)
	}
}

// acquire decides how a read of key is served. Only the admission path
// allocates; a hit is two map-free atomic loads after the map lookup.
func (s *Shim) acquire(key string, kind uint8, now int64) (action, *value, ticket) {
	act, v, t, busy := s.decide(key, kind, now)
	if busy != nil {
		s.m.misses.Add(1)
	}
	return act, v, t
}

// decide is acquire, except that a read sent to Redis only because another
// caller's fetch of the key is in flight with no value to serve (an
// invalidation dropped it) returns that entry as busy, uncounted: the
// caller may wait for the fetch instead (acquireWait).
func (s *Shim) decide(key string, kind uint8, now int64) (act action, v *value, t ticket, busy *cacheEntry) {
	e := s.entry(key)
	if e == nil {
		act, v, t = s.admit(key, kind, now)
		return act, v, t, nil
	}
	if e.kind != kind || e.uncacheable.Load() {
		s.m.misses.Add(1)
		return actPass, nil, ticket{}, nil
	}
	if hu := e.hotUntil.Load(); hu != 0 && now >= hu && !s.chanDown.Load() {
		// The hot entry lapsed without a refresh or cold message.
		s.drop(e, evictNotHot)
		s.m.misses.Add(1)
		return actPass, nil, ticket{}, nil
	}
	v = e.val.Load()
	if v != nil && now < v.expires {
		s.m.hits.Add(1)
		s.countHit(e)
		return actHit, v, ticket{}, nil
	}
	// Expired or invalidated: exactly one caller refreshes. A refresh that
	// hangs past StaleGrace gives its token up to the next caller.
	if start := e.refreshing.Load(); start == 0 || now-start > int64(s.opt.StaleGrace) {
		token := max(now, 1)
		if e.refreshing.CompareAndSwap(start, token) {
			s.m.misses.Add(1)
			s.m.refreshes.Add(1)
			return actFetch, nil, begin(e, e.gen.Load(), token), nil
		}
	}
	if v != nil && now < v.expires+int64(s.opt.StaleGrace) {
		s.m.staleHits.Add(1)
		s.countHit(e)
		return actHit, v, ticket{}, nil
	}
	return actPass, nil, ticket{}, e
}

// peek returns key's fresh cached value of kind, counted as a hit, or nil;
// it never admits, refreshes or waits (pipelines cannot fetch a hash on
// the side).
func (s *Shim) peek(key string, kind uint8, now int64) *value {
	e := s.fresh(key, kind, now)
	if e == nil {
		return nil
	}
	v := e.val.Load()
	if v == nil {
		return nil
	}
	s.m.hits.Add(1)
	s.countHit(e)
	return v
}

// fresh returns key's entry if it holds a fresh value of kind (counting
// nothing).
func (s *Shim) fresh(key string, kind uint8, now int64) *cacheEntry {
	e := s.entry(key)
	if e == nil || e.kind != kind || e.uncacheable.Load() {
		return nil
	}
	if hu := e.hotUntil.Load(); hu != 0 && now >= hu && !s.chanDown.Load() {
		return nil
	}
	if v := e.val.Load(); v != nil && now < v.expires {
		return e
	}
	return nil
}

// admit handles a read of a key with no entry: admission on second access.
// The first read of a hot key only records it; the second creates the entry
// and fetches the value. Keys that are not hot pass untouched.
func (s *Shim) admit(key string, kind uint8, now int64) (action, *value, ticket) {
	s.mu.RLock()
	until, hot := s.hot[key]
	_, seen := s.seen[key]
	big := s.big[key]
	s.mu.RUnlock()
	if !hot || (until != 0 && now >= until && !s.chanDown.Load()) {
		return actPass, nil, ticket{}
	}
	if kind == kindHash && now < big {
		// Known to be a hash too big to cache: not even HLEN again.
		s.m.misses.Add(1)
		return actPass, nil, ticket{}
	}
	s.m.misses.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[key]; e != nil {
		// Admitted meanwhile by another caller: it fetches.
		return actPass, nil, ticket{}
	}
	if !seen {
		if _, seen = s.seen[key]; !seen {
			if len(s.seen) >= max(4*s.opt.MaxEntries, 1024) {
				// A doorkeeper, not a history: start over when full.
				clear(s.seen)
			}
			s.seen[key] = struct{}{}
			return actPass, nil, ticket{}
		}
	}
	delete(s.seen, key)
	if len(s.entries) >= s.opt.MaxEntries {
		s.evictOneLocked(now)
	}
	e := &cacheEntry{key: key, kind: kind}
	e.hotUntil.Store(until)
	token := max(now, 1)
	e.refreshing.Store(token)
	s.entries[key] = e
	s.trackers.kick() // register it for server-assisted invalidation
	s.m.admissions.Add(1)
	s.m.refreshes.Add(1)
	return actFetch, nil, begin(e, 0, token)
}

// acquireWait is acquire for a read of one key alone (a GET, a hash read).
// Where acquire would send it to Redis because another caller's fetch of the
// key is in flight and no value may be served (an invalidation dropped it),
// it waits for that fetch, at most until StaleGrace after it began, and
// then serves what it stored: after a write to a hot key, its readers wait
// about one round trip instead of all going to Redis at once. The fetch was
// sent after the invalidation and before this read began, as a refresh
// always is: the staleness bound is the same. Reads of several keys (MGET,
// pipelines) never wait: they may hold that very fetch.
func (s *Shim) acquireWait(key string, kind uint8, now int64) (action, *value, ticket) {
	// One wait at most StaleGrace in all: a fetch whose result was
	// dropped (the key was invalidated again while it was in flight) hands
	// over to the next one, which this read may become itself.
	deadline := now + int64(s.opt.StaleGrace)
	var tm *time.Timer
	defer func() {
		if tm != nil {
			tm.Stop()
		}
	}()
	for waited := false; ; waited = true {
		act, v, t, busy := s.decide(key, kind, now)
		if busy == nil {
			if waited && act == actHit {
				s.m.waitHits.Add(1)
			}
			return act, v, t
		}
		start, w := busy.refreshing.Load(), busy.wake.Load()
		wait := time.Duration(min(deadline, start+int64(s.opt.StaleGrace)) - now)
		if start == 0 || w == nil || wait <= 0 {
			s.m.misses.Add(1)
			return act, v, t
		}
		if tm == nil {
			tm = time.NewTimer(wait)
		} else {
			tm.Reset(wait)
		}
		select {
		case <-*w:
		case <-tm.C:
			s.m.misses.Add(1)
			return act, v, t
		}
		now = nanotime()
	}
}

// evictOneLocked makes room: an entry whose value expired long ago if one
// turns up among the first few, else whichever comes first (Go's map order
// is random, so this is random eviction, which is fine for a set of hot keys
// that all get refreshed constantly).
func (s *Shim) evictOneLocked(now int64) {
	var victim *cacheEntry
	n := 0
	for _, e := range s.entries {
		if victim == nil {
			victim = e
		}
		if v := e.val.Load(); v == nil || now > v.expires+int64(s.opt.StaleGrace) {
			victim = e
			break
		}
		if n++; n >= 8 {
			break
		}
	}
	if victim != nil {
		victim.mu.Lock()
		s.setVal(victim, nil)
		victim.mu.Unlock()
		delete(s.entries, victim.key)
		s.m.evictions[evictCapacity].Add(1)
	}
}

// store installs a fetched value unless the key was invalidated since the
// fetch was sent, and gives the refresh token back. The value expires
// LocalTTL after the fetch was sent (the token is that time), not after it
// landed: what bounds staleness is the age of the read at the server.
func (s *Shim) store(t ticket, v *value) {
	e := t.e
	if v != nil {
		v.expires = t.token + int64(s.opt.LocalTTL)
		v.size = v.bytes(e.key)
		var old int64
		if o := e.val.Load(); o != nil {
			old = o.size
		}
		switch {
		case v.size > int64(s.opt.MaxValueBytes):
			// Too big to hold: every read goes to Redis, as if not hot.
			s.m.tooBig.Add(1)
			v = nil
		case s.bytes.Load()-old+v.size > s.opt.MaxBytes:
			// The cache is full by bytes: this key is not cached now.
			s.m.evictions[evictBytes].Add(1)
			v = nil
		}
		e.mu.Lock()
		switch {
		case e.gen.Load() != t.gen:
		case v != nil && t.token < e.check.done && v.sum(e.kind) != e.check.sum:
			// Sent before a tracking registration that read another
			// value: a write in between was reported to no one.
			s.m.invalidations[invalTracking].Add(1)
		default:
			s.setVal(e, v)
		}
		e.mu.Unlock()
	}
	e.refreshing.CompareAndSwap(t.token, 0)
	t.end()
}

// release gives the token back after a failed fetch.
func (s *Shim) release(t ticket) {
	if t.e != nil {
		t.e.refreshing.CompareAndSwap(t.token, 0)
		t.end()
	}
}

// invalidate drops key's cached value (the key stays admitted: it is still
// hot, the next read refreshes it).
func (s *Shim) invalidate(key string, reason int) {
	e := s.entry(key)
	if e != nil {
		s.invalidateEntry(e)
		s.m.invalidations[reason].Add(1)
	}
}

// entry is key's cache entry, or nil.
func (s *Shim) entry(key string) *cacheEntry {
	s.mu.RLock()
	e := s.entries[key]
	s.mu.RUnlock()
	return e
}

func (s *Shim) invalidateEntry(e *cacheEntry) {
	e.mu.Lock()
	s.dropLocked(e)
	e.mu.Unlock()
}

// dropLocked drops e's value (e.mu held); gen moves too, so a fetch in
// flight does not store.
func (s *Shim) dropLocked(e *cacheEntry) {
	e.gen.Add(1)
	s.setVal(e, nil)
}

// probeKind is how a registration of key should read it (newProbe): as the
// kind cached, so tracked can tell whether a value fetched before the
// registration missed a write; 0 (EXISTS alone) when there is nothing to
// check.
func (s *Shim) probeKind(key string) uint8 {
	e := s.entry(key)
	if e == nil || e.uncacheable.Load() {
		return 0
	}
	if e.val.Load() == nil && e.refreshing.Load() == 0 {
		return 0
	}
	return e.kind
}

// tracked is told that key is now tracked at one master, by a registration
// whose reply arrived at done. A write that landed between a fetch and the
// registration was reported to no one (it would stand until LocalTTL): a
// value fetched before done is kept only if it is what the registration
// read (kind: the registration read the key as that kind; sum: what it
// read), and a fetch in flight stores only under that same condition
// (store). Without a read to compare with (kind 0), both are dropped and
// the next read fetches again. That holds for the first registration (the
// admission's own fetch races it), after an invalidation, and at a cluster
// master a slot moved to.
func (s *Shim) tracked(key string, done int64, kind uint8, sum uint64) {
	e := s.entry(key)
	if e == nil {
		return
	}
	// Under mu, so a store either ran before (its value is checked here) or
	// runs after (and sees check).
	e.mu.Lock()
	defer e.mu.Unlock()
	compared := kind != 0 && kind == e.kind
	v := e.val.Load()
	inFlight := e.refreshing.Load() != 0
	switch {
	case v != nil && v.expires-int64(s.opt.LocalTTL) < done && (!compared || v.sum(kind) != sum),
		inFlight && !compared:
		s.dropLocked(e)
		s.m.invalidations[invalTracking].Add(1)
	case inFlight:
		e.check = regCheck{done: done, sum: sum}
	}
}

// invalidateAll drops every cached value, keeping the entries.
func (s *Shim) invalidateAll(reason int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, e := range s.entries {
		s.invalidateEntry(e)
	}
	s.m.invalidations[reason].Add(1)
}

// drop removes an entry (the key is not hot any more).
func (s *Shim) drop(e *cacheEntry, reason int) {
	s.invalidateEntry(e)
	s.mu.Lock()
	if s.entries[e.key] == e {
		delete(s.entries, e.key)
		s.m.evictions[reason].Add(1)
	}
	s.mu.Unlock()
}
