package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

// launchDaemon starts `hotsniff run` in the namespace on HTTP port port
// without waiting for /readyz.
func launchDaemon(t *testing.T, p *netnstest.Pair, port int, args ...string) *daemonProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := fmt.Sprintf("%s:%d", p.NSIP, port)
	args = append([]string{"run", "--iface", p.NSIface, "--listen", httpAddr, "--node", "test-node"}, testRings(args)...)
	cmd := p.Command(context.Background(), self, args...)
	cmd.Env = append(os.Environ(), "HOTSNIFF_TEST_MAIN=1")
	d := &daemonProc{cmd: cmd, http: "http://" + httpAddr, stderr: &testutil.Buffer{}}
	cmd.Stdout = io.Discard
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return d
}

// get returns the status and body of a GET on the daemon.
func (d *daemonProc) get(path string) (int, string) {
	resp, err := http.Get(d.http + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The restart measurement (SIGTERM, SIGKILL, surge, the chart's rolling
// update, SIGSTOP, a channel Redis restart, with an application per shim
// language) is internal/testing/restart: a package of its own for its run
// time.

// TestRunReadyOrder: HTTP answers before capture is attached; /healthz is
// 200 at once and /readyz 503 until capture is attached and the node's
// previous hot set is adopted, 200 after.
func TestRunReadyOrder(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	p.StartRedis(t, 6379)
	p.StartRedis(t, 6390)
	d := launchDaemon(t, p, 19464, "--capture", "tc", "--port", "redis=6379", "--redis-url", "redis://127.0.0.1:6390")
	var first503 string
	healthyEarly := false
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := d.get("/readyz")
		if code == http.StatusServiceUnavailable && first503 == "" {
			first503 = body
			if hc, _ := d.get("/healthz"); hc == http.StatusOK {
				healthyEarly = true
			}
		}
		if code == http.StatusOK {
			if !strings.Contains(body, "adopted 0 hot key(s)") {
				t.Errorf("/readyz when ready: %q", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready: %d %q\n%s", code, body, d.log())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(first503, "capture not attached") || !healthyEarly {
		t.Fatalf("before capture attached: /readyz said %q, /healthz ok %v; want 503 and 200", first503, healthyEarly)
	}
	// The daemon logged that it listened before it captured.
	log := d.log()
	if i, j := strings.Index(log, "capture mode chosen"), strings.Index(log, "msg=capturing"); i < 0 || j < i {
		t.Fatalf("log order:\n%s", log)
	}
}
