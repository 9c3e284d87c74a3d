package perf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// emptyProgram is a TCX program that returns TCX_NEXT and does nothing else.
// Its run_time_ns / run_cnt under the same traffic is the floor of the
// kernel's accounting on this machine: what bpf_stats itself costs (two
// clock reads per run) plus the dispatch, before any work of ours.
type emptyProgram struct {
	prog *ebpf.Program
	link link.Link
}

// attachEmpty attaches the empty program at mode's hook: TCX ingress for
// "tc", XDP (returning XDP_PASS) for "xdp".
func attachEmpty(p *netnstest.Pair, mode string) (*emptyProgram, error) {
	hook := "tc ingress"
	if mode == "xdp" {
		hook = "xdp"
	}
	prog, err := ebpf.NewProgram(emptySpec(hook))
	if err != nil {
		return nil, fmt.Errorf("load empty program: %w", err)
	}
	e := &emptyProgram{prog: prog}
	err = p.Do(func() error {
		ifi, err := net.InterfaceByName(p.NSIface)
		if err != nil {
			return err
		}
		if mode == "xdp" {
			e.link, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifi.Index})
			return err
		}
		e.link, err = link.AttachTCX(link.TCXOptions{Interface: ifi.Index, Program: prog, Attach: ebpf.AttachTCXIngress})
		return err
	})
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("attach empty program: %w", err)
	}
	return e, nil
}

// nsPerRun reads the program's accounting.
func (e *emptyProgram) nsPerRun() (float64, uint64, error) {
	st, err := e.prog.Stats()
	if err != nil {
		return 0, 0, err
	}
	if st.RunCount == 0 {
		return 0, 0, nil
	}
	return float64(st.Runtime.Nanoseconds()) / float64(st.RunCount), st.RunCount, nil
}

func (e *emptyProgram) close() error {
	err := e.link.Close()
	return errors.Join(err, e.prog.Close())
}

// The accounting floor of TestCostRatio. With kernel.bpf_stats_enabled the
// kernel reads the clock before and after every program run and adds the
// difference to run_time_ns; on this machine class (a KVM guest reading
// kvm-clock) that costs about 110 ns a run, more than many of our
// programs' own work per reply. Stats off, the cost does not exist, so
// hotsniff's CPU measured with them on overstates its programs by
// runs × floor. The floor arm measures that floor with empty programs on
// the hooks hotsniff's mode uses, through the same attach API, under the
// same load, in the same round.

// floorHooks is the hooks hotsniff attaches to in each eBPF mode
// (bpf.Capture.Attach: TC ingress and egress, or XDP and TC egress on a
// non-loopback device; bpf.Capture.AttachCgroup: cgroup_skb ingress and
// egress at the cgroup v2 root), named as hookOf names hotsniff's programs.
var floorHooks = map[string][]string{
	"tc":     {"tc ingress", "tc egress"},
	"xdp":    {"xdp", "tc egress"},
	"cgroup": {"cgroup ingress", "cgroup egress"},
}

// floorSet is an empty program attached on each of a mode's hooks.
type floorSet struct {
	p       *netnstest.Pair
	mode    string
	cgroup  string // cgroup mode: the hierarchy's root, where the daemon attaches
	progs   map[string]*ebpf.Program
	ids     map[string]ebpf.ProgramID
	links   []link.Link
	filters []*netlink.BpfFilter // legacy clsact, as hotsniff without TCX
	XDPMode string               // "driver" or "generic", as hotsniff's attach fell
	TCX     bool
}

// emptySpec is a program of hook's type that only returns the verdict
// that lets the packet go on: TC_ACT_UNSPEC (-1, as hotsniff's TC
// programs, and TCX_NEXT under TCX), XDP_PASS (2), or 1 (cgroup_skb:
// allow).
func emptySpec(hook string) *ebpf.ProgramSpec {
	spec := &ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL"}
	ret := int32(-1)
	switch hook {
	case "xdp":
		spec.Type, ret = ebpf.XDP, 2
	case "cgroup ingress", "cgroup egress":
		spec.Type, spec.AttachType, ret = ebpf.CGroupSKB, hookAttach(hook), 1
	}
	spec.Name = "floor_" + strings.NewReplacer("cgroup ", "cg_", "tc ", "tc_", "ingress", "in", "egress", "eg").Replace(hook)
	spec.Instructions = asm.Instructions{asm.Mov.Imm(asm.R0, ret), asm.Return()}
	return spec
}

