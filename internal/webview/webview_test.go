package webview_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hotsniff/hotsniff/internal/browsertest"
	"github.com/hotsniff/hotsniff/internal/webview"
)

// A /hotkeys document as the daemon writes it, with absorbed_qps (the
// part of the demand client shims served locally), a key that is markup,
// a key with control characters and a non-UTF-8 key.
const doc = `{"v":1,"node":"cache-node-3","ts":"2026-11-29T18:00:00.123456Z","hot_qps":1000,"keys":[
 {"v":1,"seq":7,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key":"item:7","qps":1200,"ttl_ms":60000,"ts":"2026-11-29T18:00:00Z","source":"detected"},
 {"v":1,"seq":9,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key":"item:42","qps":4000,"absorbed_qps":3000,"ttl_ms":60000,"ts":"2026-11-29T18:00:00Z","source":"detected"},
 {"v":1,"seq":10,"type":"hot","proto":"memcache","server":"10.0.0.6:11211","ns":"","key":"<img src=x id=pwn>","qps":1500,"ttl_ms":60000,"ts":"2026-11-29T18:00:00Z","source":"manual"},
 {"v":1,"seq":11,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key":"ctl\u001b]0;x\u0007","qps":1100,"ttl_ms":60000,"ts":"2026-11-29T18:00:00Z"},
 {"v":1,"seq":12,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key_b64":"/wA=","qps":1050,"ttl_ms":60000,"ts":"2026-11-29T18:00:00Z"}]}`

// TestPageInChromium loads the page in headless Chromium against a server
// answering /hotkeys with doc: rows appear, demand and absorbed share are
// shown, the markup key stays text, sort and filter work.
func TestPageInChromium(t *testing.T) {
	var polls atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("/", webview.Handler())
	mux.HandleFunc("/hotkeys", func(w http.ResponseWriter, r *http.Request) {
		polls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(doc))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	ctx := browsertest.New(t, nil)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The page rebuilds the table on every poll: read a cell in one
	// evaluation, not by node id (the node may be gone by the next call).
	text := func(sel string) string {
		t.Helper()
		q, _ := json.Marshal(sel)
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector(`+string(q)+`) || {}).textContent || ""`))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	eval := func(js string) int {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[int](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/?interval=200")); err != nil {
		t.Fatal(err)
	}
	if err := browsertest.WaitSelector(ctx, `tr[data-key="item:42"]`); err != nil {
		t.Fatal(err)
	}
	share, absorbed, demand := text(`tr[data-key="item:42"] td.share`), text(`tr[data-key="item:42"] td.absorbed`), text(`tr[data-key="item:42"] td.qps`)
	if share != "75%" || absorbed != "3000.0" || demand != "4000.0" {
		t.Errorf("item:42: share %q absorbed %q demand %q; want 75%%, 3000.0, 4000.0", share, absorbed, demand)
	}
	if n := eval(`document.querySelectorAll("#pwn, img").length`); n != 0 {
		t.Errorf("a key was parsed as markup")
	}
	if first := text(`#rows tr:first-child td.key`); first != "item:42" {
		t.Errorf("first row %q, want the highest demand (item:42)", first)
	}
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("#rows td.key")].map(td => td.textContent).join("|")`))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<img src=x id=pwn>", `ctl\u001b]0;x\u0007`, "b64:/wA="} {
		if !strings.Contains(cells, want) {
			t.Errorf("keys %q lack %q", cells, want)
		}
	}
	if n := eval(`document.querySelectorAll("#rows td.share").length - document.querySelectorAll("#rows .bar").length`); n != 4 {
		t.Errorf("%d rows without an absorbed share bar, want 4 (only item:42 has absorbed_qps)", n)
	}
	// Sort by key (ascending), then filter on the protocol.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`th[data-sort="key"]`))); err != nil {
		t.Fatal(err)
	}
	if first := text(`#rows tr:first-child td.key`); first != "<img src=x id=pwn>" {
		t.Errorf("sorted by key, first row %q", first)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#filter`), "memcache")); err != nil {
		t.Fatal(err)
	}
	if n := eval(`document.querySelectorAll("#rows tr").length`); n != 1 {
		t.Errorf("filter memcache: %d rows, want 1", n)
	}
	// Clear the filter for the screenshot.
	eval(`const f = document.getElementById("filter"); f.value = ""; f.dispatchEvent(new Event("input")); 0`)
	if err := chromedp.Do(ctx, chromedp.Sleep(500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	browsertest.Screenshot(t, ctx, "hotsniff-webview-doc")
	if polls.Load() < 2 {
		t.Errorf("page polled /hotkeys %d times", polls.Load())
	}
}

// TestHandler checks the page is served only at / and the security
// headers that keep it to its own assets.
func TestHandler(t *testing.T) {
	srv := httptest.NewServer(webview.Handler())
	defer srv.Close()
	for path, want := range map[string]int{"/": 200, "/webview/app.js": 200, "/webview/app.css": 200, "/nope": 404, "/webview/nope.js": 404} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
		if want == 200 && !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("GET %s: no CSP", path)
		}
	}
}
