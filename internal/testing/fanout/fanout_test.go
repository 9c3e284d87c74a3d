package fanout

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
)

// startCluster starts three masters and joins them with redis-cli.
func startCluster(t testing.TB, extra ...string) []string {
	t.Helper()
	dir := t.TempDir()
	var addrs []string
	for range 3 {
		p := testutil.ClusterPort(t)
		args := append([]string{"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", p)),
			"--cluster-node-timeout", "5000"}, extra...)
		s := testutil.StartRedisOn(t, p, args...)
		addrs = append(addrs, s.Addr)
	}
	testutil.CreateCluster(t, addrs)
	return addrs
}

func check(t *testing.T, r *Result) {
	t.Helper()
	t.Log(r.Row())
	want := float64(r.Events) * float64(r.Subscribers)
	if r.Events == 0 || float64(r.Deliveries) < 0.98*want {
		t.Errorf("%d events × %d subscribers: %d delivered", r.Events, r.Subscribers, r.Deliveries)
	}
	if r.LagP50 <= 0 || r.RedisCPU <= 0 {
		t.Errorf("no lag or CPU measured: %+v", r)
	}
}

// TestFanoutSmoke is the short version run by `make test`: a few
// publishers and subscribers on a real server and a real 3-master cluster,
// every event delivered to every subscriber, in both formats.
func TestFanoutSmoke(t *testing.T) {
	if _, err := RaiseFileLimit(); err != nil {
		t.Fatal(err)
	}
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	for _, f := range []string{publish.FormatV1, publish.FormatV2} {
		r, err := Run(ctx, Config{Addrs: []string{srv.Addr}, Publishers: 2, Subscribers: 50, Rate: 400,
			Format: f, Warmup: 300 * time.Millisecond, Duration: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		check(t, r)
	}
	addrs := startCluster(t)
	r, err := Run(ctx, Config{Addrs: addrs, Cluster: true, Publishers: 2, Subscribers: 20, Rate: 200,
		Format: publish.FormatV2, Warmup: 500 * time.Millisecond, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	check(t, r)
}

// TestFanoutTable is the full benchmark (minutes): HOTSNIFF_FANOUT=1 go test
// -run TestFanoutTable -v -timeout 30m ./internal/testing/fanout. It prints the
// table in docs/channel-sizing.md.
func TestFanoutTable(t *testing.T) {
	if os.Getenv("HOTSNIFF_FANOUT") != "1" {
		t.Skip("set HOTSNIFF_FANOUT=1 for the full fan-out benchmark")
	}
	limit, err := RaiseFileLimit()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("open files limit %d", limit)
	ctx := context.Background()
	dur := 5 * time.Second
	type row struct {
		n, m   int
		rate   float64
		format string
		window time.Duration
	}
	rows := []row{
		{4, 2000, 25, publish.FormatV1, 0},
		{4, 2000, 50, publish.FormatV1, 0},
		{4, 2000, 100, publish.FormatV1, 0},
		{4, 2000, 100, publish.FormatV2, 20 * time.Millisecond},
		{4, 2000, 250, publish.FormatV2, 20 * time.Millisecond},
		{4, 1000, 100, publish.FormatV1, 0},
		{4, 1000, 200, publish.FormatV1, 0},
		{4, 1000, 500, publish.FormatV2, 20 * time.Millisecond},
	}
	if s := os.Getenv("HOTSNIFF_FANOUT_ROWS"); s != "" {
		var keep []row
		for _, f := range strings.Split(s, ",") {
			var i int
			fmt.Sscan(f, &i)
			keep = append(keep, rows[i])
		}
		rows = keep
	}
	var lines []string
	srv := testutil.StartRedis(t, "--maxclients", "10000")
	for _, rw := range rows {
		r, err := Run(ctx, Config{Addrs: []string{srv.Addr}, Publishers: rw.n, Subscribers: rw.m, Rate: rw.rate,
			Format: rw.format, BatchWindow: rw.window, Warmup: 2 * time.Second, Duration: dur})
		if err != nil {
			t.Fatal(err)
		}
		t.Log(r.Row(), " load ", loadavg())
		lines = append(lines, r.Row())
	}
	srv.Stop()
	if os.Getenv("HOTSNIFF_FANOUT_CLUSTER") != "0" {
		addrs := startCluster(t, "--maxclients", "10000")
		for _, rw := range []row{
			{4, 2000, 50, publish.FormatV1, 0},
			{4, 2000, 250, publish.FormatV2, 20 * time.Millisecond},
		} {
			r, err := Run(ctx, Config{Addrs: addrs, Cluster: true, Publishers: rw.n, Subscribers: rw.m, Rate: rw.rate,
				Format: rw.format, BatchWindow: rw.window, Warmup: 3 * time.Second, Duration: dur})
			if err != nil {
				t.Fatal(err)
			}
			t.Log(r.Row(), " load ", loadavg())
			lines = append(lines, r.Row())
		}
	}
	fmt.Println(Header)
	for _, l := range lines {
		fmt.Println(l)
	}
}

// loadavg is the machine's load average: other work on it inflates lag.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}
