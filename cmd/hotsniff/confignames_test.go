package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// TestFlagTypeErrors: a flag value of the wrong type is one line naming the
// flag and what it wants, never Go's strconv message.
func TestFlagTypeErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--hot-qps", "fast", "x.pcap"}, `hotsniff: --hot-qps "fast": want a number (e.g. 1000)` + "\n"},
		{[]string{"replay", "--ttl", "5", "x.pcap"}, `hotsniff: --ttl "5": want a duration such as 500ms, 30s or 2m (e.g. 1m0s)` + "\n"},
		{[]string{"replay", "--buckets", "lots", "x.pcap"}, `hotsniff: --buckets "lots": want a whole number (e.g. 4096)` + "\n"},
		{[]string{"decode", "--max-flows=1.5", "x.pcap"}, `hotsniff: --max-flows "1.5": want a whole number`},
		{[]string{"top", "--once", "--interval", "often"}, `hotsniff: --interval "often": want a duration`},
		{[]string{"run", "--capture-replies=maybe"}, `hotsniff: --capture-replies "maybe": want true or false` + "\n"},
	} {
		_, errOut, code := runCLI(t, c.args...)
		if code != 2 || !strings.HasPrefix(errOut, c.want) || strings.Count(errOut, "\n") != 1 || strings.Contains(errOut, "strconv") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// TestConfigSpellings: the documented spelling (flag names), the snake_case
// of earlier documents and a nested tair block set the same settings; the
// flags and the environment set them too.
func TestConfigSpellings(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	kebab := write("kebab.yaml", `hot-qps: 2000
detector: tair
ttl: 30s
refresh-every: 10s
window: 2s
cold-ratio: 0.5
buckets: 8192
max-hot: 256
invalidate-gap: 5ms
tair-buckets: 2048
tair-sample-max: 10000
tair-sigma-n: 1.5
tair-reap-max: 16
rules: [{pattern: "a*", hot-qps: 10}]
`)
	snake := write("snake.yaml", `hot_qps: 2000
detector: tair
ttl: 30s
refresh_every: 10s
window: 2s
cold_ratio: 0.5
buckets: 8192
max_hot: 256
invalidate_gap: 5ms
tair: {buckets: 2048, sample_max: 10000, sigma_n: 1.5, reap_max: 16}
rules: [{pattern: "a*", hot_qps: 10}]
`)
	want := "config ok: ports [5191 6379 11211], capture auto, hot-qps 2000, detector tair, 1 rules, 0 ignore patterns\n" +
		"detector tair: ttl 30s, refresh-every 10s, window 2s, cold-ratio 0.5, buckets 8192, max-hot 256, invalidate-gap 5ms, tair-buckets 2048, tair-sample-max 10000, tair-sigma-n 1.5, tair-reap-max 16\n"
	for _, p := range []string{kebab, snake} {
		out, errOut, code := runCLI(t, "run", "--config", p, "--config-check")
		// The first two lines sum up; every setting follows by section.
		if code != 0 || !strings.HasPrefix(out, want) || !strings.Contains(out, "\ndetect: hot-qps 2000, ") || !strings.Contains(out, "cold-ratio 0.5") {
			t.Errorf("%s: exit %d %s\n got %q\nwant %q", filepath.Base(p), code, errOut, out, want)
		}
	}
	t.Setenv("HOTSNIFF_COLD_RATIO", "0.9")
	t.Setenv("HOTSNIFF_TAIR_SAMPLE_MAX", "777")
	out, _, _ := runCLI(t, "run", "--config", snake, "--config-check", "--buckets", "64")
	for _, s := range []string{"cold-ratio 0.9", "tair-sample-max 777", "buckets 64"} {
		if !strings.Contains(out, s) {
			t.Errorf("env/flags not applied: want %q in %q", s, out)
		}
	}
}

// docConfigMarker starts the yaml blocks of the docs that are hotsniff
// config files.
var docConfigMarker = regexp.MustCompile(`^# (hotsniff\.yaml|/etc/hotsniff/config\.yaml)`)

// TestDocConfigs loads every example config of the README and docs/, as
// written, with the real loader; and checks no yaml block that looks like a
// config escapes the test by lacking the marker.
func TestDocConfigs(t *testing.T) {
	docs, _ := filepath.Glob("../../docs/*.md")
	docs = append(docs, "../../README.md", "../../helm/hotsniff/README.md")
	known := map[string]bool{"rules": true, "ignore": true}
	newRootCmd().Flags() // root flags: none; walk the commands
	for _, c := range newRootCmd().Commands() {
		c.Flags().VisitAll(func(f *pflag.Flag) { known[f.Name] = true })
	}
	fence := regexp.MustCompile("(?ms)^```yaml\\n(.*?)^```")
	found := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range fence.FindAllStringSubmatch(string(b), -1) {
			block := m[1]
			name := filepath.Base(doc) + " yaml block " + string(rune('1'+i))
			if !docConfigMarker.MatchString(block) {
				var top map[string]any
				if yaml.Unmarshal([]byte(block), &top) == nil && len(top) > 0 {
					all := true
					for k := range top {
						all = all && known[strings.ReplaceAll(k, "_", "-")]
					}
					if all {
						t.Errorf("%s looks like a hotsniff config: start it with \"# hotsniff.yaml\" so it is tested", name)
					}
				}
				continue
			}
			found++
			p := filepath.Join(t.TempDir(), "doc.yaml")
			os.WriteFile(p, []byte(block), 0o644)
			out, errOut, code := runCLI(t, "run", "--config", p, "--config-check")
			if code != 0 || !strings.HasPrefix(out, "config ok") {
				t.Errorf("%s does not load: exit %d %s%s\n%s", name, code, out, errOut, block)
			}
			// replay reads the same file (keys of run only are accepted).
			if _, errOut, code := runCLI(t, "replay", "--config", p, "../../testdata/redis/get-p1.pcap"); code != 0 {
				t.Errorf("%s: replay --config: exit %d %s", name, code, errOut)
			}
		}
	}
	if found < 4 {
		t.Errorf("found %d example configs in the docs, want at least 4 (README, detection, kubernetes, chart README)", found)
	}
}
