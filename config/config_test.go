package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestPrecedence: defaults < file < environment < flags, the file read
// once, lists from the file and repeatable flags.
func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	os.WriteFile(file, []byte("hot-qps: 2000\ncold_ratio: 0.5\nbuckets: 8192\nport: [redis=7000, memcache=7001]\nrules: [{pattern: 'a*', hot-qps: 10}]\nignore: ['x*']\n"), 0o600)
	c := Default()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	Register(fs, &c, Section(SecStream)...)
	Register(fs, &c, Section(SecDetect)...)
	if err := fs.Parse([]string{"--config", file, "--buckets", "64"}); err != nil {
		t.Fatal(err)
	}
	warn, err := Load(fs, &c, []string{"HOTSNIFF_COLD_RATIO=0.9", "PATH=/bin", "HOTSNIFF_HOT_QSP=5"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Detect.HotQPS != 2000 || c.Detect.ColdRatio != 0.9 || c.Detect.Buckets != 64 || c.Detect.TTL != 60*time.Second {
		t.Errorf("hot-qps %v (file 2000), cold-ratio %v (env 0.9), buckets %v (flag 64), ttl %v (default 60s)",
			c.Detect.HotQPS, c.Detect.ColdRatio, c.Detect.Buckets, c.Detect.TTL)
	}
	if strings.Join(c.Stream.Ports, ",") != "redis=7000,memcache=7001" {
		t.Errorf("ports %v", c.Stream.Ports)
	}
	if len(c.Detect.Rules) != 1 || c.Detect.Rules[0].HotQPS != 10 || len(c.Detect.Ignore) != 1 {
		t.Errorf("rules %+v ignore %v", c.Detect.Rules, c.Detect.Ignore)
	}
	if len(warn) != 1 || !strings.Contains(warn[0], "HOTSNIFF_HOT_QSP") || !strings.Contains(warn[0], "did you mean HOTSNIFF_HOT_QPS") {
		t.Errorf("warnings %q: want one naming HOTSNIFF_HOT_QSP and suggesting HOTSNIFF_HOT_QPS", warn)
	}
	if !fs.Changed("cold-ratio") || !fs.Changed("hot-qps") || fs.Changed("ttl") {
		t.Errorf("settings given in the environment or the file must count as set, defaults not")
	}
}

// TestOneDefault: every setting of the table has a default in Default()
// that its flag shows, and a help text; names are unique.
func TestOneDefault(t *testing.T) {
	seen := map[string]bool{}
	c := Default()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	for _, s := range settings {
		if seen[s.name] {
			t.Errorf("setting %s listed twice", s.name)
		}
		seen[s.name] = true
		if s.usage == "" {
			t.Errorf("setting %s has no help", s.name)
		}
		Register(fs, &c, s.name)
	}
	for name, want := range map[string]string{"hot-qps": "1000", "ttl": "1m0s", "invalidate-gap": "10ms", "channel-budget": "1000", "nice": "10", "listen": ":9464"} {
		if got := fs.Lookup(name).DefValue; got != want {
			t.Errorf("--%s default %q, want %q", name, got, want)
		}
	}
}

// TestErrors: each is one line that says what to do.
func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--redis-url", "127.0.0.1:20380"}, "want a URL such as redis://127.0.0.1:20380"},
		{[]string{"--config", "/no/such/file.yaml"}, "check the path given to --config"},
		{[]string{"--nice", "40"}, "must be between -20 and 19"},
		{[]string{"--hot-qps", "-1"}, "hot-qps"},
	} {
		_, err := loadSections(t, tc.args, SecPublish, SecCapture, SecDetect)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v; want one line containing %q", tc.args, err, tc.want)
		}
	}
}

