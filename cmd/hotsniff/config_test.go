package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigErrors: configuration mistakes are one precise line and exit 2,
// never a setting silently ignored.
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := func(body string) string {
		p := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fixture := "../../testdata/redis/get-p1.pcap"
	cases := []struct {
		name string
		body string
		env  []string
		want string
	}{
		{"typo in a flag key", "Hot-QPS: 5\n", nil, `unknown key "Hot-QPS" (did you mean "hot-qps"?)`},
		{"one setting twice", "hot_qps: 5\nhot-qps: 6\n", nil, `"hot-qps" and "hot_qps" are the same setting: keep one`},
		{"tair setting twice", "tair: {sample_max: 5, sample-max: 6}\n", nil, `"tair.sample-max" and "tair.sample_max" are the same setting: keep one`},
		{"rule threshold twice", "rules:\n  - {pattern: \"a*\", hot_qps: 10, hot-qps: 11}\n", nil, "rule 0 (a*): hot-qps and hot_qps are the same setting"},
		{"bad number", "cold-ratio: fast\n", nil, `cold-ratio: "fast": want a number (e.g. 0.7)`},
		{"bad duration", "refresh-every: 5\n", nil, `refresh-every: "5": want a duration such as 500ms, 30s or 2m`},
		{"bad tair", "tair: {sample_max: many}\n", nil, `tair-sample-max: "many": want a whole number`},
		{"unknown key", "treshold: 5\n", nil, `unknown key "treshold"`},
		{"typo in a rule", "rules:\n  - {pattern: \"a*\", hotqps: 10}\n", nil, "line 2: unknown field hotqps in a rule (want pattern, hot-qps, hot-bytes, proto)"},
		{"rule threshold not a number", "rules:\n  - {pattern: \"a*\", hot-qps: fast}\n", nil, "line 2: cannot read the text `fast` into a number"},
		{"rules not a list", "rules: 5\n", nil, "line 1: cannot read the number `5` into a list of rules"},
		{"bad rule proto", "rules:\n  - {pattern: \"a*\", hot_qps: 10, proto: mongo}\n", nil, `unknown proto "mongo"`},
		{"bad value", "hot-qps: lots\n", nil, "hot-qps"},
		{"bad port", "port: [redis=99999]\n", nil, "99999"},
		{"not yaml", "rules: [\n", nil, "parse config"},
		{"bad env", "", []string{"HOTSNIFF_HOT_QPS", "abc"}, "HOTSNIFF_HOT_QPS"},
		{"negative threshold", "hot-qps: -3\n", nil, "check hot-qps: must be a positive number"},
		{"bad env duration", "", []string{"HOTSNIFF_INVALIDATE_GAP", "soon"}, `HOTSNIFF_INVALIDATE_GAP="soon": want a duration`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.env != nil {
				t.Setenv(c.env[0], c.env[1])
			}
			_, errOut, code := runCLI(t, "replay", "--config", cfg(c.body), fixture)
			if code != 2 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "strconv") {
				t.Fatalf("exit %d, stderr %q; want exit 2 and one line containing %q", code, errOut, c.want)
			}
		})
	}
}

// TestConfigPrecedence: defaults < file < environment < flags, and one file
// can carry other commands' flags (iface is run's) without error.
func TestConfigPrecedence(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(p, []byte("hot-qps: 999999\niface: [eth0]\nrules:\n  - {pattern: \"nothing:*\", hot_qps: 5}\n"), 0o644)
	fixture := "../../testdata/redis/hotkey.pcap.gz"
	// The file's threshold is far above item:hot: nothing is hot.
	out, errOut, code := runCLI(t, "replay", "--config", p, fixture)
	if code != 0 || out != "" {
		t.Fatalf("file threshold: exit %d, out %q, err %s", code, out, errOut)
	}
	// The environment beats the file.
	t.Setenv("HOTSNIFF_HOT_QPS", "1000")
	out, _, _ = runCLI(t, "replay", "--config", p, fixture)
	if !strings.Contains(out, `"key":"item:hot"`) {
		t.Fatalf("env threshold: %q", out)
	}
	// A flag beats both.
	out, _, _ = runCLI(t, "replay", "--config", p, "--hot-qps", "999999", fixture)
	if out != "" {
		t.Fatalf("flag threshold: %q", out)
	}
	// --config-check validates and summarises without capturing.
	out, errOut, code = runCLI(t, "run", "--config", p, "--config-check")
	if code != 0 || !strings.Contains(out, "config ok") || !strings.Contains(out, "1 rules") {
		t.Fatalf("config-check: exit %d, %q %q", code, out, errOut)
	}
}

