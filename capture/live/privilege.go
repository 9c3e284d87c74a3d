package live

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Capabilities a capture needs, by bit number (linux/capability.h).
const (
	capNetAdmin = 12
	capNetRaw   = 13
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

var capNames = map[int]string{capNetAdmin: "CAP_NET_ADMIN", capNetRaw: "CAP_NET_RAW", capSysAdmin: "CAP_SYS_ADMIN", capPerfmon: "CAP_PERFMON", capBPF: "CAP_BPF"}

// effectiveCaps reads this process's effective capability set; ok is false
// when it cannot be read.
var effectiveCaps = func() (set uint64, ok bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, found := strings.CutPrefix(line, "CapEff:"); found {
			set, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return set, err == nil
		}
	}
	return 0, false
}

// missingCaps names the capabilities of want that the process lacks.
func missingCaps(want ...int) []string {
	have, ok := effectiveCaps()
	if !ok {
		return nil
	}
	var miss []string
	for _, c := range want {
		if have&(1<<c) == 0 {
			miss = append(miss, capNames[c])
		}
	}
	return miss
}

// privilegeError turns a permission error from starting a capture into one
// line saying what is missing and what to do; other errors pass through.
// mode is "ebpf" (XDP, TC), "afpacket", or "auto" (both were tried); what
// prefixes the message.
func privilegeError(what, mode string, err error) error {
	if !errors.Is(err, os.ErrPermission) {
		return err
	}
	var need, grant string
	var miss []string
	switch mode {
	case "auto":
		need, grant = "capture needs root, or CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN for eBPF (xdp, tc), or CAP_NET_RAW for AF_PACKET", "cap_bpf,cap_perfmon,cap_net_admin"
		miss = missingCaps(capBPF, capPerfmon, capNetAdmin, capNetRaw)
	case "afpacket":
		need, grant = "AF_PACKET capture needs root or CAP_NET_RAW", "cap_net_raw"
		miss = missingCaps(capNetRaw)
	default:
		need, grant = "eBPF capture needs root or CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN (CAP_SYS_ADMIN and CAP_NET_ADMIN before Linux 5.8)", "cap_bpf,cap_perfmon,cap_net_admin"
		miss = missingCaps(capBPF, capPerfmon, capNetAdmin)
		if have, ok := effectiveCaps(); ok && have&(1<<capSysAdmin) != 0 && have&(1<<capNetAdmin) != 0 {
			miss = nil // CAP_SYS_ADMIN stands in for CAP_BPF and CAP_PERFMON
		}
	}
	if len(miss) == 0 {
		// The capabilities are there: something else refuses (a locked
		// memory limit on kernels before 5.11, a seccomp or LSM policy).
		return fmt.Errorf("%s: not permitted although the process has the capabilities (%v): raise the locked memory limit (ulimit -l unlimited; kernels before 5.11) or check seccomp/AppArmor/SELinux policies", what, err)
	}
	alt := ""
	if mode == "ebpf" {
		alt = ", or use --capture afpacket (needs CAP_NET_RAW only)"
	}
	return fmt.Errorf("%s: not permitted: %s; this process lacks %s: run as root, or grant them (Kubernetes: securityContext.capabilities.add; a binary: setcap %s+ep hotsniff)%s",
		what, need, strings.Join(miss, ", "), grant, alt)
}
