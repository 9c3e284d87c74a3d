package ifwatch

import (
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// recorder is a Handler that remembers what it was told.
type recorder struct {
	mu     sync.Mutex
	up     map[int]string
	events []string
	fail   string // Up fails for this name
}

func (r *recorder) Up(name string, index int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name == r.fail {
		return fmt.Errorf("refused %s", name)
	}
	r.up[index] = name
	r.events = append(r.events, "up "+name)
	return nil
}

func (r *recorder) Down(name string, index int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.up, index)
	r.events = append(r.events, "down "+name)
}

func (r *recorder) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, n := range r.up {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (r *recorder) waitFor(t *testing.T, want ...string) {
	t.Helper()
	slices.Sort(want)
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(r.names(), want) {
		if time.Now().After(deadline) {
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("attached %v, want %v; events %v", r.names(), want, r.events)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMatch(t *testing.T) {
	pats := []string{"cali*", "lxc*", "eth0"}
	for name, want := range map[string]bool{"cali12ab": true, "lxc_health": true, "eth0": true, "eth1": false, "veth1": false} {
		if Match(pats, name) != want {
			t.Errorf("Match(%q) = %v", name, !want)
		}
	}
	if err := ValidatePatterns([]string{"[bad"}); err == nil {
		t.Error("bad pattern accepted")
	}
}

// TestWatch follows dummy interfaces in a namespace of its own: existing
// ones at start, new ones, renames in and out of the patterns, deletions,
// and a refused attach retried at the next notification.
func TestWatch(t *testing.T) {
	p := netnstest.NewPair(t)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"-n", p.NS}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	// veth pairs (kernels without the dummy device have veth); the peers'
	// names match no pattern.
	mk := func(name string) { ip("link", "add", name, "type", "veth", "peer", "name", "pr"+name) }
	mk("cali0")
	mk("other0")
	r := &recorder{up: map[int]string{}, fail: "cali9"}
	var w *Watcher
	if err := p.Do(func() error {
		var err error
		w, err = Start([]string{"cali*", "lxc*"}, r, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r.waitFor(t, "cali0") // listed at start, before Start returned
	mk("lxc1")
	r.waitFor(t, "cali0", "lxc1")
	ip("link", "set", "other0", "name", "cali2") // renamed into a pattern
	r.waitFor(t, "cali0", "cali2", "lxc1")
	ip("link", "set", "lxc1", "name", "gone1") // renamed out of them
	r.waitFor(t, "cali0", "cali2")
	ip("link", "set", "cali2", "name", "cali3") // still matching: follows the index
	mk("cali9")                                 // refused
	ip("link", "del", "cali0")
	r.waitFor(t, "cali2") // the handler knows it by its first name
	// The refused one is tried again at its next notification.
	r.mu.Lock()
	r.fail = ""
	r.mu.Unlock()
	ip("link", "set", "cali9", "up")
	r.waitFor(t, "cali2", "cali9")
	ip("link", "del", "cali9")
	r.waitFor(t, "cali2")
	if got := w.Attached(); len(got) != 1 {
		t.Errorf("watcher has %v attached", got)
	}
	for _, n := range w.Attached() {
		if n != "cali3" {
			t.Errorf("watcher knows the renamed interface as %q, want cali3", n)
		}
	}
}

// TestReconcile: after lost notifications the re-list brings the attached
// set back to what exists: a link whose deletion was missed goes Down, a
// link whose creation was missed comes Up.
func TestReconcile(t *testing.T) {
	p := netnstest.NewPair(t)
	if out, err := exec.Command("ip", "-n", p.NS, "link", "add", "lxc7", "type", "veth", "peer", "name", "prlxc7").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	r := &recorder{up: map[int]string{99999: "lxc-gone"}}
	w := &Watcher{patterns: []string{"lxc*"}, h: r, attached: map[int]string{99999: "lxc-gone"}}
	w.log = noLog()
	if err := p.Do(w.reconcile); err != nil {
		t.Fatal(err)
	}
	if got := r.names(); !slices.Equal(got, []string{"lxc7"}) {
		t.Errorf("after re-list: %v, want [lxc7]; events %v", got, r.events)
	}
	var idx int
	_ = p.Do(func() error {
		l, err := netlink.LinkByName("lxc7")
		if err == nil {
			idx = l.Attrs().Index
		}
		return err
	})
	if w.attached[idx] != "lxc7" || len(w.attached) != 1 {
		t.Errorf("watcher state %v", w.attached)
	}
}

func noLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
