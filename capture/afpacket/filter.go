package afpacket

import (
	"fmt"

	"golang.org/x/net/bpf"

	"github.com/hotsniff/hotsniff/capture"
)

// Filter assembles the classic BPF program the kernel runs on every packet
// before it reaches the ring: accept Ethernet frames carrying TCP with a
// source or destination port in ports, over IPv4 (non-fragment or first
// fragment) or IPv6 (TCP as the first next header), with or without one
// 802.1Q/802.1ad tag, directly or inside one overlay tunnel (VXLAN on UDP
// 4789 or 8472, Geneve on 6081, IP-in-IP, IPv6-in-IP), the ports then being
// the inner segment's; accept up to snaplen bytes. Everything else never
// leaves the kernel, so it costs no ring space.
func Filter(ports []uint16, snaplen uint32) ([]bpf.RawInstruction, error) {
	return FilterDecap(ports, capture.DecapStandard, snaplen)
}

// FilterDecap is Filter passing only the tunnels d follows (nil: none): a
// datagram to any other UDP port stays in the kernel. The addresses and
// VNIs d checks are left to user space (capture.ParsePacketDecap).
func FilterDecap(ports []uint16, d *capture.Decap, snaplen uint32) ([]bpf.RawInstruction, error) {
	var a asm
	vxlanPorts, genevePorts := d.Ports(capture.TunnelVXLAN), d.Ports(capture.TunnelGeneve)
	if len(vxlanPorts)+len(genevePorts) > maxTunnelPorts {
		return nil, fmt.Errorf("assemble filter: %d tunnel ports, at most %d", len(vxlanPorts)+len(genevePorts), maxTunnelPorts)
	}
	// X is the offset, minus 14, of the header being looked at: 0 or 4
	// (a VLAN tag) for the outer IP header; then each step moves it on,
	// so every section reads its header at X+14.
	a.op(bpf.LoadConstant{Dst: bpf.RegX, Val: 0})
	a.op(bpf.LoadAbsolute{Off: 12, Size: 2})
	a.jeq(0x8100, "vlan", "")
	a.jeq(0x88a8, "vlan", "etype")
	a.label("vlan")
	a.op(bpf.LoadConstant{Dst: bpf.RegX, Val: 4})
	a.op(bpf.LoadIndirect{Off: 12, Size: 2})
	a.label("etype")
	a.jeq(0x0800, "ip4", "")
	a.jeq(0x86dd, "ip6", "drop")

	// l4 dispatches on the IP protocol in A, with X at the IP payload.
	l4 := func() {
		a.jeq(6, "ports", "")
		a.jeq(17, "udp", "")
		if d.IPIP() {
			a.jeq(4, "in4", "")
			a.jeq(41, "in6", "drop")
		} else {
			a.ja("drop")
		}
	}
	a.label("ip4")
	a.op(bpf.LoadIndirect{Off: 23, Size: 1}) // protocol
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: 0})
	a.op(bpf.LoadIndirect{Off: 20, Size: 2}) // flags + fragment offset
	a.jset(0x1fff, "drop", "")
	a.ipv4Skip()
	a.op(bpf.LoadScratch{Dst: bpf.RegA, N: 0})
	l4()

	a.label("ip6")
	a.op(bpf.LoadIndirect{Off: 20, Size: 1}) // next header
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: 0})
	a.op(bpf.TXA{})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAdd, Val: 40})
	a.op(bpf.TAX{})
	a.op(bpf.LoadScratch{Dst: bpf.RegA, N: 0})
	l4()

	a.label("udp")
	a.op(bpf.LoadIndirect{Off: 16, Size: 2}) // destination port
	for _, p := range vxlanPorts {
		a.jeq(uint32(p), "vxlan", "")
	}
	for _, p := range genevePorts {
		a.jeq(uint32(p), "geneve", "")
	}
	a.ja("drop")

	a.label("vxlan") // UDP + VXLAN headers, then an Ethernet frame
	a.op(bpf.LoadIndirect{Off: 22, Size: 1})
	a.jset(0x08, "", "drop") // the VNI flag
	a.op(bpf.TXA{})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAdd, Val: 16})
	a.op(bpf.TAX{})
	a.ja("teb")

	a.label("geneve")                        // UDP + Geneve header + options, then the payload
	a.op(bpf.LoadIndirect{Off: 24, Size: 2}) // protocol type
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: 0})
	a.op(bpf.LoadIndirect{Off: 22, Size: 1}) // version and option length
	a.jset(0xc0, "drop", "")
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0x3f})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpShiftLeft, Val: 2})
	a.op(bpf.ALUOpX{Op: bpf.ALUOpAdd})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAdd, Val: 16})
	a.op(bpf.TAX{})
	a.op(bpf.LoadScratch{Dst: bpf.RegA, N: 0})
	a.jeq(0x6558, "teb", "")
	a.jeq(0x0800, "in4", "")
	a.jeq(0x86dd, "in6", "drop")

	a.label("teb") // an inner Ethernet frame at X+14
	a.op(bpf.LoadIndirect{Off: 26, Size: 2})
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: 0})
	a.op(bpf.TXA{})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAdd, Val: 14})
	a.op(bpf.TAX{})
	a.op(bpf.LoadScratch{Dst: bpf.RegA, N: 0})
	a.jeq(0x0800, "in4", "")
	a.jeq(0x86dd, "in6", "drop")

	a.label("in4") // the inner IPv4 header: TCP only
	a.op(bpf.LoadIndirect{Off: 23, Size: 1})
	a.jeq(6, "", "drop")
	a.op(bpf.LoadIndirect{Off: 20, Size: 2})
	a.jset(0x1fff, "drop", "")
	a.ipv4Skip()
	a.ja("ports")

	a.label("in6") // the inner IPv6 header: TCP first only
	a.op(bpf.LoadIndirect{Off: 20, Size: 1})
	a.jeq(6, "", "drop")
	a.op(bpf.TXA{})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAdd, Val: 40})
	a.op(bpf.TAX{})

	a.label("ports") // the TCP header is at X+14
	a.op(bpf.LoadIndirect{Off: 14, Size: 2})
	for _, p := range ports {
		a.jeq(uint32(p), "accept", "")
	}
	a.op(bpf.LoadIndirect{Off: 16, Size: 2})
	for _, p := range ports {
		a.jeq(uint32(p), "accept", "")
	}
	a.label("drop")
	a.op(bpf.RetConstant{Val: 0})
	a.label("accept")
	a.op(bpf.RetConstant{Val: snaplen})
	return a.assemble()
}

