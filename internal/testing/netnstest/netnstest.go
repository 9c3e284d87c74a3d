// Package netnstest builds throwaway network namespaces joined to the test's
// namespace by a veth pair, and runs cache servers inside them, so capture
// tests see real kernel traffic on an interface of their own. Everything is
// removed in t.Cleanup, also when the test fails.
package netnstest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// Skip skips the test, except under CI=true where the capability the test
// needs is expected to be there, so a skip would hide a broken setup.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but "+format, args...)
	}
	t.Skipf(format, args...)
}

// RequireRoot skips (or fails, under CI) a test that needs root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "test needs root (CAP_NET_ADMIN, CAP_BPF)")
	}
}

// RequireCPUs skips (or fails under CI) a test that needs n CPUs to run on,
// such as one that writes to several per-CPU rings from pinned threads.
func RequireCPUs(t testing.TB, n int) {
	t.Helper()
	if c := runtime.NumCPU(); c < n {
		Skip(t, "test needs %d CPUs, has %d", n, c)
	}
}

// Need returns the path of bin, skipping (or failing under CI) if missing.
func Need(t testing.TB, bin string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		Skip(t, "%s not installed", bin)
	}
	return p
}

// Pair is a network namespace joined to the caller's by a veth pair. The
// server side (NS, NSIface, NSIP) is inside the namespace; the client side
// (HostIface, HostIP) stays in the namespace the test runs in.
type Pair struct {
	NS        string
	NSIface   string
	HostIface string
	NSIP      netip.Addr // 10.199.N.1
	HostIP    netip.Addr // 10.199.N.2
	NSIP6     netip.Addr // fd00:199:N::1
	HostIP6   netip.Addr // fd00:199:N::2
}

var seq atomic.Uint32

// NewPair creates a namespace and a veth pair with IPv4 and IPv6 addresses
// on a /24 and /64 private to them. The names embed the pid so parallel test
// binaries do not collide.
func NewPair(t testing.TB) *Pair {
	t.Helper()
	RequireRoot(t)
	Need(t, "ip")
	n := seq.Add(1)
	id := freeSubnet(os.Getpid()*7 + int(n))
	p := &Pair{
		NS:        fmt.Sprintf("hsn%d-%d", os.Getpid(), n),
		NSIface:   fmt.Sprintf("hsn%ds", id),
		HostIface: fmt.Sprintf("hsn%dc", id),
		NSIP:      netip.AddrFrom4([4]byte{10, 199, byte(id), 1}),
		HostIP:    netip.AddrFrom4([4]byte{10, 199, byte(id), 2}),
		NSIP6:     netip.MustParseAddr(fmt.Sprintf("fd00:199:%x::1", id)),
		HostIP6:   netip.MustParseAddr(fmt.Sprintf("fd00:199:%x::2", id)),
	}
	// Stale leftovers of a crashed run with the same names go first.
	_ = exec.Command("ip", "netns", "del", p.NS).Run()
	_ = exec.Command("ip", "link", "del", p.HostIface).Run()
	t.Cleanup(func() {
		// Deleting the namespace kills its veth end, which takes the
		// peer with it; the explicit delete covers a half-built pair.
		_ = exec.Command("ip", "netns", "del", p.NS).Run()
		_ = exec.Command("ip", "link", "del", p.HostIface).Run()
	})
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	run("netns", "add", p.NS)
	run("link", "add", p.HostIface, "type", "veth", "peer", "name", p.NSIface, "netns", p.NS)
	run("addr", "add", p.HostIP.String()+"/24", "dev", p.HostIface)
	run("-6", "addr", "add", p.HostIP6.String()+"/64", "dev", p.HostIface, "nodad")
	run("link", "set", p.HostIface, "up")
	run("-n", p.NS, "addr", "add", p.NSIP.String()+"/24", "dev", p.NSIface)
	run("-n", p.NS, "-6", "addr", "add", p.NSIP6.String()+"/64", "dev", p.NSIface, "nodad")
	run("-n", p.NS, "link", "set", p.NSIface, "up")
	run("-n", p.NS, "link", "set", "lo", "up")
	return p
}

// freeSubnet picks N for 10.199.N.0/24 that no interface of this namespace
// uses yet, so concurrent test binaries on one host keep apart.
func freeSubnet(start int) int {
	used := map[byte]bool{}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			if ip := pfx.Addr(); ip.Is4() && ip.As4()[0] == 10 && ip.As4()[1] == 199 {
				used[ip.As4()[2]] = true
			}
		}
	}
	for i := range 250 {
		if id := (start + i) % 250; !used[byte(id)] {
			return id
		}
	}
	return start % 250
}

// Command returns a command that runs name inside the namespace.
func (p *Pair) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", p.NS, name}, args...)...)
}

// Start starts name inside the namespace; it is killed in t.Cleanup.
func (p *Pair) Start(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := p.Command(context.Background(), name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s in %s: %v", name, p.NS, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// Do runs fn with the calling goroutine's thread inside the namespace, for
// netlink calls, sockets and BPF attachments that act on the current netns.
// Sockets and links created inside stay in the namespace afterwards.
func (p *Pair) Do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(p.NS)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", p.NS, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return fmt.Errorf("enter netns %s: %w", p.NS, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// The thread is in the wrong namespace: let it die with the
		// goroutine instead of returning it to the pool.
		runtime.Goexit()
	}
	return ferr
}

// StartRedis runs redis-server inside the namespace on port (6379 if 0),
// listening on every address, and waits until it answers PING from the host
// side. It returns the server address as the client sees it.
func (p *Pair) StartRedis(t testing.TB, port int, extra ...string) netip.AddrPort {
	t.Helper()
	Need(t, "redis-server")
	if port == 0 {
		port = 6379
	}
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "* -::*",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(), "--protected-mode", "no"}, extra...)
	p.Start(t, "redis-server", args...)
	addr := netip.AddrPortFrom(p.NSIP, uint16(port))
	waitFor(t, addr, "PING\r\n", '+')
	return addr
}

// StartMemcached runs memcached inside the namespace on port (11211 if 0).
func (p *Pair) StartMemcached(t testing.TB, port int) netip.AddrPort {
	t.Helper()
	Need(t, "memcached")
	if port == 0 {
		port = 11211
	}
	p.Start(t, "memcached", "-p", strconv.Itoa(port), "-U", "0", "-m", "64", "-u", "root")
	addr := netip.AddrPortFrom(p.NSIP, uint16(port))
	waitFor(t, addr, "version\r\n", 'V')
	return addr
}

func waitFor(t testing.TB, addr netip.AddrPort, probe string, want byte) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr.String(), 200*time.Millisecond)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			_, _ = c.Write([]byte(probe))
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err == nil && len(line) > 0 && line[0] == want {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("server at %s did not come up", addr)
}
