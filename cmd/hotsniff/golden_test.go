package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// partial describes fixtures whose capture starts in the middle of traffic:
// only keys matching exact must equal the truth; other keys must match
// allowed (keys the clients really sent), or they are phantoms.
var partial = map[string]struct{ exact, allowed *regexp.Regexp }{
	"redis/midstream":    {regexp.MustCompile(`^mid:`), regexp.MustCompile(`^pre:[01]:\d{1,4}$`)},
	"memcache/midstream": {regexp.MustCompile(`^mid:`), regexp.MustCompile(`^pre:`)},
}

// TestFixtureCounts decodes every committed capture and compares the
// --count output with the truth its generator wrote from what the clients
// were told to send.
func TestFixtureCounts(t *testing.T) {
	goldens, _ := filepath.Glob("../../testdata/*/*.count.golden")
	if len(goldens) == 0 {
		t.Fatal("no fixtures found")
	}
	for _, golden := range goldens {
		base := strings.TrimSuffix(golden, ".count.golden")
		var pcap string
		for _, ext := range []string{".pcap", ".pcapng", ".pcap.gz", ".pcapng.gz"} {
			if _, err := os.Stat(base + ext); err == nil {
				pcap = base + ext
				break
			}
		}
		if pcap == "" {
			t.Fatalf("no capture beside %s", golden)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.ToSlash(golden), "../../testdata/"), ".count.golden")
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			out, errOut, code := runCLI(t, "decode", "--count", pcap)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			got := out
			if p, ok := partial[name]; ok {
				got = checkPartial(t, out, p.exact, p.allowed)
			}
			if got != string(want) {
				t.Errorf("counts differ from the clients' truth\n%s\nsummary: %s", diffLines(string(want), got), errOut)
			}
		})
	}
}

// checkPartial keeps the lines of keys under exact truth and checks that
// every other key is one the clients really sent.
func checkPartial(t *testing.T, out string, exact, allowed *regexp.Regexp) string {
	t.Helper()
	var kept strings.Builder
	extra := 0
	for _, line := range strings.SplitAfter(out, "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(strings.TrimSuffix(line, "\n"), "\t", 5)
		if len(f) != 5 {
			t.Fatalf("bad --count line %q", line)
		}
		switch {
		case exact.MatchString(f[4]):
			kept.WriteString(line)
		case allowed.MatchString(f[4]):
			extra++
		default:
			t.Errorf("phantom key %q (no client sent it)", f[4])
		}
	}
	t.Logf("%d keys of requests that started before the capture were recovered", extra)
	return kept.String()
}

// diffLines shows the first differing lines of two outputs.
func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, c string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			c = g[i]
		}
		if a != c {
			b.WriteString("line " + strconv.Itoa(i+1) + ":\n  want " + a + "\n  got  " + c + "\n")
			if shown++; shown > 10 {
				b.WriteString("...\n")
				break
			}
		}
	}
	return b.String()
}
