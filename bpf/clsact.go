package bpf

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Legacy TC attachment (kernels before 6.6, without TCX): a clsact qdisc
// and one direct-action bpf filter per direction. Unlike a bpf_link such a
// filter belongs to nobody: it outlives a SIGKILLed process, and another
// process can replace or delete it. So that several hotsniff instances on
// one interface (two daemons, a daemon and a test, an old pod and its
// replacement) never undo each other:
//
//   - each instance adds its filters with a priority no other filter on
//     that hook has (the lowest free one, so a lone instance is first in
//     line), never replacing an existing filter;
//   - each filter is named after its instance: pid namespace, pid and
//     process start time;
//   - on exit an instance deletes its own filters only;
//   - at start it deletes the filters of instances that are provably dead
//     (their liveness socket, below, is gone; in our pid namespace, also
//     their pid), and leaves every other filter alone.
//
// The programs return TC_ACT_UNSPEC, which passes the packet on to the next
// filter, so every instance sees every packet.

// forceClsact makes TC attachments use clsact filters even where TCX
// exists (HOTSNIFF_FORCE_CLSACT=1): to test, on a new kernel, the path that
// kernels before 6.6 take, and to troubleshoot.
var forceClsact = os.Getenv("HOTSNIFF_FORCE_CLSACT") == "1"

// filterPrefix starts the names of our clsact filters.
const filterPrefix = "hotsniff_"

// ethPAll is ETH_P_ALL in host order: the netlink package swaps it to the
// network order tc wants (0x0300 here would match protocol 0x0300, i.e.
// nothing).
const ethPAll = unix.ETH_P_ALL

// instance identifies this process among the ones that may share the
// interface: pid namespace inode, pid and start time (clock ticks since
// boot), so a recycled pid is not mistaken for us.
type instance struct {
	pidNS, pid, start uint64
}

var self = sync.OnceValues(func() (instance, error) {
	pidNS, err := pidNamespace()
	if err != nil {
		return instance{}, err
	}
	pid := uint64(os.Getpid())
	start, err := procStart(pid)
	if err != nil {
		return instance{}, err
	}
	return instance{pidNS, pid, start}, nil
})

// filterName is the name of an instance's filter for one direction.
func (i instance) filterName(dir string) string {
	return fmt.Sprintf("%s%d_%d_%d_%s", filterPrefix, i.pidNS, i.pid, i.start, dir)
}

// parseFilterName returns the instance a filter name belongs to; ok is
// false for names of other programs and of hotsniff versions that did not
// name their instance.
func parseFilterName(name string) (i instance, ok bool) {
	rest, found := strings.CutPrefix(name, filterPrefix)
	if !found {
		return i, false
	}
	f := strings.Split(rest, "_")
	if len(f) != 4 {
		return i, false
	}
	var err [3]error
	i.pidNS, err[0] = strconv.ParseUint(f[0], 10, 64)
	i.pid, err[1] = strconv.ParseUint(f[1], 10, 64)
	i.start, err[2] = strconv.ParseUint(f[2], 10, 64)
	if errors.Join(err[:]...) != nil {
		return instance{}, false
	}
	return i, true
}

func pidNamespace() (uint64, error) {
	l, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return 0, fmt.Errorf("read pid namespace: %w", err)
	}
	// "pid:[4026531836]"
	n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(l, "pid:["), "]"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse pid namespace %q: %w", l, err)
	}
	return n, nil
}

// procStart is the start time of pid (field 22 of /proc/PID/stat).
func procStart(pid uint64) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(pid, 10) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields that follow start after its last ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// Liveness across pid namespaces. In Kubernetes every container has its
// own pid namespace, so a replacement pod cannot look up the pid of the one
// that was killed. What the instances do share is the network namespace
// (the filters are on its interfaces), and abstract unix socket names are
// scoped by network namespace: each instance binds one named after itself
// before it adds a filter and holds it until it exits, when the kernel
// frees the name. A filter whose owner's name refuses connections has no
// live owner.

// livenessName is the abstract socket name of an instance.
func (i instance) livenessName() string { return "@" + i.filterName("alive") }

var (
	livenessMu sync.Mutex
	liveness   = map[string]net.Listener{} // by network namespace
)

// holdLiveness binds this instance's liveness socket in the calling
// thread's network namespace, once; it stays bound until the process exits.
func holdLiveness(me instance) error {
	ns, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		return fmt.Errorf("read network namespace: %w", err)
	}
	livenessMu.Lock()
	defer livenessMu.Unlock()
	if liveness[ns] != nil {
		return nil
	}
	l, err := net.Listen("unix", me.livenessName())
	if err != nil {
		return fmt.Errorf("bind liveness socket %s: %w", me.livenessName(), err)
	}
	liveness[ns] = l
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return nil
}

