// Package ifwatch follows the network interfaces whose names match a set of
// patterns (cali*, lxc*, veth*): it reports each one when it appears (or at
// start) and again when it goes, so a capture can attach to pods' interfaces
// created after it started and let go of those of deleted pods.
//
// It listens to rtnetlink link notifications (RTM_NEWLINK, RTM_DELLINK) in
// the namespace of the calling thread, with the existing links dumped first.
// Notifications can be lost (the socket's buffer overflows under a burst of
// pod churn, or a dump is interrupted by a change): then it subscribes again
// and re-lists every link, attaching what is missing and letting go of what
// is gone.
package ifwatch

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Handler is told about matching interfaces. Up is called once per
// interface (by index) when it appears, or when a rename makes it match;
// Down when it is deleted, leaves the namespace or is renamed to a name no
// pattern matches. Both run on the watcher's goroutine, one at a time. An
// error from Up is logged and the interface is tried again at the next
// notification about it.
type Handler interface {
	Up(name string, index int) error
	Down(name string, index int)
}

// ValidatePatterns checks that every pattern is a valid filepath.Match
// pattern (a name is a pattern matching itself).
func ValidatePatterns(patterns []string) error {
	for _, p := range patterns {
		if _, err := filepath.Match(p, ""); err != nil {
			return fmt.Errorf("interface pattern %q: %w", p, err)
		}
	}
	return nil
}

// Match reports whether name matches one of patterns.
func Match(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := filepath.Match(p, name); ok {
			return true
		}
	}
	return false
}

// Watcher follows the interfaces matching its patterns.
type Watcher struct {
	patterns []string
	h        Handler
	log      *slog.Logger

	done    chan struct{}
	stopped chan struct{}
	resync  chan error // ErrorCallback: a lost or interrupted notification

	mu       sync.Mutex
	attached map[int]string // index -> name handed to Up
	resyncs  int
}

// Start lists the existing interfaces, hands the matching ones to h.Up
// before returning, and follows changes until Close. The listing and the
// subscription use the calling thread's network namespace.
func Start(patterns []string, h Handler, log *slog.Logger) (*Watcher, error) {
	if err := ValidatePatterns(patterns); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	w := &Watcher{
		patterns: patterns, h: h, log: log.With("component", "ifwatch"),
		done: make(chan struct{}), stopped: make(chan struct{}), resync: make(chan error, 1),
		attached: map[int]string{},
	}
	ch, sdone, err := w.subscribe()
	if err != nil {
		return nil, err
	}
	// The subscription is open before the listing, so nothing created in
	// between is missed; what both report is handled once (by index).
	if err := w.reconcile(); err != nil {
		close(sdone)
		go func() {
			for range ch {
			}
		}()
		return nil, err
	}
	go w.loop(ch, sdone)
	return w, nil
}

func (w *Watcher) subscribe() (chan netlink.LinkUpdate, chan struct{}, error) {
	ch := make(chan netlink.LinkUpdate, 256)
	done := make(chan struct{})
	err := netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{
		ListExisting: true,
		// Pod churn can produce bursts of notifications.
		ReceiveBufferSize: 1 << 20,
		ErrorCallback: func(err error) {
			select {
			case w.resync <- err:
			default: // one pending resync covers any number of errors
			}
		},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("subscribe to link changes: %w", err)
	}
	return ch, done, nil
}