// TestBadPortInFileNamesIt: a value the file gets wrong names the file.
func TestBadPortInFileNamesIt(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(file, []byte("max-flows: lots\n"), 0o600)
	c := Default()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	Register(fs, &c, Section(SecStream)...)
	fs.Parse([]string{"--config", file})
	if _, err := Load(fs, &c, nil, nil); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("error %v does not name %s", err, file)
	}
	os.WriteFile(file, []byte("port: [redis=notaport]\n"), 0o600)
	c = Default()
	fs = pflag.NewFlagSet("t", pflag.ContinueOnError)
	Register(fs, &c, Section(SecStream)...)
	fs.Parse([]string{"--config", file})
	if _, err := Load(fs, &c, nil, nil); err == nil || !strings.Contains(err.Error(), "notaport") || !strings.Contains(err.Error(), file) {
		t.Errorf("error %v does not name the bad port", err)
	}
}

// TestKernelCountHotBytes: --kernel-count takes a reply-bytes threshold
// (global or a rule's: the programs count reply bytes too) unless its bytes
// in a sub-window would saturate a kernel bucket, refused with one line
// saying what to do; not on afpacket, where the kernel counts nothing.
func TestKernelCountHotBytes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rules.yaml")
	os.WriteFile(file, []byte("rules: [{pattern: 'blob:*', hot-bytes: 100000000}, {pattern: 'a*', hot-qps: 10}]\n"), 0o600)
	const what = "reply bytes per bucket"
	for _, tc := range []struct {
		args []string
		want string // "" when the settings are valid
	}{
		{[]string{"--kernel-count", "--hot-bytes", "1000000"}, ""},
		{[]string{"--kernel-count", "--capture", "cgroup", "--hot-bytes", "5"}, ""},
		{[]string{"--kernel-count", "--hot-bytes", "50000000"}, "counts at most 4194240 reply bytes per bucket in a 100ms sub-window: a reply-bytes threshold of 50000000/s needs a shorter --window, or --kernel-count=false"},
		{[]string{"--kernel-count", "--capture", "tc", "--config", file}, "a reply-bytes threshold of 100000000/s"},
		{[]string{"--kernel-count", "--capture", "afpacket", "--hot-bytes", "50000000", "--config", file}, ""},
		{[]string{"--kernel-count"}, ""},
		{[]string{"--hot-bytes", "50000000", "--config", file}, ""},
	} {
		wantRefusal(t, tc.args, what, tc.want)
	}
	// The programs' reply queues rely on x86's memory ordering.
	defer func(a string) { kernelReplyArch = a }(kernelReplyArch)
	kernelReplyArch = "arm64"
	wantRefusal(t, []string{"--kernel-count", "--hot-bytes", "1000000"}, "only on x86-64",
		"--kernel-count counts reply bytes only on x86-64 for now, not arm64: remove the reply-bytes threshold (--hot-bytes 1000000) or set --kernel-count=false")
	wantRefusal(t, []string{"--kernel-count"}, "", "")
}

// TestKernelCountRefusesCaptureReplies: with kernel counting the programs
// copy no replies but those of the requests they copy, so
// --capture-replies would be silently off: refused in
// one line; not on AF_PACKET, where nothing is counted in the kernel.
func TestKernelCountRefusesCaptureReplies(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		refused bool
	}{
		{[]string{"--kernel-count", "--capture-replies"}, true},
		{[]string{"--kernel-count", "--capture", "tc", "--capture-replies"}, true},
		{[]string{"--kernel-count", "--capture", "afpacket", "--capture-replies"}, false},
		{[]string{"--capture-replies"}, false},
		{[]string{"--kernel-count", "--reply-copy", "0"}, false},
	} {
		err := loadCaptureDetect(t, tc.args)
		const want = "--kernel-count copies no replies, so --capture-replies would do nothing: remove one of them"
		switch {
		case !tc.refused && err != nil:
			t.Errorf("%v: %v; want no error", tc.args, err)
		case tc.refused && (err == nil || err.Error() != want):
			t.Errorf("%v: %v; want %q", tc.args, err, want)
		}
	}
}

// loadCaptureDetect loads the defaults with args given as the capture and
// detection flags of `run`, and returns Load's verdict.
func loadCaptureDetect(t *testing.T, args []string) error {
	t.Helper()
	_, err := loadSections(t, args, SecCapture, SecDetect)
	return err
}