// stale reports whether the instance that added a filter is provably
// gone: nothing holds its liveness socket in this network namespace
// (connecting is refused), and, when it ran in our pid namespace, its pid
// is free or belongs to a process started at another time. Any other
// answer (a connection, a timeout, an error) keeps the filter.
func (i instance) stale() bool {
	me, err := self()
	if err != nil || i == me {
		return false
	}
	if i.pidNS == me.pidNS {
		start, err := procStart(i.pid)
		if err == nil && start == i.start {
			return false // alive here, whatever its socket says
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
	c, err := net.DialTimeout("unix", i.livenessName(), time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, unix.ECONNREFUSED)
}

func (a *Attachment) attachClsact(l netlink.Link, dir ebpf.AttachType, prog *ebpf.Program) error {
	me, err := self()
	if err == nil {
		err = holdLiveness(me)
	}
	if err != nil {
		return fmt.Errorf("add tc filter to %s: %w", a.Iface, err)
	}
	// Add the qdisc if there is none; an existing one (ours from before,
	// or another program's) is kept with its filters.
	qd := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
	if err := netlink.QdiscAdd(qd); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add clsact qdisc to %s: %w", a.Iface, err)
	}
	parent, dirName := uint32(netlink.HANDLE_MIN_INGRESS), "ingress"
	if dir == ebpf.AttachTCXEgress {
		parent, dirName = netlink.HANDLE_MIN_EGRESS, "egress"
	}
	// Another instance may take the same free priority at the same time:
	// the kernel refuses the second add (it never replaces), and the loser
	// picks again.
	for attempt := 0; ; attempt++ {
		prio, err := freePriority(l, parent)
		if err != nil {
			return fmt.Errorf("add tc filter to %s: %w", a.Iface, err)
		}
		f := &netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{
				LinkIndex: l.Attrs().Index, Parent: parent, Handle: 1,
				Protocol: ethPAll, Priority: prio,
			},
			Fd: prog.FD(), Name: me.filterName(dirName), DirectAction: true,
		}
		err = netlink.FilterAdd(f)
		if err == nil {
			a.filters = append(a.filters, f)
			return nil
		}
		if attempt == 7 || !(errors.Is(err, unix.EEXIST) || errors.Is(err, unix.EINVAL)) {
			return fmt.Errorf("add tc filter to %s (%s, priority %d): %w", a.Iface, dirName, prio, err)
		}
	}
}

// freePriority is the lowest filter priority no filter on the hook uses.
func freePriority(l netlink.Link, parent uint32) (uint16, error) {
	fs, err := netlink.FilterList(l, parent)
	if err != nil {
		return 0, fmt.Errorf("list tc filters: %w", err)
	}
	used := map[uint16]bool{}
	for _, f := range fs {
		used[f.Attrs().Priority] = true
	}
	for p := uint16(1); p != 0; p++ {
		if !used[p] {
			return p, nil
		}
	}
	return 0, errors.New("list tc filters: every priority is in use")
}

// removeStaleFilters deletes the clsact filters of hotsniff instances that
// are provably dead (SIGKILLed: a netlink filter, unlike a bpf_link,
// outlives its process). Filters of live instances, of other pid
// namespaces and of older versions are left, with a log line for the last.
func removeStaleFilters(l netlink.Link, log *slog.Logger) error {
	var errs []error
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, err := netlink.FilterList(l, parent)
		if err != nil {
			continue // no clsact qdisc: nothing of ours
		}
		for _, f := range fs {
			bf, ok := f.(*netlink.BpfFilter)
			if !ok || !strings.HasPrefix(bf.Name, filterPrefix) {
				continue
			}
			inst, ok := parseFilterName(bf.Name)
			if !ok {
				dir := "ingress"
				if parent == netlink.HANDLE_MIN_EGRESS {
					dir = "egress"
				}
				log.Warn("tc filter of an older hotsniff left in place; remove it if no such process runs",
					"iface", l.Attrs().Name, "filter", bf.Name,
					"remove", fmt.Sprintf("tc filter del dev %s %s prio %d", l.Attrs().Name, dir, bf.Priority))
				continue
			}
			if !inst.stale() {
				continue
			}
			if err := netlink.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("delete filter %s: %w", bf.Name, err))
				continue
			}
			log.Info("removed tc filter of a dead hotsniff", "iface", l.Attrs().Name, "filter", bf.Name, "pid", inst.pid)
		}
	}
	return errors.Join(errs...)
}