// TestRunKernelCountHotBytes: --kernel-count takes a reply-bytes threshold
// (the programs count reply bytes too), but refuses one whose bytes in a
// sub-window would saturate a kernel bucket (65 535 units of 64 bytes:
// 4 194 240 bytes), before capturing (exit 2, one line), and
// --config-check says so too. The refused run names a missing interface
// so that, were the check gone, it would fail at once on the interface
// instead of capturing.
func TestRunKernelCountHotBytes(t *testing.T) {
	const want = "hotsniff: --kernel-count counts at most 4194240 reply bytes per bucket in a 100ms sub-window: a reply-bytes threshold of 50000000/s needs a shorter --window, or --kernel-count=false\n"
	for _, args := range [][]string{
		{"run", "--kernel-count", "--hot-bytes", "50000000", "--capture", "tc", "--iface", "hsnone0", "--listen", ""},
		{"run", "--kernel-count", "--hot-bytes", "50000000", "--config-check"},
	} {
		_, errOut, code := runCLI(t, args...)
		if code != 2 || errOut != want {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", args, code, errOut, want)
		}
	}
	for _, args := range [][]string{
		{"run", "--kernel-count", "--config-check"},
		{"run", "--kernel-count", "--hot-bytes", "1000000", "--config-check"},
		{"run", "--kernel-count", "--capture", "afpacket", "--hot-bytes", "50000000", "--config-check"},
	} {
		out, errOut, code := runCLI(t, args...)
		if code != 0 || !strings.Contains(out, "config ok") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want the settings accepted", args, code, out, errOut)
		}
	}
}

// TestRunKernelCountThreshold: kernel buckets count at most
// bpf.KernelMaxBucketCount reads per CPU and sub-window, so `run` refuses
// --kernel-count with a threshold whose reads in a sub-window reach it
// (30 000/s over a 20 s window's 2.5 s sub-windows: 75 000), naming a fix,
// and --config-check reports it; the window sized for the threshold (the
// default) makes room.
func TestRunKernelCountThreshold(t *testing.T) {
	const want = "hotsniff: --kernel-count counts at most 65535 reads per bucket in a 2.5s sub-window: a threshold of 30000/s needs a shorter --window, or --kernel-count=false\n"
	for _, args := range [][]string{
		{"run", "--kernel-count", "--hot-qps", "30000", "--window", "20s", "--capture", "tc", "--iface", "hsnone0", "--listen", ""},
		{"run", "--kernel-count", "--hot-qps", "30000", "--window", "20s", "--config-check"},
	} {
		_, errOut, code := runCLI(t, args...)
		if code != 2 || errOut != want {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", args, code, errOut, want)
		}
	}
	for _, args := range [][]string{
		{"run", "--kernel-count", "--hot-qps", "30000", "--config-check"},
		{"run", "--kernel-count", "--hot-qps", "1000", "--window", "20s", "--config-check"},
		{"run", "--capture", "afpacket", "--kernel-count", "--hot-qps", "30000", "--window", "20s", "--config-check"},
	} {
		out, errOut, code := runCLI(t, args...)
		if code != 0 || !strings.Contains(out, "config ok") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want the settings accepted", args, code, out, errOut)
		}
	}
}

// TestRunKernelCountRefusals: the other settings kernel counting cannot
// serve are refused in one line by run and by --config-check alike
// (before, only once capture opened, so --config-check passed them).
func TestRunKernelCountRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--detector", "tair"}, `hotsniff: --kernel-count needs the default detector, not "tair": remove --detector or set --kernel-count=false` + "\n"},
		{[]string{"--buckets", "262144"}, "hotsniff: --kernel-count counts at most 131072 buckets: set --buckets 131072 or less, or --kernel-count=false\n"},
		{[]string{"--capture-replies"}, "hotsniff: --kernel-count copies no replies, so --capture-replies would do nothing: remove one of them\n"},
	} {
		for _, extra := range [][]string{{"--config-check"}, {"--capture", "tc", "--iface", "hsnone0", "--listen", ""}} {
			args := append(append([]string{"run", "--kernel-count"}, tc.args...), extra...)
			_, errOut, code := runCLI(t, args...)
			if code != 2 || errOut != tc.want {
				t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", args, code, errOut, tc.want)
			}
		}
	}
}
