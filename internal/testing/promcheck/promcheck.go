// Package promcheck lints a Prometheus text exposition with the real
// `promtool check metrics` (Debian package "prometheus"), so tests of the
// /metrics endpoint catch bad names, missing HELP, wrong suffixes and
// malformed lines the way Prometheus itself would.
package promcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Problems runs `promtool check metrics` at path promtool on text and returns
// every problem it reports, one per entry (empty when the exposition is
// clean). err is set only when promtool could not be run at all.
//
// promtool prints lint findings on stdout and exits 3; a text that does not
// parse is reported on stderr with exit 1. Both count as problems.
func Problems(promtool string, text []byte) (problems []string, err error) {
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(text)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	for _, line := range strings.Split(stdout.String()+"\n"+stderr.String(), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			problems = append(problems, line)
		}
	}
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		return nil, runErr // could not start promtool
	}
	if runErr != nil && len(problems) == 0 {
		problems = append(problems, "promtool check metrics: "+runErr.Error())
	}
	return problems, nil
}

// Path returns the promtool binary to use, or "" when none is installed.
// PROMTOOL overrides the lookup on PATH.
func Path() string {
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		return ""
	}
	return p
}

// Check fails t with every problem `promtool check metrics` reports on
// metricsText. Without promtool it skips t, except under CI=true, where a
// missing promtool is a broken CI setup and fails t
// (apt-get install prometheus provides it).
func Check(t testing.TB, metricsText []byte) {
	t.Helper()
	promtool := need(t)
	problems, err := Problems(promtool, metricsText)
	if err != nil {
		t.Fatalf("running %s check metrics: %v", promtool, err)
	}
	for _, p := range problems {
		t.Errorf("promtool check metrics: %s", p)
	}
}

// ExprProblems runs the real PromQL parser (`promtool check rules`, on a
// rule file recording each expression) over exprs and returns what it
// rejects ("" when it accepts them all). err is set only when promtool
// could not be run.
func ExprProblems(promtool string, exprs []string) (string, error) {
	var b strings.Builder
	b.WriteString("groups:\n- name: exprs\n  rules:\n")
	for i, e := range exprs {
		// A JSON string is a YAML string: no quoting of our own.
		q, _ := json.Marshal(e)
		fmt.Fprintf(&b, "  - record: expr_%d\n    expr: %s\n", i, q)
	}
	dir, err := os.MkdirTemp("", "promcheck")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "exprs.rules.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return "", err
	}
	out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return "", err
	}
	if err != nil {
		return strings.TrimSpace(string(out)), nil
	}
	return "", nil
}

// CheckExprs fails t unless promtool's PromQL parser accepts every one of
// exprs (see ExprProblems): a dashboard query with a typo then fails a
// test, not a panel. Like Check, it skips without promtool except under
// CI=true.
func CheckExprs(t testing.TB, exprs []string) {
	t.Helper()
	promtool := need(t)
	problems, err := ExprProblems(promtool, exprs)
	if err != nil {
		t.Fatalf("running %s check rules: %v", promtool, err)
	}
	if problems != "" {
		t.Errorf("promtool check rules rejects an expression:\n%s", problems)
	}
}

// need returns promtool's path. Without promtool it skips t, except under
// CI=true, where a missing promtool is a broken CI setup and fails t.
func need(t testing.TB) string {
	t.Helper()
	promtool := Path()
	if promtool == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not installed (CI must install Debian package prometheus)")
		}
		t.Skip("promtool not installed (apt-get install prometheus)")
	}
	return promtool
}
