package pipeline

import (
	"fmt"
	"time"
)

// NoTraffic tells a live capture that has seen nothing on its ports for a
// while. Replay can name the busiest ports of a file (PortTally); a live
// eBPF capture filters ports in the kernel and never sees the others, so
// the hint can only say what was asked for and where to look.
type NoTraffic struct {
	After time.Duration // 0: never
	start time.Time
	done  bool
}

// Check is called with the segments seen on the server ports so far; it
// returns a message the first time none has been seen for After.
func (n *NoTraffic) Check(now time.Time, segments uint64, ports []uint16, ifaces []string) (string, bool) {
	if n.done || n.After <= 0 {
		return "", false
	}
	if n.start.IsZero() {
		n.start = now
	}
	if segments > 0 {
		n.done = true
		return "", false
	}
	if now.Sub(n.start) < n.After {
		return "", false
	}
	n.done = true
	where := "every interface"
	if len(ifaces) > 0 {
		where = fmt.Sprintf("%v", ifaces)
	}
	return fmt.Sprintf("no traffic on ports %v seen on %s in %s; check --port (the cache server's port) and --iface (the interface its clients reach it on)",
		ports, where, n.After), true
}
