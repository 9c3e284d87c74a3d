package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"
	"golang.org/x/crypto/bcrypt"

	"github.com/hotsniff/hotsniff/internal/testing/browsertest"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// TestWebViewLive runs the real daemon (TC capture on a veth, basic auth
// from --web-config, publishing on a real channel) while two application
// processes read one planted key from a real redis-server, one through the
// Go shim (which serves the hot key from memory and reports what it
// absorbed) and one without; it loads the web view in headless Chromium:
// the page must show the key within 2 s of navigation, with its demand and
// the absorbed share. It saves a screenshot.
func TestWebViewLive(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	cache := p.StartRedis(t, 6379)
	chanRedis := p.StartRedis(t, 6390)
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte("view-pass"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "web.yml")
	writeFile(t, cfg, []byte(fmt.Sprintf("basic_auth_users:\n  sre: %q\n", hash)))
	c := &http.Client{Timeout: 5 * time.Second}
	d := startDaemonOn(t, p, 19472, c, "http", "sre", "view-pass",
		"--capture", "tc", "--port", "redis=6379", "--hot-qps", strconv.Itoa(fleetHotQPS), "--ttl", "20s",
		"--redis-url", "redis://127.0.0.1:6390", "--web-config", cfg)

	const planted = "planted:hot:42"
	rc := redis.NewClient(&redis.Options{Addr: cache.String()})
	defer rc.Close()
	if err := rc.Set(context.Background(), planted, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	withShim := startFleetApp(t, cache.String(), chanRedis.String(), planted, true, 30)
	without := startFleetApp(t, cache.String(), chanRedis.String(), planted, false, 30)

	// The daemon has it, with an absorbed rate, in /hotkeys first: what is
	// timed next is the page.
	deadline := time.Now().Add(20 * time.Second)
	var absorbed, demand float64
	for absorbed == 0 {
		req, _ := http.NewRequest("GET", d.http+"/hotkeys", nil)
		req.SetBasicAuth("sre", "view-pass")
		if resp, err := c.Do(req); err == nil {
			var doc hotkeysDoc
			json.NewDecoder(resp.Body).Decode(&doc)
			resp.Body.Close()
			for _, e := range doc.Keys {
				if string(e.Key) == planted {
					absorbed, demand = e.AbsorbedQPS, e.QPS
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never hot with an absorbed rate in /hotkeys\n%s\nshim app: %s", planted, d.log(), withShim.errb.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("/hotkeys: %s qps %.1f, absorbed_qps %.1f", planted, demand, absorbed)

	// Opened as docs/http.md writes the address, with the credentials in
	// it (http://sre:PASSWORD@NODE:PORT/): the browser authenticates the
	// page and keeps the credentials for its polls, which must not carry
	// them in their URL (Chromium refuses such a fetch).
	bctx := browsertest.New(t, nil)
	withCreds := strings.Replace(d.http, "://", "://sre:view-pass@", 1)
	start := time.Now()
	wctx, cancel := context.WithTimeout(bctx, 2*time.Second)
	err = chromedp.Do(wctx, chromedp.Navigate(withCreds+"/"))
	if err == nil {
		err = browsertest.WaitSelector(wctx, `tr[data-key="`+planted+`"] td.share .bar`)
	}
	cancel()
	took := time.Since(start)
	if err != nil {
		status, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`(document.getElementById("status") || {}).textContent || ""`))
		t.Fatalf("web view opened as %s did not show %s with its absorbed share within 2s (%v, status %q): %v\n%s", withCreds, planted, took, status, err, d.log())
	}
	t.Logf("web view showed %s with its absorbed share %v after navigation", planted, took.Round(time.Millisecond))
	// One evaluation per read: the page rebuilds the table on every poll.
	cell := func(sel string) string {
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(document.querySelector('tr[data-key="`+planted+`"] `+sel+`') || {}).textContent || ""`))
		if err != nil {
			t.Errorf("%s: %v", sel, err)
		}
		return v
	}
	q, share := cell("td.qps"), cell("td.share")
	pct, _ := strconv.Atoi(strings.TrimSuffix(share, "%"))
	if q == "" || q == "–" || !strings.HasSuffix(share, "%") || pct <= 0 || pct > 100 {
		t.Errorf("demand %q, absorbed share %q", q, share)
	}
	t.Logf("page: demand %s/s, absorbed %s/s, share %s", q, cell("td.absorbed"), share)
	node, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("node").textContent`))
	if node != "node test-node" {
		t.Errorf("node %q", node)
	}
	// A few polls, so the sparkline has a history in the screenshot.
	chromedp.Do(bctx, chromedp.Sleep(4*time.Second))
	browsertest.Screenshot(t, bctx, "hotsniff-webview-live")

	for _, fp := range []*fleetProc{withShim, without} {
		_ = fp.cmd.Process.Kill()
		<-fp.done
	}
	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("exit: %v\n%s", err, d.log())
	}
	assertNothingAttached(t, p)
}
