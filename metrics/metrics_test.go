package metrics

import (
	"bytes"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/internal/testing/promcheck"
)

// TestExposition renders a snapshot and checks the contract's series and
// labels, that promtool accepts it, and that every protocol is present
// from the first scrape (so rate() works before any traffic).
func TestExposition(t *testing.T) {
	c := New()
	c.Update(func(s *Snapshot) {
		s.Capture = []CaptureStat{{Iface: "eth0", Mode: "xdp", Packets: 10, Dropped: map[string]uint64{"ringbuf_full": 1, "kernel": 0}, TruncatedBytes: 5}}
		s.Requests = map[decode.OpKey]uint64{{Proto: decode.ProtoRedis, Op: "MGET"}: 3}
		s.Keys = map[decode.Proto]uint64{decode.ProtoRedis: 7}
		s.DecodeErrors = map[decode.ErrKey]uint64{{Proto: decode.ProtoMemcache, Reason: "bad_line"}: 2}
		s.Gaps = map[decode.Proto]uint64{decode.ProtoTair: 1}
		s.HotKeys = map[decode.Proto]int{decode.ProtoRedis: 2}
		s.Published = map[string]uint64{"hot": 4}
		s.PublishErrors = 1
		s.DetectionLatency = []float64{0.12, 0.2}
		s.Absorbed = Absorbed{Reports: 9, Hits: 4213, Rejected: map[string]uint64{"unpaired": 2}}
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			t.Fatal(err)
		}
	}
	text := buf.String()
	for _, want := range []string{
		`hotsniff_packets_total{iface="eth0",mode="xdp"} 10`,
		`hotsniff_capture_dropped_total{iface="eth0",reason="ringbuf_full"} 1`,
		`hotsniff_capture_truncated_bytes_total{iface="eth0"} 5`,
		`hotsniff_requests_total{op="MGET",proto="redis"} 3`,
		`hotsniff_keys_total{proto="redis"} 7`,
		`hotsniff_keys_total{proto="tair"} 0`,
		`hotsniff_decode_errors_total{proto="memcache",reason="bad_line"} 2`,
		`hotsniff_stream_gaps_total{proto="tair"} 1`,
		`hotsniff_hot_keys{proto="redis"} 2`,
		`hotsniff_published_total{type="hot"} 4`,
		`hotsniff_published_total{type="invalidate"} 0`,
		`hotsniff_publish_errors_total 1`,
		`hotsniff_detection_latency_seconds_count 2`,
		`hotsniff_absorbed_reports_total 9`,
		`hotsniff_absorbed_hits_total 4213`,
		`hotsniff_absorbed_rejected_total{reason="unpaired"} 2`,
		`hotsniff_absorbed_rejected_total{reason="not_hot"} 0`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("missing %s", want)
		}
	}
	promcheck.Check(t, buf.Bytes())
}
