package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// clsactFilters lists the hotsniff filters on the namespace interface as
// "direction pid prio" strings, from `tc filter show`.
func clsactFilters(t *testing.T, p *netnstest.Pair) []string {
	t.Helper()
	re := regexp.MustCompile(`pref (\d+) bpf .*hotsniff_\d+_(\d+)_\d+_(ingress|egress)`)
	var out []string
	for _, dir := range []string{"ingress", "egress"} {
		b, err := p.Command(context.Background(), "tc", "filter", "show", "dev", p.NSIface, dir).CombinedOutput()
		if err != nil {
			t.Fatalf("tc filter show: %v: %s", err, b)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			if m[3] != dir {
				t.Errorf("filter named %s on %s", m[3], dir)
			}
			out = append(out, fmt.Sprintf("%s pid %s prio %s", dir, m[2], m[1]))
		}
	}
	sort.Strings(out)
	return out
}

func pids(ds ...*daemonProc) []string {
	var out []string
	for _, d := range ds {
		out = append(out, strconv.Itoa(d.cmd.Process.Pid))
	}
	return out
}

// filtersOf checks the filters are exactly one per direction for each of
// the daemons, each with its own priority.
func filtersOf(t *testing.T, p *netnstest.Pair, ds ...*daemonProc) {
	t.Helper()
	got := clsactFilters(t, p)
	if len(got) != 2*len(ds) {
		t.Fatalf("filters %q, want one per direction for pids %v", got, pids(ds...))
	}
	prios := map[string]bool{}
	for _, pid := range pids(ds...) {
		for _, dir := range []string{"ingress", "egress"} {
			found := false
			for _, f := range got {
				var d, fp, prio string
				fmt.Sscanf(f, "%s pid %s prio %s", &d, &fp, &prio)
				if d == dir && fp == pid {
					found = true
					if prios[dir+prio] {
						t.Errorf("priority %s shared on %s: %q", prio, dir, got)
					}
					prios[dir+prio] = true
				}
			}
			if !found {
				t.Errorf("no %s filter of pid %s in %q", dir, pid, got)
			}
		}
	}
}

// gets sends n GETs and waits until every daemon counted exactly want.
func gets(t *testing.T, rc *redis.Client, n int, want float64, ds ...*daemonProc) {
	t.Helper()
	for i := range n {
		if err := rc.Get(context.Background(), "k"+strconv.Itoa(i%10)).Err(); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
	}
	const metric = `hotsniff_requests_total{op="GET",proto="redis"}`
	for i, d := range ds {
		if _, m := d.waitMetric(t, metric, want); m[metric] != want {
			t.Errorf("daemon %d (pid %d) counted %v GETs, want %v\n%s", i, d.cmd.Process.Pid, m[metric], want, d.log())
		}
	}
}

// TestClsactInstances forces the clsact path (kernels before 6.6) and runs
// several daemons on one interface: each captures every packet, one
// exiting leaves the other's filters in place, the filters a SIGKILLed one
// left are removed by the next start (it is provably dead) while a live
// one's stay, and nothing is left once all have exited.
func TestClsactInstances(t *testing.T) {
	netnstest.RequireRoot(t)
	netnstest.Need(t, "tc")
	netnstest.Need(t, "bpftool")
	t.Setenv("HOTSNIFF_FORCE_CLSACT", "1")
	p := netnstest.NewPair(t)
	cache := p.StartRedis(t, 6379)
	rc := redis.NewClient(&redis.Options{Addr: cache.String(), PoolSize: 1})
	defer rc.Close()
	c := &http.Client{Timeout: 5 * time.Second}
	start := func(port int) *daemonProc {
		return startDaemonOn(t, p, port, c, "http", "", "", "--capture", "tc", "--port", "redis=6379")
	}

	a := start(19475)
	b := start(19476)
	filtersOf(t, p, a, b)
	gets(t, rc, 1000, 1000, a, b)

	if err := b.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("second daemon exit: %v\n%s", err, b.log())
	}
	filtersOf(t, p, a)
	gets(t, rc, 500, 1500, a)

	// A SIGKILLed instance leaves its filters; the next start removes
	// them and only them.
	k := start(19477)
	gets(t, rc, 100, 1600, a)
	_ = k.stop(t, syscall.SIGKILL)
	filtersOf(t, p, a, k)
	d := start(19478)
	filtersOf(t, p, a, d)
	if !regexpMatch(`removed tc filter of a dead hotsniff.*pid=`+strconv.Itoa(k.cmd.Process.Pid), d.log()) {
		t.Errorf("no log line for the removed filters:\n%s", d.log())
	}
	gets(t, rc, 300, 1900, a)
	if _, m := d.waitMetric(t, `hotsniff_requests_total{op="GET",proto="redis"}`, 300); m[`hotsniff_requests_total{op="GET",proto="redis"}`] != 300 {
		t.Errorf("new daemon counted %v, want 300", m[`hotsniff_requests_total{op="GET",proto="redis"}`])
	}

	// As in Kubernetes, where every container has its own pid namespace:
	// an instance in another pid namespace (pid 1 there) is SIGKILLed; the
	// next start cannot look its pid up, but its liveness socket in the
	// shared network namespace is gone, so its filters go too. d, alive in
	// yet another pid namespace than the test's, keeps its own.
	unshare := netnstest.Need(t, "unshare")
	pk := startDaemonWrapped(t, p, []string{unshare, "--pid", "--fork", "--mount-proc", "--kill-child"}, 19480, c, "http", "", "", "--capture", "tc", "--port", "redis=6379")
	if got := clsactFilters(t, p); len(got) != 6 || len(slices.DeleteFunc(slices.Clone(got), func(f string) bool { return !strings.Contains(f, " pid 1 ") })) != 2 {
		t.Errorf("filters with the pid-namespaced instance: %q", got)
	}
	_ = pk.stop(t, syscall.SIGKILL)
	e := startDaemonWrapped(t, p, []string{unshare, "--pid", "--fork", "--mount-proc", "--kill-child"}, 19481, c, "http", "", "", "--capture", "tc", "--port", "redis=6379")
	if !regexpMatch(`removed tc filter of a dead hotsniff.*pid=1\b`, e.log()) {
		t.Errorf("filters of the killed pid-namespaced instance not removed:\n%s", e.log())
	}
	if got := clsactFilters(t, p); len(got) != 6 {
		t.Errorf("filters %q, want a's, d's and e's", got)
	}
	gets(t, rc, 200, 2100, a)
	// unshare ignores SIGTERM while it waits: the daemon (its child) gets it.
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", e.cmd.Process.Pid, e.cmd.Process.Pid))
	child, _ := strconv.Atoi(strings.TrimSpace(string(kids)))
	if err != nil || child == 0 {
		t.Fatalf("daemon under unshare: children %q: %v", kids, err)
	}
	syscall.Kill(child, syscall.SIGTERM)
	if err := e.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("exit: %v\n%s", err, e.log())
	}
	filtersOf(t, p, a, d)

	for _, x := range []*daemonProc{a, d} {
		if err := x.stop(t, syscall.SIGTERM); err != nil {
			t.Errorf("exit: %v\n%s", err, x.log())
		}
	}
	if got := clsactFilters(t, p); len(got) != 0 {
		t.Errorf("filters left: %q", got)
	}
	assertNothingAttached(t, p)
	out, _ := p.Command(context.Background(), "tc", "filter", "show", "dev", p.NSIface, "ingress").CombinedOutput()
	if len(out) != 0 {
		t.Errorf("tc filters left on ingress:\n%s", out)
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
