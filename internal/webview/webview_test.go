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

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/browsertest"
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

// openPage serves the page beside a /hotkeys that answers body() and opens
// headless Chromium; everything ends with the test.
func openPage(t *testing.T, body func() []byte) (context.Context, string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/", webview.Handler())
	mux.HandleFunc("/hotkeys", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body())
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(browsertest.New(t, nil), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, srv.URL
}

// TestPageInChromium loads the page in headless Chromium against a server
// answering /hotkeys with doc: rows appear, demand and absorbed share are
// shown, the markup key stays text, sort and filter work.
func TestPageInChromium(t *testing.T) {
	var polls atomic.Int64
	ctx, url := openPage(t, func() []byte {
		polls.Add(1)
		return []byte(doc)
	})
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
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/?interval=200")); err != nil {
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

// TestPageSampledInChromium: the daemon samples connections (events carry
// their sampling rate, encoded by the one event type as /hotkeys does);
// the page says so in its header, marks each estimated demand ~ and shows
// each key's share in the Sampled column, which is hidden while nothing
// is sampled (TestPageInChromium's document).
func TestPageSampledInChromium(t *testing.T) {
	ts := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	var keys []*event.Event
	for _, k := range []struct {
		key    string
		qps    float64
		sample float64
	}{{"item:42", 4000, 0.1367}, {"item:7", 1200, 0.25}, {"<b id=pwn>x</b>", 1100, 1.0 / 512}} {
		keys = append(keys, &event.Event{V: 1, Seq: 7, Type: event.TypeHot, Proto: "redis", Server: "10.0.0.5:6379", NS: "0",
			Key: []byte(k.key), QPS: k.qps, TTLms: 60000, TS: ts, Source: event.SourceDetected, Sample: k.sample})
	}
	body, err := json.Marshal(map[string]any{"v": 1, "node": "cache-node-3", "ts": ts.Format(event.TSFormat), "hot_qps": 1000, "keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), `"sample":0.1367`) {
		t.Fatalf("document without sample: %s", body)
	}
	var sampled atomic.Bool
	sampled.Store(true)
	ctx, url := openPage(t, func() []byte {
		if sampled.Load() {
			return body
		}
		return []byte(doc)
	})
	text := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	cell := func(key, col string) string {
		return text(`(document.querySelector('tr[data-key="` + key + `"] td.` + col + `') || {}).textContent || ""`)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/?interval=200")); err != nil {
		t.Fatal(err)
	}
	if err := browsertest.WaitSelector(ctx, `tr[data-key="item:42"]`); err != nil {
		t.Fatal(err)
	}
	if s := text(`document.getElementById("sampling").textContent`); s != "sampling 1/512–25% of connections: ~ rates are estimates" {
		t.Errorf("header %q", s)
	}
	for key, want := range map[string][2]string{"item:42": {"~4000.0", "13.7%"}, "item:7": {"~1200.0", "25%"}} {
		if q, s := cell(key, "qps"), cell(key, "sample"); q != want[0] || s != want[1] {
			t.Errorf("%s: demand %q sampled %q, want %q %q", key, q, s, want[0], want[1])
		}
	}
	if s := cell("<b id=pwn>x</b>", "sample"); s != "1/512" {
		t.Errorf("markup key: sampled %q, want 1/512", s)
	}
	if n := text(`String(document.querySelectorAll("#pwn, b").length)`); n != "0" {
		t.Errorf("a key was parsed as markup")
	}
	if v := text(`getComputedStyle(document.querySelector('th[data-sort="sample"]')).display`); v == "none" {
		t.Errorf("Sampled column hidden while keys are sampled")
	}
	if ti := text(`document.querySelector('tr[data-key="item:42"] td.qps').title`); ti != "estimated from 13.7% of connections" {
		t.Errorf("demand title %q", ti)
	}
	browsertest.Screenshot(t, ctx, "hotsniff-webview-sampled")

	// Sampling stops: the header line, the marks and the column go.
	sampled.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for text(`document.getElementById("sampling").textContent`) != "" || cell("item:42", "qps") != "4000.0" {
		if time.Now().After(deadline) {
			t.Fatalf("still shown as sampled: header %q, item:42 %q", text(`document.getElementById("sampling").textContent`), cell("item:42", "qps"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v := text(`getComputedStyle(document.querySelector('th[data-sort="sample"]')).display`); v != "none" {
		t.Errorf("Sampled column shown (display %q) with nothing sampled", v)
	}
}
