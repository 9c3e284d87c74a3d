package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// helperKernel is the Linux release that introduced each BPF helper the
// programs call (include/uapi/linux/bpf.h history). A helper missing here
// fails TestKernelMinimumDocumented: add it with its release, and the docs
// follow.
var helperKernel = map[asm.BuiltinFunc]string{
	asm.FnMapLookupElem:        "3.19",
	asm.FnKtimeGetNs:           "4.1",
	asm.FnGetSmpProcessorId:    "4.1",
	asm.FnSkbLoadBytes:         "4.5",
	asm.FnSkbPullData:          "4.9",
	asm.FnRingbufReserve:       "5.8",
	asm.FnRingbufSubmit:        "5.8",
	asm.FnRingbufDiscard:       "5.8",
	asm.FnRingbufQuery:         "5.8",
	asm.FnRingbufOutput:        "5.8",
	asm.FnLoop:                 "5.17",
	asm.FnXdpGetBuffLen:        "5.18",
	asm.FnXdpLoadBytes:         "5.18",
	asm.FnKtimeGetBootNs:       "5.8",
	asm.FnKtimeGetCoarseNs:     "5.11",
	asm.FnJiffies64:            "5.5",
	asm.FnGetPrandomU32:        "4.1",
	asm.FnMapUpdateElem:        "3.19",
	asm.FnMapDeleteElem:        "3.19",
	asm.FnSkbLoadBytesRelative: "5.0",
}

// modePrograms are the programs each capture mode loads (bpf/loadsome.go):
// xdp captures ingress with XDP and egress with TC.
var modePrograms = map[string][]string{
	"cgroup": {"hotsniff_cgroup_ingress", "hotsniff_cgroup_egress"},
	"tc":     {"hotsniff_tc_ingress", "hotsniff_tc_egress"},
	"xdp":    {"hotsniff_xdp", "hotsniff_tc_egress"},
}

// xdpHasFrags is BPF_F_XDP_HAS_FRAGS: multi-buffer XDP, Linux 5.18.
const xdpHasFrags = 1 << 5

func kernelLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range 2 {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x < y
		}
	}
	return false
}

// TestKernelMinimumDocumented computes from the committed eBPF object the
// oldest kernel each capture mode loads on (the helpers its programs call,
// ring buffers, multi-buffer XDP) and checks that README.md and
// docs/kubernetes.md state exactly that, the same in both, and make no
// other kernel claim for eBPF; and that the programs need no kernel BTF
// (no CO-RE relocations), as both say.
func TestKernelMinimumDocumented(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	spec, err := ebpf.LoadCollectionSpec(filepath.Join(root, "bpf", "hotsniff_bpfel.o"))
	if err != nil {
		t.Fatal(err)
	}
	need := map[string]string{}
	why := map[string][]string{}
	for mode, progs := range modePrograms {
		least := "5.8" // BPF_MAP_TYPE_RINGBUF, and CAP_BPF/CAP_PERFMON
		raise := func(v, reason string) {
			if kernelLess(least, v) {
				least = v
			}
			why[mode] = append(why[mode], reason+" "+v)
		}
		for _, name := range progs {
			p := spec.Programs[name]
			if p == nil {
				t.Fatalf("no program %s in the object", name)
			}
			if p.Type == ebpf.XDP && p.Flags&xdpHasFrags != 0 {
				raise("5.18", "xdp.frags")
			}
			for _, ins := range p.Instructions {
				if btf.CORERelocationMetadata(&ins) != nil {
					t.Errorf("%s has a CO-RE relocation: it needs kernel BTF, which README.md and docs/kubernetes.md say it does not", name)
				}
				if !ins.IsBuiltinCall() {
					continue
				}
				fn := asm.BuiltinFunc(ins.Constant)
				v, ok := helperKernel[fn]
				if !ok {
					t.Fatalf("%s calls %v: add the kernel that introduced it to helperKernel", name, fn)
				}
				raise(v, fn.String())
			}
		}
		need[mode] = least
	}
	t.Logf("kernel per mode: %v", need)

	stated := func(doc string, re *regexp.Regexp) map[string]string {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			for _, mode := range regexp.MustCompile("`(\\w+)`").FindAllStringSubmatch(m[2], -1) {
				if prev, ok := got[mode[1]]; ok && prev != m[1] {
					t.Errorf("%s states two kernels for %s: %s and %s", doc, mode[1], prev, m[1])
				}
				got[mode[1]] = m[1]
			}
		}
		// Any other "Linux ≥ X" / "Linux X+" is a second, competing minimum.
		all := regexp.MustCompile(`Linux (?:≥|>=)? ?(\d+\.\d+)`).FindAllStringSubmatch(string(b), -1)
		for _, m := range all {
			if !slices.ContainsFunc(re.FindAllStringSubmatch(string(b), -1), func(s []string) bool { return strings.Contains(s[0], m[0]) }) {
				t.Errorf("%s: %q is a kernel claim outside the per-mode statement", doc, m[0])
			}
		}
		return got
	}
	docs := map[string]map[string]string{
		"README.md":          stated("README.md", regexp.MustCompile("\\*\\*Linux (\\d+\\.\\d+)\\*\\* for ((?:`\\w+`(?:,? and |, )?)+)")),
		"docs/kubernetes.md": stated("docs/kubernetes.md", regexp.MustCompile("\\| Linux (\\d+\\.\\d+)\\+ on the cache nodes \\| ((?:`\\w+`(?:, )?)+) \\|")),
	}
	for doc, got := range docs {
		for mode, v := range need {
			if got[mode] != v {
				t.Errorf("%s states Linux %q for %s; the programs need %s (%s)", doc, got[mode], mode, v, strings.Join(dedup(slices.Clone(why[mode])), ", "))
			}
		}
		for mode := range got {
			if _, ok := need[mode]; !ok {
				t.Errorf("%s states a kernel for %q, which is not an eBPF capture mode", doc, mode)
			}
		}
	}
	if fmt.Sprint(docs["README.md"]) != fmt.Sprint(docs["docs/kubernetes.md"]) {
		t.Errorf("README.md %v and docs/kubernetes.md %v disagree", docs["README.md"], docs["docs/kubernetes.md"])
	}
}

func dedup(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
