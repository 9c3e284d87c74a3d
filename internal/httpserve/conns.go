package httpserve

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// connTable bounds the connections one listener holds. At the bound a new
// connection does not wait (a waiting accept is how a flood of idle
// keep-alive connections starved /healthz before): the connection that has
// waited longest without a request in progress (idle between requests, or
// new and still sending its headers) is closed to make room. Only when
// every held connection is in the middle of a request is the new one
// refused, and those end within the read and write timeouts.
type connTable struct {
	max int

	mu    sync.Mutex
	conns map[net.Conn]*connInfo

	evicted, refused atomic.Uint64
}

type connInfo struct {
	state http.ConnState
	since time.Time
}

func newConnTable(max int) *connTable {
	return &connTable{max: max, conns: make(map[net.Conn]*connInfo, max)}
}

// admit registers c, closing an idle connection when the table is full; it
// reports false (and closes c) when no room can be made.
func (t *connTable) admit(c net.Conn) bool {
	now := time.Now()
	t.mu.Lock()
	var victim net.Conn
	if len(t.conns) >= t.max {
		var vSince time.Time
		var vActive bool
		for k, ci := range t.conns {
			// Idle connections go first, then new ones still sending
			// their headers; never one serving a request.
			switch ci.state {
			case http.StateIdle:
				if victim == nil || vActive || ci.since.Before(vSince) {
					victim, vSince, vActive = k, ci.since, false
				}
			case http.StateNew:
				if victim == nil || (vActive && ci.since.Before(vSince)) {
					victim, vSince, vActive = k, ci.since, true
				}
			}
		}
		if victim == nil {
			t.mu.Unlock()
			t.refused.Add(1)
			c.Close()
			return false
		}
		// Removed now, so a burst of accepts does not pick it twice; its
		// Closed state change then finds nothing.
		delete(t.conns, victim)
	}
	t.conns[c] = &connInfo{state: http.StateNew, since: now}
	t.mu.Unlock()
	if victim != nil {
		t.evicted.Add(1)
		victim.Close()
	}
	return true
}

// connState is the http.Server ConnState hook.
func (t *connTable) connState(c net.Conn, s http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s {
	case http.StateClosed, http.StateHijacked:
		delete(t.conns, c)
	default:
		if ci := t.conns[c]; ci != nil {
			ci.state, ci.since = s, time.Now()
		}
	}
}

func (t *connTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// limitListener admits accepted connections through a connTable.
type limitListener struct {
	net.Listener
	t *connTable
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.t.admit(c) {
			return c, nil
		}
	}
}
