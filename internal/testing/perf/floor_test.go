package perf

import (
	"errors"
	"fmt"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

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
	spec := &ebpf.ProgramSpec{
		Type:         ebpf.SchedCLS,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()}, // TCX_NEXT
	}
	if mode == "xdp" {
		spec.Type = ebpf.XDP
		spec.Instructions = asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()} // XDP_PASS
	}
	prog, err := ebpf.NewProgram(spec)
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
