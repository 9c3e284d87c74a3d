package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// TestPrivilegeErrors runs the real binary without the capabilities a
// capture needs (root with every capability dropped, and the nobody user)
// and checks each mode fails with one line naming what is missing and what
// to do, not a bare "operation not permitted".
func TestPrivilegeErrors(t *testing.T) {
	netnstest.RequireRoot(t)
	setpriv := netnstest.Need(t, "setpriv")
	// A copy of the test binary that nobody may run (go test's build
	// directory is private to root).
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "hotsniff-priv-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "hotsniff")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	dropAll := []string{"--inh-caps=-all", "--bounding-set=-all", "--"}
	nobody := []string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--"}
	ebpfWant := []string{"not permitted", "eBPF capture needs root or CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN", "lacks CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN", "run as root", "setcap cap_bpf,cap_perfmon,cap_net_admin+ep", "--capture afpacket"}
	for _, c := range []struct {
		name  string
		as    []string
		mode  string
		want  []string
		niced bool // started at nice 15: the default --nice 10 must not try to raise it
	}{
		{"nocaps-tc", dropAll, "tc", ebpfWant, false},
		{"nocaps-xdp", dropAll, "xdp", ebpfWant, false},
		{"nocaps-afpacket", dropAll, "afpacket", []string{"not permitted", "AF_PACKET capture needs root or CAP_NET_RAW", "lacks CAP_NET_RAW", "setcap cap_net_raw+ep"}, false},
		{"nocaps-auto", dropAll, "auto", []string{"not permitted", "CAP_NET_RAW for AF_PACKET", "lacks CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN, CAP_NET_RAW", "run as root"}, false},
		{"nobody-tc", nobody, "tc", ebpfWant, false},
		{"nobody-afpacket", nobody, "afpacket", []string{"AF_PACKET capture needs root or CAP_NET_RAW", "lacks CAP_NET_RAW"}, false},
		{"niced-nocaps-afpacket", dropAll, "afpacket", []string{"not permitted", "AF_PACKET capture needs root or CAP_NET_RAW"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := append(append(append([]string(nil), c.as...), bin), "run", "--iface", "lo", "--capture", c.mode, "--listen", "")
			cmd := exec.CommandContext(ctx, setpriv, args...)
			if c.niced {
				cmd = exec.CommandContext(ctx, netnstest.Need(t, "nice"), append([]string{"-n", "15", setpriv}, args...)...)
			}
			cmd.Env = append(os.Environ(), "HOTSNIFF_TEST_MAIN=1")
			cmd.Stdout = io.Discard
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("exit %v, want 1\n%s", err, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "hotsniff: start ") {
				t.Errorf("last line %q", last)
			}
			for _, w := range c.want {
				if !strings.Contains(last, w) {
					t.Errorf("error lacks %q:\n%s", w, last)
				}
			}
			if strings.Contains(last, "MEMLOCK") || strings.Contains(last, "rlimit.RemoveMemlock") {
				t.Errorf("error cites the locked memory limit, which is not the problem:\n%s", last)
			}
			// The error is one line; before it only log lines (the mode
			// chosen, and for auto the fallback warning).
			var other []string
			for _, l := range lines[:len(lines)-1] {
				if !strings.HasPrefix(l, "time=") {
					other = append(other, l)
				}
			}
			if len(other) > 0 {
				t.Errorf("lines that are neither logs nor the error:\n%s", stderr.String())
			}
			if c.mode == "auto" && strings.Count(stderr.String(), "level=WARN") != 1 {
				t.Errorf("auto: want one fallback warning:\n%s", stderr.String())
			}
		})
	}
}
