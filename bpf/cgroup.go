package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Cgroup v2 mount points, in the order they are tried: the unified
// hierarchy of a pure v2 host, and the one of a hybrid (v1 + v2) host.
var cgroupRoots = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}

// ErrNoCgroup2 says no cgroup v2 hierarchy is mounted where it was looked for.
var ErrNoCgroup2 = errors.New("no cgroup v2 hierarchy mounted")

// CgroupRoot returns the cgroup v2 mount to attach to: path if it is one, or
// the first of /sys/fs/cgroup and /sys/fs/cgroup/unified that is, when path
// is empty. A DaemonSet mounts the host's hierarchy somewhere of its own and
// passes that path.
func CgroupRoot(path string) (string, error) {
	try := cgroupRoots
	if path != "" {
		// A host's /sys/fs/cgroup mounted into a container: on a hybrid
		// host the v2 hierarchy is its unified directory.
		try = []string{path, filepath.Join(path, "unified")}
	}
	for _, p := range try {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return p, nil
		}
	}
	if path != "" {
		return "", fmt.Errorf("find cgroup v2 at %s: %w", path, ErrNoCgroup2)
	}
	return "", fmt.Errorf("find cgroup v2 at %s or %s: %w", cgroupRoots[0], cgroupRoots[1], ErrNoCgroup2)
}

// AttachCgroup captures every socket's traffic on the host with cgroup_skb
// ingress and egress programs attached to the cgroup v2 hierarchy at path
// (found by CgroupRoot when empty). Attached to the root, they run for
// every cgroup below it, so every pod, hostNetwork process and loopback
// connection is seen, once per socket end, after any tunnel is decapsulated,
// without following interfaces. The attachments are bpf_links: they leave
// with the process, and programs other agents attach to the same cgroups
// (multi-attach) still run.
//
// A packet between two sockets of this host (loopback, pod to pod) passes
// the sender's egress and the receiver's ingress: both copies carry the
// same flow and sequence numbers and the stream layer counts the bytes once.
func (c *Capture) AttachCgroup(path string) (*Attachment, error) {
	root, err := CgroupRoot(path)
	if err != nil {
		return nil, err
	}
	a := &Attachment{Iface: "cgroup:" + root, Mode: ModeCgroup}
	if err := c.loadCgroup(&a.objs); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		prog   *ebpf.Program
		attach ebpf.AttachType
	}{
		{a.objs.HotsniffCgroupIngress, ebpf.AttachCGroupInetIngress},
		{a.objs.HotsniffCgroupEgress, ebpf.AttachCGroupInetEgress},
	} {
		l, err := link.AttachCgroup(link.CgroupOptions{Path: root, Attach: p.attach, Program: p.prog})
		if err != nil {
			a.close()
			if errors.Is(err, os.ErrPermission) {
				return nil, fmt.Errorf("attach cgroup_skb to %s: %w (needs CAP_BPF and CAP_NET_ADMIN, or CAP_SYS_ADMIN)", root, err)
			}
			return nil, fmt.Errorf("attach cgroup_skb to %s: %w", root, err)
		}
		a.links = append(a.links, l)
	}
	c.log.Info("capture attached", "cgroup", root, "mode", ModeCgroup,
		"rings", c.fullRings, "ring_bytes", c.cfg.RingSize, "offline_cpu_rings", len(c.ring)-c.fullRings)
	c.mu.Lock()
	c.ifaces = append(c.ifaces, a)
	c.mu.Unlock()
	return a, nil
}

// CgroupMounted reports whether a cgroup v2 hierarchy is where CgroupRoot
// looks, for mode auto.
func CgroupMounted() (string, bool) {
	root, err := CgroupRoot("")
	return filepath.Clean(root), err == nil
}
