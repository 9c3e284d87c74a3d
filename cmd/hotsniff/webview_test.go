package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"
	"golang.org/x/crypto/bcrypt"

	"github.com/hotsniff/hotsniff/internal/browsertest"
	"github.com/hotsniff/hotsniff/internal/netnstest"
)

// TestWebViewLive runs the real daemon (TC capture on a veth, basic auth
// from --web-config) while a client reads one planted key from a real
// redis-server, and loads the web view in headless Chromium: the page
// must show the key within 2 s of navigation. It saves a screenshot.
func TestWebViewLive(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	cache := p.StartRedis(t, 6379)
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte("view-pass"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "web.yml")
	writeFile(t, cfg, []byte(fmt.Sprintf("basic_auth_users:\n  sre: %q\n", hash)))
	c := &http.Client{Timeout: 5 * time.Second}
	d := startDaemonOn(t, p, 19472, c, "http", "sre", "view-pass",
		"--capture", "tc", "--port", "redis=6379", "--hot-qps", "50", "--web-config", cfg)

	// The planted key, read continuously until the test ends.
	const planted = "planted:hot:42"
	ctx, stopTraffic := context.WithCancel(context.Background())
	rc := redis.NewClient(&redis.Options{Addr: cache.String()})
	defer rc.Close()
	if err := rc.Set(ctx, planted, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	trafficDone := make(chan struct{})
	go func() {
		defer close(trafficDone)
		for ctx.Err() == nil {
			rc.Get(ctx, planted)
			rc.Get(ctx, "cool:key")
			time.Sleep(time.Millisecond)
		}
	}()
	defer func() { stopTraffic(); <-trafficDone }()

	// The daemon has it in /hotkeys first: what is timed next is the page.
	deadline := time.Now().Add(15 * time.Second)
	for {
		req, _ := http.NewRequest("GET", d.http+"/hotkeys", nil)
		req.SetBasicAuth("sre", "view-pass")
		resp, err := c.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), planted) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never hot in /hotkeys\n%s", planted, d.log())
		}
		time.Sleep(100 * time.Millisecond)
	}

	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("sre:view-pass"))
	bctx := browsertest.New(t, map[string]any{"Authorization": auth})
	start := time.Now()
	wctx, cancel := context.WithTimeout(bctx, 2*time.Second)
	err = chromedp.Do(wctx, chromedp.Navigate(d.http+"/"))
	if err == nil {
		err = browsertest.WaitSelector(wctx, `tr[data-key="`+planted+`"]`)
	}
	cancel()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("web view did not show %s within 2s (%v): %v\n%s", planted, took, err, d.log())
	}
	t.Logf("web view showed %s %v after navigation", planted, took.Round(time.Millisecond))
	// One evaluation per read: the page rebuilds the table on every poll.
	demand, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('tr[data-key="`+planted+`"] td.qps').textContent`))
	if err != nil || demand == "" || demand == "–" {
		t.Errorf("demand cell %q: %v", demand, err)
	}
	node, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("node").textContent`))
	if node != "node test-node" {
		t.Errorf("node %q", node)
	}
	// A few polls, so the sparkline has a history in the screenshot.
	chromedp.Do(bctx, chromedp.Sleep(3*time.Second))
	browsertest.Screenshot(t, bctx, "hotsniff-webview-live")

	stopTraffic()
	<-trafficDone
	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("exit: %v\n%s", err, d.log())
	}
	assertNothingAttached(t, p)
}
