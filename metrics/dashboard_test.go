package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/hotsniff/hotsniff/internal/testing/promcheck"
)

// dashboards are the Grafana dashboards shipped: the one in docs/ and the
// chart's copy (helm's TestDashboardCopies keeps them equal; both are read
// so a drift cannot hide an unknown metric).
var dashboards = []string{"../docs/grafana-dashboard.json", "../helm/hotsniff/dashboards/hotsniff.json"}

// registered returns the metric names the daemon exports: this package's
// Collector and the Go and process collectors `hotsniff run` registers
// beside it, with a histogram's _bucket, _sum and _count series.
func registered(t *testing.T) map[string]bool {
	t.Helper()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for _, c := range []prometheus.Collector{New(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		ch := make(chan *prometheus.Desc, 256)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := fq.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("no name in %s", d)
			}
			names[m[1]] = true
		}
	}
	for _, h := range []string{"hotsniff_detection_latency_seconds"} {
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			names[h+s] = true
		}
	}
	return names
}

// dashboardExprs returns every query expression of a dashboard.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			out = append(out, q.Expr)
		}
	}
	return out
}

// promqlWords are PromQL's keywords: words in an expression that are not
// metric names (functions and aggregations are told by their "(").
var promqlWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true, "atan2": true,
}

// metricNames returns the metric names an expression selects. It strips
// string literals (label values, Grafana's $variables in them), range and
// subquery brackets, label matchers, and by/without/on/ignoring/group_x
// label lists; what is left that is a word not called as a function and
// not a keyword or number is a metric name. promtool has checked the
// syntax first (TestDashboardMetricsRegistered), so the text is PromQL.
func metricNames(expr string) []string {
	var b strings.Builder
	depth := map[byte]int{}
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			for i++; i < len(expr) && expr[i] != c; i++ {
				if expr[i] == '\\' && c != '`' {
					i++
				}
			}
			b.WriteByte(' ')
			continue
		case c == '[' || c == '{':
			depth[c]++
			b.WriteByte(' ')
			continue
		case c == ']':
			depth['[']--
			continue
		case c == '}':
			depth['{']--
			continue
		}
		if depth['['] == 0 && depth['{'] == 0 {
			b.WriteByte(c)
		}
	}
	s := regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`).ReplaceAllString(b.String(), " ")
	var out []string
	tok := regexp.MustCompile(`[0-9.][0-9a-zA-Z.]*(?:[eE][-+][0-9]+)?|[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	for _, m := range tok.FindAllStringSubmatch(s, -1) {
		w := m[0]
		if m[1] != "" || w[0] == '.' || (w[0] >= '0' && w[0] <= '9') || promqlWords[strings.ToLower(w)] {
			continue // a call, a number or duration, a keyword
		}
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	sort.Strings(out)
	return out
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string]string{
		`sum by (instance, iface) (rate(hotsniff_packets_total{instance=~"$instance", mode!="x{"}[$__rate_interval]))`: "hotsniff_packets_total",
		`histogram_quantile(0.99, sum by (le) (rate(a_bucket{instance=~"$instance"}[5m])))`:                            "a_bucket",
		`a{instance=~"$instance"} / on (instance) group_left (mode) b{x="y"} * 1e-9 > bool 0.5 offset 5m`:              "a b",
		`clamp_min(sum without (iface) (x:rate5m{q='it\'s'}), 1e-9) or vector(0) unless up`:                            "up x:rate5m",
		`max_over_time(c[10m:1m]) and d`: "c d",
	} {
		if got := strings.Join(metricNames(expr), " "); got != want {
			t.Errorf("metricNames(%s) = %q, want %q", expr, got, want)
		}
	}
}

// TestDashboardMetricsRegistered: every query of the shipped dashboards is
// valid PromQL (promtool) and selects only metrics the daemon exports, so
// a renamed or misspelled metric fails here instead of leaving a panel
// empty in production.
func TestDashboardMetricsRegistered(t *testing.T) {
	known := registered(t)
	grafana := strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h")
	for _, path := range dashboards {
		exprs := dashboardExprs(t, path)
		if len(exprs) == 0 {
			t.Fatalf("%s: no queries", path)
		}
		var parsed []string
		for _, e := range exprs {
			parsed = append(parsed, grafana.Replace(e))
			names := metricNames(e)
			if len(names) == 0 {
				t.Errorf("%s: no metric in %s", path, e)
			}
			for _, n := range names {
				if !known[n] {
					t.Errorf("%s: %s is not a metric hotsniff exports (query %s)", path, n, e)
				}
			}
		}
		promcheck.CheckExprs(t, parsed)
	}
}
