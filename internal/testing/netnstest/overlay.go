package netnstest

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"
)

// Overlay is two namespace "nodes" joined by an underlay veth pair, with a
// tunnel device of the given kind in each: pods' traffic between them crosses
// the underlay encapsulated, as under Flannel (VXLAN on 8472), Calico (VXLAN
// or IP-in-IP) or Cilium (VXLAN or Geneve). Server is the node that is also
// joined to the test's namespace (its Pair, reachable at NSIP); Client is the
// other. Uplink is Server's underlay interface, where a node's capture sees
// the encapsulated packets. ServerIP and ClientIP are the overlay addresses.
type Overlay struct {
	Server *Pair
	Client *Pair
	Uplink string
	Kind   string

	ServerIP, ClientIP netip.Addr
	// Underlay is Server's address on the uplink: its tunnel endpoint.
	Underlay netip.Addr
}

// NewOverlay builds an overlay of kind "vxlan" (UDP 4789), "vxlan8472"
// (kernel vxlan devices), "geneve" (UDP 6081, Ethernet frames) or "ipip"
// (user-space endpoints, see userTunnel).
func NewOverlay(t testing.TB, kind string) *Overlay {
	t.Helper()
	srv := NewPair(t)
	id := srv.NSIP.As4()[2]
	cli := &Pair{NS: fmt.Sprintf("hsn%d-ov%d", os.Getpid(), seq.Add(1))}
	o := &Overlay{
		Server: srv, Client: cli, Uplink: "uplink", Kind: kind,
		ServerIP: netip.AddrFrom4([4]byte{10, 202, id, 2}),
		ClientIP: netip.AddrFrom4([4]byte{10, 202, id, 1}),
		Underlay: netip.AddrFrom4([4]byte{172, 31, id, 2}),
	}
	under := func(n byte) string { return fmt.Sprintf("172.31.%d.%d", id, n) }
	_ = exec.Command("ip", "netns", "del", cli.NS).Run()
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", cli.NS).Run() })
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	run("netns", "add", cli.NS)
	run("-n", srv.NS, "link", "add", "uplink", "type", "veth", "peer", "name", "uplink", "netns", cli.NS)
	for i, ns := range []string{cli.NS, srv.NS} {
		self, peer := under(byte(1+i)), under(byte(2-i))
		overlay := []netip.Addr{o.ClientIP, o.ServerIP}[i]
		run("-n", ns, "addr", "add", self+"/24", "dev", "uplink")
		run("-n", ns, "link", "set", "uplink", "up")
		run("-n", ns, "link", "set", "lo", "up")
		dev := "tun0"
		switch kind {
		case "vxlan":
			run("-n", ns, "link", "add", dev, "type", "vxlan", "id", "42", "remote", peer, "local", self, "dstport", "4789", "dev", "uplink")
		case "vxlan8472":
			run("-n", ns, "link", "add", dev, "type", "vxlan", "id", "42", "remote", peer, "local", self, "dstport", "8472", "dev", "uplink")
		case "geneve", "ipip":
			// In user space: kernels are often built without the geneve
			// and ipip devices; the packets on the uplink are the same.
			node := srv
			if i == 0 {
				node = cli
			}
			startUserTunnel(t, node, kind, dev, netip.MustParseAddr(self), netip.MustParseAddr(peer))
			run("-n", ns, "link", "set", dev, "mtu", "1400")
		default:
			t.Fatalf("overlay kind %q", kind)
		}
		run("-n", ns, "addr", "add", overlay.String()+"/24", "dev", dev)
		run("-n", ns, "link", "set", dev, "up")
	}
	return o
}

// StartRedis runs redis-server on the server node, listening on its
// overlay address, and waits until the client node reaches it.
func (o *Overlay) StartRedis(t testing.TB, port int) netip.AddrPort {
	t.Helper()
	Need(t, "redis-server")
	o.Server.Start(t, "redis-server", "--port", fmt.Sprint(port), "--bind", o.ServerIP.String(),
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(), "--protected-mode", "no")
	addr := netip.AddrPortFrom(o.ServerIP, uint16(port))
	var err error
	for range 100 {
		var out []byte
		out, err = o.Client.Command(t.Context(), "redis-cli", "-h", addr.Addr().String(), "-p", fmt.Sprint(port), "PING").CombinedOutput()
		if err == nil && string(out) == "PONG\n" {
			return addr
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redis on %s not reachable over the %s overlay: %v", addr, o.Kind, err)
	return addr
}
