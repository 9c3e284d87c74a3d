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
	d := startDaemon(t, p, "--capture", "tc", "--port", "redis=6379", "--hot-qps", "50", "--redis-url", "redis://127.0.0.1:6391")

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
	if !strings.HasPrefix(last, "hotsniff: publish on shutdown: ") || !strings.Contains(last, "event(s) not published to redis://127.0.0.1:6391") {
		t.Errorf("last line %q, want the lost-events error", last)
	}
	t.Logf("%s", last)
	assertNothingAttached(t, p)
}
