package tunnel

import (
	"errors"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      string
	}{
		{"auto", "auto", ""},
		{"off", "off", ""},
		{" none ", "off", ""},
		{"vxlan:4789", "vxlan:4789", ""},
		{"vxlan:8472/1/2,geneve:6081,ipip", "vxlan:8472/1/2,geneve:6081,ipip", ""},
		{"auto,geneve:6081", "auto,geneve:6081", ""},
		{"", "", "empty"},
		{"vxlan", "", "needs a UDP port (vxlan:4789)"},
		{"vxlan:0", "", "not 1-65535"},
		{"vxlan:65536", "", "not 1-65535"},
		{"vxlan:4789/16777216", "", "VNI"},
		{"gre:1", "", "unknown tunnel"},
		{"off,vxlan:4789", "", "cannot be combined"},
		{"vxlan:6081,geneve:6081", "", "both vxlan and geneve"},
		{"ipip:4", "", "takes no port"},
		{"auto:1", "", "takes no port"},
		{strings.Repeat("ipip,", 64) + "ipip", "", "at most 64"},
	} {
		s, err := Parse(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q): err %v, want one saying %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || s.String() != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.in, s, err, tc.want)
		}
	}
}

// TestResolve: auto with nothing detected follows nothing; named tunnels
// and devices without a local address use the node's addresses; a device's
// own local address stands alone.
func TestResolve(t *testing.T) {
	node := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")}
	addrs := func() ([]netip.Addr, error) { return node, nil }
	none := func() ([]Found, error) { return nil, nil }
	p, err := resolve(Setting{Auto: true}, none, addrs)
	if err != nil || p.Decap.Enabled() {
		t.Fatalf("auto with nothing detected: %v, %v; want nothing followed", Describe(p.Decap), err)
	}
	flannel := Found{Device: "flannel.1", Tunnel: capture.Tunnel{Kind: capture.TunnelVXLAN, Port: 8472, VNIs: []uint32{1}},
		Local: netip.MustParseAddr("10.0.0.5")}
	p, err = resolve(Setting{Auto: true}, func() ([]Found, error) { return []Found{flannel}, nil }, addrs)
	if err != nil {
		t.Fatal(err)
	}
	if got := Describe(p.Decap); got != "vxlan:8472/1 to or from 10.0.0.5" {
		t.Errorf("flannel: %s", got)
	}
	p, err = resolve(Setting{Tunnels: []capture.Tunnel{{Kind: capture.TunnelGeneve, Port: 6081}}}, none, addrs)
	if err != nil {
		t.Fatal(err)
	}
	if got := Describe(p.Decap); got != "geneve:6081 to or from 10.0.0.5 fd00::5" {
		t.Errorf("named geneve: %s", got)
	}
	boom := errors.New("netlink down")
	if _, err := resolve(Setting{Auto: true}, func() ([]Found, error) { return nil, boom }, addrs); !errors.Is(err, boom) {
		t.Errorf("detection error lost: %v", err)
	}
}

// TestDetect: real VXLAN devices (a fixed VNI, an external one) and an
// IP-in-IP device in a namespace are found with their ports, VNIs and
// local addresses; a device that is down is not.
func TestDetect(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"-n", p.NS}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("link", "add", "vx42", "type", "vxlan", "id", "42", "local", p.NSIP.String(), "dstport", "4789", "dev", p.NSIface)
	ip("link", "set", "vx42", "up")
	ip("link", "add", "vxext", "type", "vxlan", "external", "dstport", "8472")
	ip("link", "set", "vxext", "up")
	ip("link", "add", "vxdown", "type", "vxlan", "id", "7", "dstport", "4790")
	var found []Found
	var addrs []netip.Addr
	if err := p.Do(func() (err error) {
		if found, err = Detect(); err != nil {
			return err
		}
		addrs, err = NodeAddrs()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		got = append(got, f.String())
	}
	slices.Sort(got)
	want := []string{"vx42=vxlan:4789/42@" + p.NSIP.String(), "vxext=vxlan:8472"}
	if !slices.Equal(got, want) {
		t.Errorf("detected %q, want %q", got, want)
	}
	if !slices.Contains(addrs, p.NSIP) || slices.ContainsFunc(addrs, netip.Addr.IsLoopback) {
		t.Errorf("node addresses %v: want %v and no loopback", addrs, p.NSIP)
	}
	// IP-in-IP, where the kernel has it.
	if exec.Command("ip", "-n", p.NS, "link", "add", "ipip1", "type", "ipip", "local", p.NSIP.String(), "remote", "192.0.2.9").Run() == nil {
		ip("link", "set", "ipip1", "up")
		_ = p.Do(func() (err error) { found, err = Detect(); return err })
		if !slices.ContainsFunc(found, func(f Found) bool { return f.String() == "ipip1=ipip@"+p.NSIP.String() }) {
			t.Errorf("ipip1 not detected: %v", found)
		}
	}
}

// FuzzParse: any value gives a setting or one error, and a setting reads
// back the same from its own rendering.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"auto", "off", "vxlan:4789", "vxlan:8472/1/2,geneve:6081,ipip", "auto,geneve:6081", "vxlan:", "geneve:6081/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := Parse(in)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error of several lines: %q", err)
			}
			return
		}
		again, err := Parse(s.String())
		if err != nil || again.String() != s.String() {
			t.Fatalf("%q renders as %q, which reads back as %q, %v", in, s, again, err)
		}
		if len(s.Tunnels) > maxItems {
			t.Fatalf("%d tunnels", len(s.Tunnels))
		}
	})
}