// attachFloor loads an empty program for each of mode's hooks and attaches
// it where and how hotsniff attaches its own (bpf/loader.go, bpf/cgroup.go):
// TCX where the kernel has it and HOTSNIFF_FORCE_CLSACT is not 1, else a
// clsact filter; XDP in driver mode, else generic; cgroup_skb links on the
// cgroup v2 root.
func attachFloor(p *netnstest.Pair, mode string) (_ *floorSet, err error) {
	f := &floorSet{p: p, mode: mode, progs: map[string]*ebpf.Program{}, ids: map[string]ebpf.ProgramID{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.close())
		}
	}()
	for _, h := range floorHooks[mode] {
		prog, err := ebpf.NewProgram(emptySpec(h))
		if err != nil {
			return nil, fmt.Errorf("load empty %s program: %w", h, err)
		}
		f.progs[h] = prog
		info, err := prog.Info()
		if err != nil {
			return nil, fmt.Errorf("read empty %s program's info: %w", h, err)
		}
		f.ids[h], _ = info.ID()
	}
	if mode == "cgroup" {
		if f.cgroup, err = bpf.CgroupRoot(""); err != nil {
			return nil, err
		}
		for _, h := range floorHooks[mode] {
			l, err := link.AttachCgroup(link.CgroupOptions{Path: f.cgroup, Attach: hookAttach(h), Program: f.progs[h]})
			if err != nil {
				return nil, fmt.Errorf("attach empty %s program to %s: %w", h, f.cgroup, err)
			}
			f.links = append(f.links, l)
		}
		return f, nil
	}
	err = p.Do(func() error {
		l, err := netlink.LinkByName(p.NSIface)
		if err != nil {
			return err
		}
		for _, h := range floorHooks[mode] {
			if err := f.attachIface(l, h); err != nil {
				return fmt.Errorf("attach empty %s program to %s: %w", h, p.NSIface, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// hookAttach is the attach type of a TC or cgroup hook.
func hookAttach(hook string) ebpf.AttachType {
	switch hook {
	case "tc ingress":
		return ebpf.AttachTCXIngress
	case "tc egress":
		return ebpf.AttachTCXEgress
	case "cgroup ingress":
		return ebpf.AttachCGroupInetIngress
	case "cgroup egress":
		return ebpf.AttachCGroupInetEgress
	}
	return ebpf.AttachNone
}

// attachIface attaches the empty program of one TC or XDP hook to l, inside
// the namespace (p.Do).
func (f *floorSet) attachIface(l netlink.Link, hook string) error {
	prog := f.progs[hook]
	if hook == "xdp" {
		f.XDPMode = "driver"
		xl, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: l.Attrs().Index, Flags: link.XDPDriverMode})
		if err != nil {
			f.XDPMode = "generic"
			xl, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: l.Attrs().Index, Flags: link.XDPGenericMode})
		}
		if err != nil {
			return err
		}
		f.links = append(f.links, xl)
		return nil
	}
	if os.Getenv("HOTSNIFF_FORCE_CLSACT") != "1" {
		tl, err := link.AttachTCX(link.TCXOptions{Interface: l.Attrs().Index, Program: prog, Attach: hookAttach(hook)})
		if err == nil {
			f.TCX = true
			f.links = append(f.links, tl)
			return nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return err
		}
	}
	// Legacy TC, as bpf/clsact.go: the clsact qdisc if there is none and a
	// direct-action filter at a priority no other filter has.
	qd := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
	if err := netlink.QdiscAdd(qd); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add clsact qdisc: %w", err)
	}
	parent := uint32(netlink.HANDLE_MIN_INGRESS)
	if hook == "tc egress" {
		parent = netlink.HANDLE_MIN_EGRESS
	}
	fs, err := netlink.FilterList(l, parent)
	if err != nil {
		return fmt.Errorf("list tc filters: %w", err)
	}
	prio := uint16(1)
	for slices.ContainsFunc(fs, func(x netlink.Filter) bool { return x.Attrs().Priority == prio }) {
		prio++
	}
	flt := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: l.Attrs().Index, Parent: parent, Handle: 1, Protocol: unix.ETH_P_ALL, Priority: prio},
		Fd:          prog.FD(), Name: emptySpec(hook).Name, DirectAction: true,
	}
	if err := netlink.FilterAdd(flt); err != nil {
		return fmt.Errorf("add tc filter: %w", err)
	}
	f.filters = append(f.filters, flt)
	return nil
}

// stats is each hook's run count and run time so far.
func (f *floorSet) stats() (map[string]ebpf.ProgramStats, error) {
	out := map[string]ebpf.ProgramStats{}
	for h, prog := range f.progs {
		st, err := prog.Stats()
		if err != nil {
			return nil, fmt.Errorf("read %s program's stats: %w", h, err)
		}
		out[h] = *st
	}
	return out, nil
}

