package conformance

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/redis/go-redis/v9"
)

// TestLiveHotsniffRun runs every shim against the real thing: `hotsniff
// run` capturing on a veth in front of a redis-server in a network
// namespace and publishing to a channel server there, each shim's adapter
// on the host side reading one key in a loop. The daemon must find the key
// hot from the adapter's own traffic; then, by Redis's INFO commandstats,
// at least 99% of the key's reads must be served locally, and after a
// foreign write (which the daemon also sees and turns into an invalidate)
// no read that starts more than LocalTTL+StaleGrace (150 ms) later may see
// the old value.
func TestLiveHotsniffRun(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := buildHotsniff(t)
	p := netnstest.NewPair(t)
	cache := p.StartRedis(t, 6379)
	chanAddr := p.StartRedis(t, 6390)
	listen := fmt.Sprintf("%s:%d", p.NSIP, 19465)
	cmd := p.Command(context.Background(), bin, "run", "--iface", p.NSIface, "--listen", listen, "--node", "live-node",
		"--port", "redis=6379", "--hot-qps", "5", "--redis-url", "redis://127.0.0.1:6390")
	logBuf := &testutil.Buffer{}
	cmd.Stdout, cmd.Stderr = io.Discard, logBuf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("hotsniff run log:\n%s", logBuf.String())
		}
	})
	waitReady(t, "http://"+listen+"/readyz")

	rc := redis.NewClient(&redis.Options{Addr: cache.String()})
	t.Cleanup(func() { rc.Close() })
	ctx := context.Background()
	only := os.Getenv("HOTSNIFF_CONFORMANCE_SHIMS")
	for _, l := range langs(t) {
		if only != "" && !strings.Contains(","+only+",", ","+l.name+",") {
			continue
		}
		t.Run(l.name, func(t *testing.T) {
			l.prepare(t)
			key := "live:" + l.name
			if err := rc.Set(ctx, key, "v1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			a := startAdapter(t, l, adapterConfig{Cache: cache.String(), ChannelAddr: chanAddr.String(), Channel: "hotsniff:hotkeys"})
			// The adapter's own reads make the key hot.
			deadline := time.Now().Add(30 * time.Second)
			for a.do(map[string]any{"op": "hot", "key": key})["hot"] != true {
				if time.Now().After(deadline) {
					t.Fatalf("%s never became hot", key)
				}
				a.do(map[string]any{"op": "load", "key": key, "ms": 200})
			}
			a.do(map[string]any{"op": "load", "key": key, "ms": 300}) // admitted and cached
			if err := rc.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			m0 := scrape(t, "http://"+listen+"/metrics")
			r := a.do(map[string]any{"op": "load", "key": key, "want": "v1", "ms": 2000, "threads": 4})
			st := cmdstats(t, rc)
			reads, _ := r["reads"].(float64)
			bad, _ := r["bad"].(float64)
			gets := st["get"]
			local := 1 - float64(gets)/reads
			t.Logf("%s: %.0f reads of %s in 2s, %d GETs reached Redis (%.3f%% served locally), %d ECHO reports",
				l.name, reads, key, gets, 100*local, st["echo"])
			if bad != 0 {
				t.Errorf("%v reads returned another value than v1", bad)
			}
			if local < 0.99 {
				t.Errorf("%.2f%% of reads served locally, want at least 99%%", 100*local)
			}
			// The daemon pairs each report with the read before it on the
			// same connection: none may be unpaired or malformed.
			m1 := scrape(t, "http://"+listen+"/metrics")
			credited := m1["hotsniff_absorbed_reports_total"] - m0["hotsniff_absorbed_reports_total"]
			hits := m1["hotsniff_absorbed_hits_total"] - m0["hotsniff_absorbed_hits_total"]
			var rejected []string
			for k, v := range m1 {
				if strings.HasPrefix(k, "hotsniff_absorbed_rejected_total") && v != m0[k] {
					rejected = append(rejected, fmt.Sprintf("%s +%v", k, v-m0[k]))
				}
			}
			t.Logf("%s: the daemon credited %v reports (%v hits); rejected: %v", l.name, credited, hits, rejected)
			if credited < 1 {
				t.Errorf("the daemon credited no absorbed-demand report")
			}
			for _, r := range rejected {
				if strings.Contains(r, "unpaired") || strings.Contains(r, "malformed") {
					t.Errorf("reports rejected: %s", r)
				}
			}

			// A foreign write, as another application server would make.
			a.send(map[string]any{"op": "watch", "key": key, "want": "v2", "ms": 800})
			time.Sleep(200 * time.Millisecond)
			if err := rc.Set(ctx, key, "v2", 0).Err(); err != nil {
				t.Fatal(err)
			}
			done := time.Now().UnixNano()
			w := a.recv()
			lastBad, _ := w["last_bad_ns"].(float64)
			stale := max(time.Duration(int64(lastBad)-done), 0)
			t.Logf("%s: after a foreign write the last read that saw the old value started %v after it (bound 150ms); %v reads", l.name, stale, w["reads"])
			if stale > 150*time.Millisecond {
				t.Errorf("stale %v after the write, bound 150ms", stale)
			}
			a.do(map[string]any{"op": "close"})
		})
	}
}

func cmdstats(t *testing.T, rc *redis.Client) map[string]int {
	t.Helper()
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		var n int
		fmt.Sscanf(fields, "calls=%d", &n)
		out[name] = n
	}
	return out
}

// scrape reads a Prometheus text page into series -> value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[i+1:], &v); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

func waitReady(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("hotsniff run not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// buildHotsniff builds the daemon once into the test's temp dir.
func buildHotsniff(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		// CI puts Go in /usr/local/go/bin; a root shell may not have it on PATH.
		goBin = "/usr/local/go/bin/go"
	}
	out := filepath.Join(t.TempDir(), "hotsniff")
	cmd := exec.Command(goBin, "build", "-o", out, "./cmd/hotsniff")
	cmd.Dir = repoDir(t, "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/hotsniff: %v\n%s", err, b)
	}
	return out
}
