package perf

import (
	"fmt"
	"testing"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// TestRunExact is the short end-to-end check `go test ./...` runs: the real
// `hotsniff run` binary captures redis-benchmark GETs in each eBPF mode and
// must decode every one of them, with no ring-buffer drop and no truncated
// byte. (capture/ebpfsrc checks the same at the capture level, byte for
// byte; this adds the stream, decode and metrics path of the binary.)
func TestRunExact(t *testing.T) {
	netnstest.RequireRoot(t)
	netnstest.Need(t, "redis-benchmark")
	bin := buildHotsniff(t)
	p := netnstest.NewPair(t)
	srv := p.StartRedis(t, 6379)
	const n = 5000
	for _, mode := range []string{"tc", "xdp"} {
		for _, pipe := range []int{1, 16} {
			t.Run(fmt.Sprintf("%s/P%d", mode, pipe), func(t *testing.T) {
				resetStats(t, srv)
				s := startSniffer(t, bin, p, srv, mode)
				defer s.stop(t)
				benchmark(t, srv, n, pipe)
				sent := serverGets(t, srv)
				m := s.waitRequests(t, float64(sent))
				checkRun(t, m, sent)
			})
		}
	}
}

// checkRun asserts exactly n GETs (as counted by the server) were decoded and nothing was lost.
func checkRun(t testing.TB, m map[string]float64, n int) {
	t.Helper()
	gets := series(m, "hotsniff_requests_total", `op="GET"`)
	if gets != float64(n) {
		t.Errorf("decoded %v GETs, the server executed %d", gets, n)
	}
	for _, name := range []string{"hotsniff_capture_dropped_total", "hotsniff_capture_truncated_bytes_total",
		"hotsniff_stream_gaps_total", "hotsniff_decode_errors_total"} {
		if v := sum(m, name); v != 0 {
			t.Errorf("%s = %v, want 0", name, v)
		}
	}
}