func (w *Watcher) loop(ch chan netlink.LinkUpdate, sdone chan struct{}) {
	defer close(w.stopped)
	// Closing a subscription's done channel closes its socket; its reader
	// goroutine then closes ch, but may first be blocked sending an update:
	// drain until then so it can exit.
	stop := func(ch chan netlink.LinkUpdate, sdone chan struct{}) {
		close(sdone)
		for range ch {
		}
	}
	defer func() { stop(ch, sdone) }()
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-w.done:
			return
		case u, ok := <-ch:
			if ok {
				w.update(u)
				continue
			}
			// The subscription died (its receive failed, ENOBUFS after
			// an overflow): subscribe again and re-list.
			w.log.Warn("link notifications lost: subscribing again")
			close(sdone) // ch is closed already
			for {
				nch, nsdone, err := w.subscribe()
				if err == nil {
					ch, sdone = nch, nsdone
					break
				}
				w.log.Warn("subscribe to link changes", "err", err)
				select {
				case <-w.done:
					ch, sdone = make(chan netlink.LinkUpdate), make(chan struct{})
					close(ch)
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 5*time.Second)
			}
			backoff = 100 * time.Millisecond
			w.relist()
		case err := <-w.resync:
			if errors.Is(err, netlink.ErrDumpInterrupted) {
				w.log.Info("link listing interrupted by a change: listing again")
			} else {
				w.log.Warn("link notification error: listing again", "err", err)
			}
			w.relist()
		}
	}
}

func (w *Watcher) relist() {
	w.mu.Lock()
	w.resyncs++
	w.mu.Unlock()
	if err := w.reconcile(); err != nil {
		w.log.Warn("list links", "err", err)
	}
}

// update handles one notification.
func (w *Watcher) update(u netlink.LinkUpdate) {
	attrs := u.Link.Attrs()
	if u.Header.Type == unix.RTM_DELLINK {
		w.down(int(u.Index))
		return
	}
	w.seen(attrs.Name, attrs.Index)
}

// seen handles a link that exists with this name and index.
func (w *Watcher) seen(name string, index int) {
	w.mu.Lock()
	old, ok := w.attached[index]
	w.mu.Unlock()
	match := Match(w.patterns, name)
	switch {
	case ok && old == name:
		return
	case ok && !match:
		w.down(index)
		return
	case ok:
		// Renamed, still matching: the attachment follows the index.
		w.mu.Lock()
		w.attached[index] = name
		w.mu.Unlock()
		return
	case !match:
		return
	}
	if err := w.h.Up(name, index); err != nil {
		w.log.Warn("attach interface", "iface", name, "err", err)
		return
	}
	w.mu.Lock()
	w.attached[index] = name
	w.mu.Unlock()
}

func (w *Watcher) down(index int) {
	w.mu.Lock()
	name, ok := w.attached[index]
	delete(w.attached, index)
	w.mu.Unlock()
	if ok {
		w.h.Down(name, index)
	}
}

// reconcile lists every link: matching ones not attached yet go Up,
// attached ones that no longer exist go Down.
func (w *Watcher) reconcile() error {
	var links []netlink.Link
	var err error
	for range 10 {
		if links, err = netlink.LinkList(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	present := map[int]bool{}
	for _, l := range links {
		a := l.Attrs()
		present[a.Index] = true
		w.seen(a.Name, a.Index)
	}
	w.mu.Lock()
	var gone []int
	for idx := range w.attached {
		if !present[idx] {
			gone = append(gone, idx)
		}
	}
	w.mu.Unlock()
	for _, idx := range gone {
		w.down(idx)
	}
	return nil
}

// Attached returns the interfaces handed to Up and not yet to Down, by index.
func (w *Watcher) Attached() map[int]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := make(map[int]string, len(w.attached))
	for k, v := range w.attached {
		m[k] = v
	}
	return m
}

// Close stops following changes; it does not call Down for the interfaces
// still attached (the caller detaches everything when it closes).
func (w *Watcher) Close() {
	select {
	case <-w.done:
		return
	default:
	}
	close(w.done)
	<-w.stopped
}

// DefaultPodPatterns name the host side of pods' interfaces under common
// CNIs: Calico (cali*), Cilium (lxc*), Flannel, kindnet and the bridge
// plugin (veth*), AWS VPC CNI (eni*), GKE (gke*), Azure CNI (azv*). With
// no --iface they are captured beside the physical NICs, and followed as
// pods come and go.
var DefaultPodPatterns = []string{"cali*", "lxc*", "veth*", "eni*", "gke*", "azv*"}
