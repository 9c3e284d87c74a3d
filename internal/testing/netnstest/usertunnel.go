package netnstest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// userTunnel is a tunnel endpoint run in user space: a TAP (Geneve) or TUN
// (IP-in-IP) device in a namespace, its packets carried to the peer over a
// UDP socket with a Geneve header or over a raw IP socket of protocol 4. It
// stands in for the kernel's geneve and ipip devices on kernels built
// without them; on the wire the packets are the same.
type userTunnel struct {
	dev  *os.File
	conn net.PacketConn
	peer net.Addr
	kind string
}

// genevePrefix is a Geneve header without options carrying an Ethernet
// frame (protocol 0x6558) with VNI 42.
var genevePrefix = []byte{0, 0, 0x65, 0x58, 0, 0, 42, 0}

// startUserTunnel creates device dev in p's namespace and pumps its packets
// to peer until the test ends.
func startUserTunnel(t testing.TB, p *Pair, kind, dev string, local, peer netip.Addr) {
	t.Helper()
	u := &userTunnel{kind: kind}
	err := p.Do(func() error {
		flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI)
		if kind == "ipip" {
			flags = unix.IFF_TUN | unix.IFF_NO_PI
		}
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		var req [unix.IFNAMSIZ + 64]byte
		copy(req[:], dev)
		binary.NativeEndian.PutUint16(req[unix.IFNAMSIZ:], flags)
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); errno != 0 {
			unix.Close(fd)
			return fmt.Errorf("create %s: %w", dev, errno)
		}
		u.dev = os.NewFile(uintptr(fd), dev)
		if kind == "ipip" {
			c, err := net.ListenIP("ip4:4", &net.IPAddr{IP: local.AsSlice()})
			if err != nil {
				return fmt.Errorf("raw IP-in-IP socket: %w", err)
			}
			u.conn, u.peer = c, &net.IPAddr{IP: peer.AsSlice()}
			return nil
		}
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: local.AsSlice(), Port: 6081})
		if err != nil {
			return fmt.Errorf("geneve socket: %w", err)
		}
		u.conn, u.peer = c, &net.UDPAddr{IP: peer.AsSlice(), Port: 6081}
		return nil
	})
	if err != nil {
		if u.dev != nil {
			u.dev.Close()
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { u.dev.Close(); u.conn.Close() })
	go u.out()
	go u.in()
}

// out carries the device's packets to the peer.
func (u *userTunnel) out() {
	buf := make([]byte, 70000)
	hdr := len(genevePrefix)
	if u.kind == "ipip" {
		hdr = 0
	}
	copy(buf, genevePrefix)
	for {
		n, err := u.dev.Read(buf[hdr:])
		if err != nil {
			return
		}
		if _, err := u.conn.WriteTo(buf[:hdr+n], u.peer); err != nil && isClosed(err) {
			return
		}
	}
}

// in writes what the peer sends to the device.
func (u *userTunnel) in() {
	buf := make([]byte, 70000)
	for {
		n, _, err := u.conn.ReadFrom(buf)
		if err != nil {
			if isClosed(err) {
				return
			}
			continue
		}
		b := buf[:n]
		if u.kind != "ipip" {
			if len(b) < 8 {
				continue
			}
			b = b[8+int(b[0]&0x3f)*4:]
		}
		if _, err := u.dev.Write(b); err != nil && isClosed(err) {
			return
		}
	}
}

func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed)
}