// maxTunnelPorts bounds the UDP ports the filter compares (each is one
// instruction every UDP packet may run).
const maxTunnelPorts = 32

// ipv4Skip moves X past the IPv4 header at X+14 (its IHL).
func (a *asm) ipv4Skip() {
	a.op(bpf.LoadIndirect{Off: 14, Size: 1}) // version + IHL
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0x0f})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpShiftLeft, Val: 2})
	a.op(bpf.ALUOpX{Op: bpf.ALUOpAdd})
	a.op(bpf.TAX{})
}

// asm is a tiny assembler with named jump targets; "" means the next
// instruction.
type asm struct {
	ins    []bpf.Instruction
	jumps  map[int][2]string
	labels map[string]int
}

func (a *asm) op(i bpf.Instruction) { a.ins = append(a.ins, i) }

func (a *asm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.ins)
}

func (a *asm) jump(i bpf.Instruction, t, f string) {
	if a.jumps == nil {
		a.jumps = map[int][2]string{}
	}
	a.jumps[len(a.ins)] = [2]string{t, f}
	a.ins = append(a.ins, i)
}

func (a *asm) jeq(v uint32, t, f string) {
	a.jump(bpf.JumpIf{Cond: bpf.JumpEqual, Val: v}, t, f)
}

func (a *asm) jset(v uint32, t, f string) {
	a.jump(bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: v}, t, f)
}

func (a *asm) ja(t string) { a.jump(bpf.Jump{}, t, "") }

func (a *asm) assemble() ([]bpf.RawInstruction, error) {
	skip := func(pc int, name string) (int, error) {
		if name == "" {
			return 0, nil
		}
		to, ok := a.labels[name]
		if !ok || to <= pc {
			return 0, fmt.Errorf("assemble filter: bad label %q", name)
		}
		return to - pc - 1, nil
	}
	for pc, j := range a.jumps {
		t, err := skip(pc, j[0])
		if err != nil {
			return nil, err
		}
		f, err := skip(pc, j[1])
		if err != nil {
			return nil, err
		}
		switch in := a.ins[pc].(type) {
		case bpf.JumpIf:
			if t > 255 || f > 255 {
				return nil, fmt.Errorf("assemble filter: too many ports (jump of %d)", max(t, f))
			}
			in.SkipTrue, in.SkipFalse = uint8(t), uint8(f)
			a.ins[pc] = in
		case bpf.Jump:
			a.ins[pc] = bpf.Jump{Skip: uint32(t)}
		}
	}
	raw, err := bpf.Assemble(a.ins)
	if err != nil {
		return nil, fmt.Errorf("assemble filter: %w", err)
	}
	return raw, nil
}