// loadSections loads the defaults with args given as the flags of the
// sections named, and returns Load's warnings and verdict.
func loadSections(t *testing.T, args []string, secs ...string) ([]string, error) {
	t.Helper()
	c := Default()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	for _, sec := range secs {
		Register(fs, &c, Section(sec)...)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return Load(fs, &c, nil, nil)
}

// TestReplyCopyZeroRefusesHotBytes: on eBPF capture --reply-copy 0 passes
// on no reply payload, so no reply bytes reach keys and a reply-bytes
// threshold would never fire; refused in one line, but not with
// --capture-replies (whole replies are copied) or on AF_PACKET.
func TestReplyCopyZeroRefusesHotBytes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rules.yaml")
	os.WriteFile(file, []byte("rules: [{pattern: 'blob:*', hot-bytes: 10000000}]\n"), 0o600)
	const what = "--reply-copy 0 copies no reply payload, so "
	for _, tc := range []struct {
		args []string
		want string // "" when the settings are valid
	}{
		{[]string{"--reply-copy", "0", "--hot-bytes", "1000000"}, "--hot-bytes 1000000 would never make a key hot: remove --reply-copy 0"},
		{[]string{"--reply-copy", "0", "--capture", "cgroup", "--config", file}, "rule 0 (blob:*) with hot-bytes 10000000 would never make a key hot"},
		{[]string{"--reply-copy", "0", "--capture", "xdp", "--hot-bytes", "5"}, what},
		{[]string{"--reply-copy", "0", "--capture-replies", "--hot-bytes", "5"}, ""},
		{[]string{"--reply-copy", "0", "--capture", "afpacket", "--hot-bytes", "5"}, ""},
		{[]string{"--reply-copy", "0"}, ""},
		{[]string{"--reply-copy", "16", "--hot-bytes", "5"}, ""},
	} {
		wantRefusal(t, tc.args, what, tc.want)
	}
}

// wantRefusal checks the settings args: valid when want is "", else
// refused in one line containing both what and want.
func wantRefusal(t *testing.T, args []string, what, want string) {
	t.Helper()
	err := loadCaptureDetect(t, args)
	switch {
	case want == "" && err != nil:
		t.Errorf("%v: %v; want no error", args, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), what) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n")):
		t.Errorf("%v: %v; want one line containing %q", args, err, want)
	}
}

// TestKernelCountBytesWarning: with kernel counting and a reply-bytes
// threshold, the memcached and Tair ports' keys cannot be hot by their
// bytes (the programs frame Redis replies only): Load says so in one
// warning naming those ports, and says nothing when there are none, or
// when the kernel counts nothing.
func TestKernelCountBytesWarning(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" for no warning
	}{
		{[]string{"--kernel-count", "--hot-bytes", "1000000"}, "keys on tair=5191, memcache=11211 can be"}, // the default ports
		{[]string{"--kernel-count", "--hot-bytes", "1000000", "--port", "redis=6379", "--port", "memcache=11211"}, "keys on memcache=11211 can be hot by their reads but not by their bytes (--hot-bytes 1000000)"},
		{[]string{"--kernel-count", "--hot-bytes", "1000000", "--port", "redis=6379"}, ""},
		{[]string{"--kernel-count", "--port", "memcache=11211"}, ""},
		{[]string{"--hot-bytes", "1000000", "--port", "memcache=11211"}, ""},
		{[]string{"--kernel-count", "--capture", "afpacket", "--hot-bytes", "1000000", "--port", "tair=5191"}, ""},
	} {
		warnings, err := loadSections(t, tc.args, SecCapture, SecDetect, SecStream)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		got := strings.Join(warnings, "\n")
		switch {
		case tc.want == "" && got != "":
			t.Errorf("%v: warned %q; want none", tc.args, got)
		case tc.want != "" && (!strings.Contains(got, tc.want) || len(warnings) != 1):
			t.Errorf("%v: warned %q; want one warning containing %q", tc.args, got, tc.want)
		}
	}
}
