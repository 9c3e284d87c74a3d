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
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
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
