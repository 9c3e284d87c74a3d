package metrics

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hotsniff/hotsniff/decode"
)

// openLabels are dashboard metrics whose label set is open: a series per
// value seen (requests_total has one per command name), so none can be
// created ahead of the traffic that names it.
var openLabels = map[string]bool{"hotsniff_requests_total": true}

// TestDashboardSeriesInitialised: on a node that has attached capture but
// seen no traffic and no error yet, every metric a shipped dashboard
// queries already has its series, so no panel shows "no data" on a
// healthy node (hotsniff_decode_errors_total used to appear only with the
// first error).
func TestDashboardSeriesInitialised(t *testing.T) {
	c := New()
	c.Update(func(s *Snapshot) {
		s.Capture = []CaptureStat{{Iface: "eth0", Mode: "xdp"}}
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string][]*dto.Metric{}
	for _, mf := range mfs {
		name := mf.GetName()
		series[name] = mf.GetMetric()
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				series[name+s] = mf.GetMetric()
			}
		}
	}
	for _, path := range dashboards {
		for _, e := range dashboardExprs(t, path) {
			for _, n := range metricNames(e) {
				if !strings.HasPrefix(n, "hotsniff_") || openLabels[n] {
					continue
				}
				if len(series[n]) == 0 {
					t.Errorf("%s: %s has no series before its first event (query %s)", path, n, e)
				}
			}
		}
	}

	// Every reason of every decoder, at zero, per protocol.
	got := map[string]bool{}
	for _, m := range series["hotsniff_decode_errors_total"] {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		got[l["proto"]+"/"+l["reason"]] = true
	}
	for _, p := range decode.Protos() {
		if len(DecodeErrorReasons[p]) == 0 {
			t.Errorf("no decode error reasons for %s", p)
		}
		for _, r := range DecodeErrorReasons[p] {
			if !got[p.String()+"/"+r] {
				t.Errorf("hotsniff_decode_errors_total{proto=%q,reason=%q} missing", p, r)
			}
		}
	}
	for _, r := range DroppedReasons {
		found := false
		for _, m := range series["hotsniff_capture_dropped_total"] {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" && lp.GetValue() == r {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("hotsniff_capture_dropped_total{iface=\"eth0\",reason=%q} missing", r)
		}
	}
}

// TestDecodeErrorReasonsComplete: each decoder's Reasons() lists every
// Reason* constant the package declares, so a reason added to a decoder is
// pre-created too.
func TestDecodeErrorReasonsComplete(t *testing.T) {
	for p, dir := range map[decode.Proto]string{
		decode.ProtoRedis: "../decode/redis", decode.ProtoMemcache: "../decode/memcache", decode.ProtoTair: "../decode/tair",
	} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		var declared []string
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(af, func(n ast.Node) bool {
				vs, ok := n.(*ast.ValueSpec)
				if !ok {
					return true
				}
				for i, id := range vs.Names {
					if strings.HasPrefix(id.Name, "Reason") && i < len(vs.Values) {
						if bl, ok := vs.Values[i].(*ast.BasicLit); ok && bl.Kind == token.STRING {
							v, _ := strconv.Unquote(bl.Value)
							declared = append(declared, v)
						}
					}
				}
				return true
			})
		}
		if len(declared) == 0 {
			t.Fatalf("%s: no Reason constants found", dir)
		}
		for _, r := range declared {
			if !slices.Contains(DecodeErrorReasons[p], r) {
				t.Errorf("%s declares reason %q that Reasons() leaves out", dir, r)
			}
		}
	}
}
