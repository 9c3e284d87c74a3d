package promcheck

import (
	"os"
	"strings"
	"testing"
)

// good is a hand-written exposition shaped like hotsniff's /metrics.
const good = `# HELP hotsniff_packets_total Packets captured.
# TYPE hotsniff_packets_total counter
hotsniff_packets_total{iface="eth0",mode="xdp"} 1234
# HELP hotsniff_hot_keys Keys currently hot.
# TYPE hotsniff_hot_keys gauge
hotsniff_hot_keys{proto="redis"} 3
# HELP hotsniff_publish_errors_total Failed publishes.
# TYPE hotsniff_publish_errors_total counter
hotsniff_publish_errors_total 0
# HELP hotsniff_detection_latency_seconds Time from the packet to the hot event.
# TYPE hotsniff_detection_latency_seconds histogram
hotsniff_detection_latency_seconds_bucket{le="0.1"} 1
hotsniff_detection_latency_seconds_bucket{le="1"} 2
hotsniff_detection_latency_seconds_bucket{le="+Inf"} 2
hotsniff_detection_latency_seconds_sum 0.6
hotsniff_detection_latency_seconds_count 2
`

func promtoolOrSkip(t *testing.T) string {
	t.Helper()
	p := Path()
	if p == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not installed (CI must install Debian package prometheus)")
		}
		t.Skip("promtool not installed")
	}
	return p
}

func TestCheckGood(t *testing.T) {
	Check(t, []byte(good))
}

func TestProblemsCatchesLint(t *testing.T) {
	promtool := promtoolOrSkip(t)
	// A counter without the _total suffix and without HELP.
	bad := good + "# TYPE hotsniff_bad_counter counter\nhotsniff_bad_counter 1\n"
	problems, err := Problems(promtool, []byte(bad))
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(problems, "\n")
	if !strings.Contains(all, "hotsniff_bad_counter") || !strings.Contains(all, "_total") {
		t.Fatalf("promtool did not flag the bad counter; got %q", problems)
	}
	for _, p := range problems {
		if !strings.Contains(p, "hotsniff_bad_counter") {
			t.Errorf("unexpected problem on a good metric: %q", p)
		}
	}
}

func TestProblemsCatchesParseError(t *testing.T) {
	promtool := promtoolOrSkip(t)
	problems, err := Problems(promtool, []byte(good+"hotsniff_broken{iface=\"eth0\" 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) == 0 {
		t.Fatal("promtool accepted a malformed line")
	}
}

func TestProblemsClean(t *testing.T) {
	promtool := promtoolOrSkip(t)
	problems, err := Problems(promtool, []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 0 {
		t.Fatalf("clean exposition reported: %q", problems)
	}
}

func TestProblemsMissingBinary(t *testing.T) {
	if _, err := Problems("/nonexistent/promtool", []byte(good)); err == nil {
		t.Fatal("want an error for a missing promtool")
	}
}

func TestExprProblems(t *testing.T) {
	promtool := promtoolOrSkip(t)
	good := []string{`sum by (iface) (rate(hotsniff_packets_total{instance=~".*"}[1m]))`, `histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m])))`}
	if p, err := ExprProblems(promtool, good); err != nil || p != "" {
		t.Fatalf("good expressions: %q, %v", p, err)
	}
	p, err := ExprProblems(promtool, append(good, `sum(rate(hotsniff_packets_total{instance=~".*"}[1m])`))
	if err != nil {
		t.Fatal(err)
	}
	if p == "" {
		t.Fatal("promtool accepted an unbalanced expression")
	}
}
