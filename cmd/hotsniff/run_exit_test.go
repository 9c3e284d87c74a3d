package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// TestRunExitLostEvents: the channel's Redis is unreachable for the whole
// run, so the hot events the daemon made are still queued at SIGTERM. It
// must exit 1 with one line saying how many were not published, as replay
// does, rather than 0.
func TestRunExitLostEvents(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	cache := p.StartRedis(t, 6379)
	// Nothing listens on 6391 inside the namespace.
	d := launchDaemon(t, p, 19464, "--capture", "tc", "--port", "redis=6379", "--hot-qps", "50", "--redis-url", "redis://127.0.0.1:6391")
	waitChannelDown(t, d)

	rc := redis.NewClient(&redis.Options{Addr: cache.String()})
	defer rc.Close()
	ctx := context.Background()
	deadline := time.Now().Add(15 * time.Second)
	for {
		for range 200 {
			rc.Get(ctx, "lost:hot")
		}
		resp, err := http.Get(d.http + "/hotkeys")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), "lost:hot") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("lost:hot never hot\n%s", d.log())
		}
	}
	err := d.stop(t, syscall.SIGTERM)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit %v after losing events, want status 1\n%s", err, d.log())
	}
	lines := d.stderr.Lines()
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "hotsniff: publish on shutdown: ") || !strings.Contains(last, "event(s) not published to redis://127.0.0.1:6391: channel Redis unreachable") {
		t.Errorf("last line %q, want the lost-events error", last)
	}
	t.Logf("%s", last)
	assertNothingAttached(t, p)
}

// waitChannelDown waits until the daemon captures and says, in /readyz (503:
// the node's previous hot set cannot be read) and in hotsniff_channel_up,
// that the channel Redis is unreachable.
func waitChannelDown(t *testing.T, d *daemonProc) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := d.get("/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "channel Redis unreachable") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %d %q, want 503 saying the channel is unreachable\n%s", code, body, d.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, m := d.waitMetricBelow(t, "hotsniff_channel_up", 0); m["hotsniff_channel_up"] != 0 {
		t.Fatalf("hotsniff_channel_up = %v, want 0", m["hotsniff_channel_up"])
	}
}

// waitMetricBelow polls /metrics until name is present and at most want.
func (d *daemonProc) waitMetricBelow(t *testing.T, name string, want float64) ([]byte, map[string]float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		body, m := d.scrape(t)
		if v, ok := m[name]; ok && v <= want || time.Now().After(deadline) {
			return body, m
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRunChannelDownStops: with the channel Redis unreachable and nothing to
// publish, SIGTERM stops the daemon at once (it does not wait out the flush
// deadline for a server that has been down) with status 0 and a log line
// saying what was and was not lost, instead of "0 event(s) not published".
func TestRunChannelDownStops(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	p.StartRedis(t, 6379)
	d := launchDaemon(t, p, 19464, "--capture", "tc", "--port", "redis=6379", "--redis-url", "redis://127.0.0.1:6391")
	waitChannelDown(t, d)
	t0 := time.Now()
	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("exit %v with nothing lost, want status 0\n%s", err, d.log())
	}
	if took := time.Since(t0); took > 3*time.Second {
		t.Errorf("stopping took %v", took)
	}
	log := d.log()
	if strings.Contains(log, "0 event(s) not published") || !strings.Contains(log, "stopped with the channel Redis unreachable: no event lost") {
		t.Errorf("shutdown log does not say what happened:\n%s", log)
	}
	assertNothingAttached(t, p)
}
