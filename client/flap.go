package client

import (
	"time"

	"github.com/hotsniff/hotsniff/client/event"
)

// Flapping verdicts (docs/channel-protocol.md §9): once a key's cacheable
// verdict changed flapChanges times within flapWindow, a further
// cacheable:false is held back until the verdict stays put for flapWindow.
const (
	flapChanges = 4
	flapWindow  = 10 * time.Second
	flapMaxKeys = 1 << 16
)

type flapState struct {
	uncacheable bool
	changes     [flapChanges]time.Time // ring of the last change times
	n           int
	holding     bool
	// last is the latest held-back event, applied when the hold ends.
	last *event.Event
}

func (st *flapState) lastChange() time.Time { return st.changes[(st.n-1+flapChanges)%flapChanges] }

// flapGuard tracks verdict changes per (proto, ns, key). Bounded: keys with
// no change for flapWindow are pruned, and past flapMaxKeys it starts over.
// Owned by the Run goroutine.
type flapGuard struct{ m map[string]*flapState }

func newFlapGuard() flapGuard { return flapGuard{m: map[string]*flapState{}} }

// held records e's verdict and reports whether a cacheable:false must not
// be applied because the key's verdict flaps.
func (g *flapGuard) held(e *event.Event, now time.Time) bool {
	id := lookupID(e.Proto, e.NS, e.Key)
	st := g.m[id]
	if st == nil {
		if !e.Uncacheable {
			// Cacheable and never seen otherwise: nothing to track.
			return false
		}
		if len(g.m) >= flapMaxKeys {
			clear(g.m)
		}
		// A key is cacheable until told otherwise: false is a change.
		st = &flapState{}
		g.m[id] = st
	}
	if st.uncacheable != e.Uncacheable {
		st.uncacheable = e.Uncacheable
		st.changes[st.n%flapChanges] = now
		st.n++
		// The oldest of the last flapChanges changes is within the window.
		if st.n >= flapChanges && now.Sub(st.changes[st.n%flapChanges]) < flapWindow {
			st.holding = true
		}
	}
	if st.holding && now.Sub(st.lastChange()) >= flapWindow {
		st.holding = false
	}
	if st.holding && e.Uncacheable {
		st.last = e
		return true
	}
	st.last = nil
	return false
}

// prune forgets keys whose verdict has not changed for flapWindow, and
// returns the held-back verdicts whose hold just ended, to apply now.
func (g *flapGuard) prune(now time.Time) []*event.Event {
	var due []*event.Event
	for id, st := range g.m {
		if now.Sub(st.lastChange()) < flapWindow {
			continue
		}
		if st.holding && st.last != nil {
			due = append(due, st.last)
		}
		delete(g.m, id)
	}
	return due
}
