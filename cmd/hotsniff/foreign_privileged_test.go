package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// markTOS is the IPv4 TOS byte the foreign program drops packets by.
const markTOS = 0x28

// foreignDropper is another agent's TC program: it drops IPv4 packets whose
// TOS is markTOS (TC_ACT_SHOT) and hands every other packet on
// (TC_ACT_UNSPEC, which is TCX_NEXT under TCX).
func foreignDropper(t *testing.T) *ebpf.Program {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "foreign_drop", Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.R1),
			asm.LoadAbs(14+1, asm.Byte), // IPv4 TOS after the Ethernet header
			asm.JEq.Imm(asm.R0, markTOS, "drop"),
			asm.Mov.Imm(asm.R0, -1),
			asm.Return(),
			asm.Mov.Imm(asm.R0, 2).WithSymbol("drop"),
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatalf("load foreign program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

// udpProbe sends n marked and n unmarked datagrams from the test's
// namespace to a listener in p's and returns how many of each arrived.
func udpProbe(t *testing.T, p *netnstest.Pair, n int) (marked, plain int) {
	t.Helper()
	var ln *net.UDPConn
	if err := p.Do(func() error {
		var err error
		ln, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.NSIP.AsSlice()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dst := ln.LocalAddr().(*net.UDPAddr)
	send := func(tos int, tag byte) {
		c, err := net.DialUDP("udp4", nil, dst)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		raw, _ := c.SyscallConn()
		_ = raw.Control(func(fd uintptr) {
			err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos)
		})
		if err != nil {
			t.Fatal(err)
		}
		for range n {
			if _, err := c.Write([]byte{tag}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(markTOS, 'm')
	send(0, 'p')
	buf := make([]byte, 16)
	for {
		_ = ln.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		k, _, err := ln.ReadFromUDP(buf)
		if err != nil {
			return marked, plain
		}
		if k == 1 && buf[0] == 'm' {
			marked++
		} else {
			plain++
		}
	}
}

// TestForeignProgramKeepsWorking: another agent's TC program that drops
// marked packets keeps dropping them, and lets the others through, with
// hotsniff attached in every mode: attached before hotsniff, then after it
// in the TCX chain (so hotsniff's verdict decides whether it runs at all),
// then as a classic clsact filter (which runs after every TCX program).
// hotsniff still counts its requests exactly.
func TestForeignProgramKeepsWorking(t *testing.T) {
	netnstest.RequireRoot(t)
	netnstest.Need(t, "redis-benchmark")
	netnstest.Need(t, "nsenter")
	p := netnstest.NewPair(t)
	port := testPorts(5)[4]
	srv := p.StartRedis(t, port)
	// Two instances: TCX takes a program once per hook.
	prog, prog2 := foreignDropper(t), foreignDropper(t)
	var ifindex int
	if err := p.Do(func() error {
		ifc, err := net.InterfaceByName(p.NSIface)
		if err == nil {
			ifindex = ifc.Index
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	attachTCX := func(t *testing.T, prog *ebpf.Program) link.Link {
		t.Helper()
		var l link.Link
		if err := p.Do(func() error {
			var err error
			l, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: ebpf.AttachTCXIngress})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return l
	}
	check := func(t *testing.T, where string) {
		t.Helper()
		const n = 50
		if m, pl := udpProbe(t, p, n); m != 0 || pl != n {
			t.Errorf("foreign program %s: %d of %d marked datagrams arrived (want 0), %d of %d unmarked (want all)", where, m, n, pl, n)
		}
	}
	for i, mode := range []string{"xdp", "tc", "afpacket", "cgroup"} {
		t.Run(mode, func(t *testing.T) {
			if _, ok := cgroupRoot(); mode == "cgroup" && !ok {
				netnstest.Skip(t, "no cgroup v2 hierarchy mounted")
			}
			first := attachTCX(t, prog)
			d := startNodeDaemon(t, p.NS, p.NSIP, "--iface", p.NSIface, "--capture", mode, "--port", fmt.Sprintf("redis=%d", port))
			check(t, "attached before hotsniff")

			// Now after hotsniff in the TCX chain.
			after := attachTCX(t, prog2)
			first.Close()
			check(t, "attached after hotsniff")
			after.Close()

			// A classic clsact filter, which runs once the TCX chain says next.
			qd := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}, QdiscType: "clsact"}
			f := &netlink.BpfFilter{
				FilterAttrs: netlink.FilterAttrs{LinkIndex: ifindex, Parent: netlink.HANDLE_MIN_INGRESS, Handle: 1, Protocol: unix.ETH_P_ALL, Priority: 7},
				Fd:          prog.FD(), Name: "foreign", DirectAction: true,
			}
			if err := p.Do(func() error {
				if err := netlink.QdiscReplace(qd); err != nil {
					return err
				}
				return netlink.FilterReplace(f)
			}); err != nil {
				t.Fatal(err)
			}
			check(t, "as a clsact filter")

			n := 20000 + 1024*i
			out, err := exec.CommandContext(context.Background(), "redis-benchmark", "-h", srv.Addr().String(), "-p", strconv.Itoa(port),
				"-n", strconv.Itoa(n), "-P", "16", "-c", "4", "-q", "GET", "hot:"+mode).CombinedOutput()
			if err != nil {
				t.Fatalf("redis-benchmark: %v: %s", err, out)
			}
			checkCounts(t, &d.daemonProc, float64(n))
			if err := d.stop(t, syscall.SIGTERM); err != nil {
				t.Errorf("exit: %v\n%s", err, d.log())
			}
			_ = p.Do(func() error { return netlink.QdiscDel(qd) })
			check2 := func() {
				// With hotsniff gone, the foreign program is alone again.
				first := attachTCX(t, prog)
				defer first.Close()
				check(t, "alone after hotsniff exited")
			}
			check2()
		})
	}
}
