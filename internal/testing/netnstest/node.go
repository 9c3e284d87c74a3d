package netnstest

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
)

// Node is a network namespace standing for a Kubernetes node: joined to the
// test's namespace by a veth pair (its Pair: the node is NS, reachable at
// NSIP) and holding a bridge that pods attach to, as the bridge CNI plugin
// (and Flannel, kindnet) does.
type Node struct {
	*Pair
	Bridge  string
	Gateway netip.Addr // the bridge's address, pods' default route
	pods    atomic.Uint32
}

// Pod is a network namespace on a Node's bridge: its eth0 is a veth whose
// host side (HostIface, "veth<N>") is in the node's namespace. As a Pair
// (NS, NSIP) it runs servers with StartRedis and code with Do.
type Pod struct {
	*Pair
	Node      *Node
	HostIface string
	procs     []*exec.Cmd
	deleted   bool
}

// NewNode creates a node namespace with bridge "cbr0" on 10.201.N.0/24.
func NewNode(t testing.TB) *Node {
	t.Helper()
	p := NewPair(t)
	n := &Node{Pair: p, Bridge: "cbr0"}
	id := p.NSIP.As4()[2]
	n.Gateway = netip.AddrFrom4([4]byte{10, 201, id, 1})
	n.ip(t, "link", "add", n.Bridge, "type", "bridge")
	n.ip(t, "addr", "add", n.Gateway.String()+"/24", "dev", n.Bridge)
	n.ip(t, "link", "set", n.Bridge, "up")
	// The test's namespace reaches the pods through the node.
	if out, err := exec.Command("ip", "netns", "exec", n.NS, "sysctl", "-qw", "net.ipv4.ip_forward=1").CombinedOutput(); err != nil {
		t.Fatalf("enable forwarding in %s: %v: %s", n.NS, err, out)
	}
	if out, err := exec.Command("ip", "route", "replace", n.PodCIDR().String(), "via", p.NSIP.String()).CombinedOutput(); err != nil {
		t.Fatalf("route to pods: %v: %s", err, out)
	}
	return n
}

// PodCIDR is the pods' subnet.
func (n *Node) PodCIDR() netip.Prefix { return netip.PrefixFrom(n.Gateway, 24).Masked() }

func (n *Node) ip(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", n.NS}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s %v: %v: %s", n.NS, args, err, out)
	}
}

// AddPod creates a pod namespace on the node's bridge with the next free
// address (10.201.N.10 upwards; at most 240 live pods per node, and pod
// numbers are not reused so addresses cycle). It is deleted in t.Cleanup
// unless Delete ran first.
func (n *Node) AddPod(t testing.TB) *Pod {
	t.Helper()
	k := n.pods.Add(1)
	host := fmt.Sprintf("veth%d", k)
	id := n.NSIP.As4()[2]
	p := &Pod{
		Pair: &Pair{
			NS:        fmt.Sprintf("%s-p%d", n.NS, k),
			NSIface:   "eth0",
			HostIface: host,
			NSIP:      netip.AddrFrom4([4]byte{10, 201, id, byte(10 + (k-1)%240)}),
			HostIP:    n.Gateway,
		},
		Node:      n,
		HostIface: host,
	}
	_ = exec.Command("ip", "netns", "del", p.NS).Run()
	t.Cleanup(func() { p.Delete() })
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	run("netns", "add", p.NS)
	run("-n", n.NS, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", p.NS)
	run("-n", n.NS, "link", "set", host, "master", n.Bridge, "up")
	run("-n", p.NS, "addr", "add", p.NSIP.String()+"/24", "dev", "eth0")
	run("-n", p.NS, "link", "set", "eth0", "up")
	run("-n", p.NS, "link", "set", "lo", "up")
	run("-n", p.NS, "route", "add", "default", "via", n.Gateway.String())
	return p
}

// StartProc starts name in the pod; Delete kills it (a namespace with a
// process in it outlives `ip netns del`, and so would its veth).
func (p *Pod) StartProc(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := p.Command(t.Context(), name, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s in %s: %v", name, p.NS, err)
	}
	p.procs = append(p.procs, cmd)
	return cmd
}

// Delete kills the pod's processes and deletes its namespace, which takes
// the veth pair (and the node-side interface) with it.
func (p *Pod) Delete() {
	if p.deleted {
		return
	}
	p.deleted = true
	for _, c := range p.procs {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	_ = exec.Command("ip", "netns", "del", p.NS).Run()
}