// close detaches and unloads the programs.
func (f *floorSet) close() error {
	var errs []error
	for _, l := range f.links {
		errs = append(errs, l.Close())
	}
	if len(f.filters) > 0 {
		errs = append(errs, f.p.Do(func() error {
			var errs []error
			for _, flt := range f.filters {
				if err := netlink.FilterDel(flt); err != nil {
					errs = append(errs, fmt.Errorf("delete tc filter: %w", err))
				}
			}
			return errors.Join(errs...)
		}))
	}
	for _, prog := range f.progs {
		errs = append(errs, prog.Close())
	}
	f.links, f.filters, f.progs = nil, nil, nil
	return errors.Join(errs...)
}

// attached lists which of the set's programs a hook still runs: TCX and
// XDP as the kernel reports them on the namespace's interface, clsact
// filters by name, cgroup_skb programs on the root. After close it must be
// empty (links go asynchronously: poll it).
func (f *floorSet) attached() ([]string, error) {
	var left []string
	if f.mode == "cgroup" {
		dir, err := os.Open(f.cgroup)
		if err != nil {
			return nil, err
		}
		defer dir.Close()
		for _, h := range floorHooks[f.mode] {
			r, err := link.QueryPrograms(link.QueryOptions{Target: int(dir.Fd()), Attach: hookAttach(h)})
			if err != nil {
				return nil, err
			}
			if slices.ContainsFunc(r.Programs, func(ap link.AttachedProgram) bool { return ap.ID == f.ids[h] }) {
				left = append(left, h)
			}
		}
		return left, nil
	}
	err := f.p.Do(func() error {
		l, err := netlink.LinkByName(f.p.NSIface)
		if err != nil {
			return err
		}
		for _, h := range floorHooks[f.mode] {
			if h == "xdp" {
				if x := l.Attrs().Xdp; x != nil && x.Attached && ebpf.ProgramID(x.ProgId) == f.ids[h] {
					left = append(left, h)
				}
				continue
			}
			r, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: hookAttach(h)})
			if err != nil {
				return err
			}
			if slices.ContainsFunc(r.Programs, func(ap link.AttachedProgram) bool { return ap.ID == f.ids[h] }) {
				left = append(left, h+" (tcx)")
			}
			parent := uint32(netlink.HANDLE_MIN_INGRESS)
			if h == "tc egress" {
				parent = netlink.HANDLE_MIN_EGRESS
			}
			fs, _ := netlink.FilterList(l, parent) // no clsact qdisc: no filter
			if slices.ContainsFunc(fs, func(x netlink.Filter) bool {
				b, ok := x.(*netlink.BpfFilter)
				return ok && b.Name == emptySpec(h).Name
			}) {
				left = append(left, h+" (clsact)")
			}
		}
		return nil
	})
	return left, err
}

// hookOf names the hook a program of hotsniff's runs on, as floorHooks
// does, from its type and name. The kernel keeps 15 characters of a name
// (hotsniff_cgroup_ingress and _egress both become hotsniff_cgroup); the
// library reads the full one from the program's BTF, and a name that says
// neither direction maps to no floor (lessFloor reports it missing).
func hookOf(prog *ebpf.Program, info *ebpf.ProgramInfo) string {
	name := info.Name
	dir := "ingress"
	if strings.Contains(name, "egr") {
		dir = "egress"
	}
	switch prog.Type() {
	case ebpf.XDP:
		return "xdp"
	case ebpf.SchedCLS:
		return "tc " + dir
	case ebpf.CGroupSKB:
		if !strings.Contains(name, "ingress") && !strings.Contains(name, "egress") {
			return "cgroup ?" // a name that says neither: no floor applies
		}
		return "cgroup " + dir
	}
	return prog.Type().String()
}

// lessFloor is the run time to take off a process's programs' accounted
// time: each hook's runs between a and b times that hook's floor in ns.
// missing names the hooks that ran without a floor measured for them.
func lessFloor(a, b map[string]ebpf.ProgramStats, floor map[string]float64) (sub time.Duration, missing []string) {
	var ns float64
	for h, y := range b {
		n := y.RunCount - a[h].RunCount
		if n == 0 {
			continue
		}
		f, ok := floor[h]
		if !ok {
			missing = append(missing, h)
			continue
		}
		ns += float64(n) * f
	}
	slices.Sort(missing)
	return time.Duration(ns), missing
}

