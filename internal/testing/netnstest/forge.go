package netnstest

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TunnelDatagram is the UDP payload of a forged tunnel packet: a VXLAN
// ("vxlan") or Geneve ("geneve") header with VNI vni, then an Ethernet frame
// holding an IPv4 TCP segment src > dst (PSH|ACK, seq, ack) with payload.
// Anyone can send it from a plain UDP socket.
func TunnelDatagram(kind string, vni uint32, src, dst netip.AddrPort, seq, ack uint32, payload []byte) []byte {
	var b []byte
	switch kind {
	case "vxlan":
		b = []byte{0x08, 0, 0, 0, byte(vni >> 16), byte(vni >> 8), byte(vni), 0}
	case "geneve":
		b = []byte{0, 0, 0x65, 0x58, byte(vni >> 16), byte(vni >> 8), byte(vni), 0}
	default:
		panic("TunnelDatagram: kind " + kind)
	}
	b = append(b, 0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00)
	ip := make([]byte, 20)
	ip[0], ip[8], ip[9] = 0x45, 64, 6
	binary.BigEndian.PutUint16(ip[2:], uint16(20+20+len(payload)))
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:], s4[:])
	copy(ip[16:], d4[:])
	binary.BigEndian.PutUint16(ip[10:], checksum(0, ip))
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:], src.Port())
	binary.BigEndian.PutUint16(tcp[2:], dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], seq)
	binary.BigEndian.PutUint32(tcp[8:], ack)
	tcp[12], tcp[13] = 5<<4, 0x18
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	return append(append(append(b, ip...), tcp...), payload...)
}

// Datagram is one UDP payload to a port.
type Datagram struct {
	Port    int
	Payload []byte
}

// sender sends its stdin's datagrams ("PORT HEX" lines) rounds times to
// host over a plain UDP socket, and fails unless it runs as nobody.
const sender = `
import os, socket, sys, time
assert os.getuid() == 65534 and os.geteuid() == 65534, "not running as nobody"
host, rounds, gap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
items = [(int(p), bytes.fromhex(h)) for p, h in (l.split() for l in sys.stdin if l.strip())]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
n = 0
for _ in range(rounds):
    for port, b in items:
        s.sendto(b, (host, port))
        n += 1
    time.sleep(gap)
print(n)
`

// SendAsNobody sends each datagram rounds times (gapSec seconds between
// rounds) to host from a process running as user nobody (uid 65534) in
// network namespace ns ("": the test's own), over a plain UDP socket: what
// any unprivileged program can do. It returns the number sent.
func SendAsNobody(t testing.TB, ns string, host netip.Addr, rounds int, gapSec float64, dgs []Datagram) int {
	t.Helper()
	Need(t, "setpriv")
	py := "/usr/bin/python3" // not a per-user shim nobody cannot read
	args := []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", py, "-c", sender,
		host.String(), strconv.Itoa(rounds), strconv.FormatFloat(gapSec, 'f', -1, 64)}
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	var in strings.Builder
	for _, d := range dgs {
		fmt.Fprintf(&in, "%d %s\n", d.Port, hex.EncodeToString(d.Payload))
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("forged datagrams as nobody: %v: %s", err, out)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("forged datagrams as nobody: %q", out)
	}
	return n
}

// SegmentForger sends forged IPv4 TCP segments through a raw socket of
// the namespace the caller runs in, as an attacker off the path does: any
// source address, sequence and acknowledgment numbers.
type SegmentForger struct{ fd int }

// NewSegmentForger opens the raw socket (root: CAP_NET_RAW); it is closed
// in t.Cleanup.
func NewSegmentForger(t testing.TB) *SegmentForger {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		t.Fatalf("raw socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &SegmentForger{fd: fd}
}

// Send sends one segment src > dst with PSH|ACK.
func (f *SegmentForger) Send(src, dst netip.AddrPort, seq, ack uint32, payload []byte) error {
	pkt := make([]byte, 40+len(payload))
	ip, tcp := pkt[:20], pkt[20:]
	ip[0], ip[8], ip[9] = 0x45, 64, 6
	binary.BigEndian.PutUint16(ip[2:], uint16(len(pkt)))
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:], s4[:])
	copy(ip[16:], d4[:])
	binary.BigEndian.PutUint16(ip[10:], checksum(0, ip))
	binary.BigEndian.PutUint16(tcp[0:], src.Port())
	binary.BigEndian.PutUint16(tcp[2:], dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], seq)
	binary.BigEndian.PutUint32(tcp[8:], ack)
	tcp[12], tcp[13] = 5<<4, 0x18
	binary.BigEndian.PutUint16(tcp[14:], 502)
	copy(tcp[20:], payload)
	pseudo := append(append(append([]byte{}, s4[:]...), d4[:]...), 0, 6, byte(len(tcp)>>8), byte(len(tcp)))
	binary.BigEndian.PutUint16(tcp[16:], checksum(sum(0, pseudo), tcp))
	return unix.Sendto(f.fd, pkt, 0, &unix.SockaddrInet4{Addr: d4})
}

func sum(acc uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		acc += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		acc += uint32(b[len(b)-1]) << 8
	}
	return acc
}

func checksum(acc uint32, b []byte) uint16 {
	acc = sum(acc, b)
	for acc > 0xffff {
		acc = acc&0xffff + acc>>16
	}
	return ^uint16(acc)
}
