package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README tells users to run .ci/run with sudo on their own machine, so it
// must not stop anything it did not start: no killing by name, no stopping
// of system services. Package installs must not start daemons either (the
// tests start their own servers on free ports), which a policy-rc.d that
// forbids service starts achieves while apt-get runs.
func TestCIStopsNothingItDidNotStart(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	var code []string // the script without comments
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.Index(line, "#"); i >= 0 && !strings.Contains(line[:i], "'") && !strings.Contains(line[:i], `"`) {
			line = line[:i]
		}
		code = append(code, line)
	}
	script := strings.Join(code, "\n")
	for _, bad := range []struct{ what, re string }{
		{"kills processes by name", `\b(pkill|killall|pgrep)\b`},
		{"stops a system service", `\bservice\b[^\n]*\b(stop|restart|kill)\b`},
		{"stops a systemd unit", `\bsystemctl\b[^\n]*\b(stop|restart|kill|disable|mask)\b`},
		{"stops an init script", `/etc/init\.d/\S+\s+(stop|restart)`},
		{"kills a process not by the PID it started", `\bkill\b\s+(-\d+\s+)?[^$\s-]`},
	} {
		if m := regexp.MustCompile(bad.re).FindString(script); m != "" {
			t.Errorf(".ci/run %s (%q): it must leave alone what it did not start", bad.what, m)
		}
	}

	// Installs happen with service starts forbidden, on a fresh machine
	// after apt-get update, and the policy is removed afterwards.
	policy := strings.Index(script, "policy-rc.d")
	exit101 := strings.Index(script, "exit 101")
	update := strings.Index(script, "apt-get update")
	install := strings.Index(script, "apt-get install")
	removed := regexp.MustCompile(`rm -f "?\$policy"?`).FindAllStringIndex(script, -1)
	switch {
	case policy < 0 || exit101 < 0:
		t.Error(".ci/run installs packages without a policy-rc.d forbidding their daemons to start (exit 101)")
	case install < 0 || update < 0 || update > install:
		t.Error(".ci/run must run apt-get update before apt-get install (a fresh Debian machine has no package lists)")
	case policy > install || exit101 > install:
		t.Error(".ci/run puts its policy-rc.d in place only after the first apt-get install")
	case len(removed) == 0:
		t.Error(".ci/run leaves its policy-rc.d behind: remove it after the installs")
	}
	for _, pkg := range []string{"redis-server", "memcached", "prometheus", "chromium", "tshark", "clang"} {
		if !regexp.MustCompile(`\b` + pkg + `\b`).MatchString(script[max(install, 0):]) {
			t.Errorf(".ci/run no longer installs %s", pkg)
		}
	}
}