// floorArm is TestCostRatio's floor arm: no hotsniff, an empty program on
// each of mode's hooks instead, under the arms' load (n GETs at pipeline
// pipe). It returns each hook's ns per run and runs, and the empty
// programs' run time and redis-server's CPU seconds over the load. The
// programs must be gone from every hook afterwards.
func floorArm(t *testing.T, p *netnstest.Pair, srv netip.AddrPort, redisPID int, mode string, n, pipe int) (ns map[string]float64, runs map[string]uint64, bpfTime time.Duration, redis float64, how string) {
	t.Helper()
	f, err := attachFloor(p, mode)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close() // on Fatal; a second close does nothing
	how = "cgroup_skb links on " + f.cgroup
	if mode != "cgroup" {
		how = "clsact filters"
		if f.TCX {
			how = "TCX links"
		}
		if f.XDPMode != "" {
			how += ", XDP " + f.XDPMode
		}
	}
	s0, err := f.stats()
	if err != nil {
		t.Fatal(err)
	}
	r0 := procCPU(t, redisPID)
	benchmark(t, srv, n, pipe)
	r1 := procCPU(t, redisPID)
	s1, err := f.stats()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.close(); err != nil {
		t.Fatalf("detach empty programs: %v", err)
	}
	// Links are released asynchronously after the last fd closes.
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if left, err = f.attached(); err != nil {
			t.Fatalf("query attached programs: %v", err)
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Fatalf("%s floor: empty programs still attached after detach: %v", mode, left)
	}
	ns, runs = map[string]float64{}, map[string]uint64{}
	for h, y := range s1 {
		d := y.RunCount - s0[h].RunCount
		if d == 0 {
			t.Errorf("%s -P %d floor: the empty %s program never ran", mode, pipe, h)
			continue
		}
		rt := y.Runtime - s0[h].Runtime
		ns[h], runs[h] = float64(rt.Nanoseconds())/float64(d), d
		bpfTime += rt
	}
	return ns, runs, bpfTime, r1 - r0, how
}

// floorList formats a floor arm's hooks: runs × ns per run.
func floorList(ns map[string]float64, runs map[string]uint64) string {
	var parts []string
	for h, v := range ns {
		parts = append(parts, fmt.Sprintf("%s %d runs × %.1f ns", h, runs[h], v))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// floorTaken formats what lessFloor takes off: each hook's runs × floor.
func floorTaken(a, b map[string]ebpf.ProgramStats, floor map[string]float64) string {
	var parts []string
	for h, y := range b {
		if n := y.RunCount - a[h].RunCount; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d runs × %.1f ns", h, n, floor[h]))
		}
	}
	if len(parts) == 0 {
		return "no program runs"
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// TestFloorAttach checks the floor arm's bookkeeping without load: attached
// on each of a mode's hooks, attachFloor's programs are all found there,
// and after close none is, so TestCostRatio's check after each floor arm
// can fail.
func TestFloorAttach(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	for _, mode := range []string{"tc", "xdp", "cgroup"} {
		t.Run(mode, func(t *testing.T) {
			f, err := attachFloor(p, mode)
			if err != nil {
				t.Fatal(err)
			}
			defer f.close()
			left, err := f.attached()
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != len(floorHooks[mode]) {
				t.Errorf("attached: found %v, want one for each of %v", left, floorHooks[mode])
			}
			if err := f.close(); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				if left, err = f.attached(); err != nil {
					t.Fatal(err)
				}
				if len(left) == 0 || time.Now().After(deadline) {
					break
				}
			}
			if len(left) > 0 {
				t.Errorf("after close: %v still attached", left)
			}
		})
	}
}

// TestLessFloor checks the sum TestCostRatio takes off: each hook's runs
// between the two readings times its floor, and a hook that ran without a
// floor reported rather than taken as 0.
func TestLessFloor(t *testing.T) {
	a := map[string]ebpf.ProgramStats{"tc ingress": {RunCount: 10}, "tc egress": {RunCount: 5}}
	b := map[string]ebpf.ProgramStats{"tc ingress": {RunCount: 1010}, "tc egress": {RunCount: 505}, "xdp": {RunCount: 7}, "cgroup ?": {}}
	sub, missing := lessFloor(a, b, map[string]float64{"tc ingress": 120, "tc egress": 100.5})
	if want := time.Duration(1000*120 + 500*100.5); sub != want {
		t.Errorf("taken off %v, want %v", sub, want)
	}
	if !slices.Equal(missing, []string{"xdp"}) {
		t.Errorf("missing %v, want [xdp]", missing)
	}
}
