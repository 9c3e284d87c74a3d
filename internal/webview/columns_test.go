package webview_test

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/hotsniff/hotsniff/internal/testing/browsertest"
)

// A document whose keys carry reply bytes (bytes_ps), one event without a
// seq and one with "seq":0 (the hot set is state, not a message stream:
// the page must not depend on seq).
const bytesDoc = `{"v":1,"node":"cache-node-3","ts":"2026-11-29T18:00:00.123456Z","hot_qps":1000,"keys":[
 {"v":1,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key":"item:42","qps":4000,"bytes_ps":2500000,"ttl_ms":60000,"ts":"2026-11-29T18:00:00Z","source":"detected"},
 {"v":1,"seq":0,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key":"item:7","qps":1250,"ttl_ms":60000,"ts":"2026-11-29T18:00:00Z","source":"detected"},
 {"v":1,"seq":3,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key":"blazing","qps":32000,"qps_lower_bound":true,"ttl_ms":60000,"ts":"2026-11-29T18:00:00Z","source":"detected"}]}`

// TestPageBytesAndScale: the page shows each key's reply bytes per second
// and writes the top of each sparkline beside it (lines are scaled per
// key, so without it two lines cannot be compared); a rate that is a floor
// (qps_lower_bound: caught faster than it can be timed) reads "≥".
func TestPageBytesAndScale(t *testing.T) {
	ctx, url := openPage(t, func() []byte { return []byte(bytesDoc) })
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('`+sel+`') || {}).textContent || ""`))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return v
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/?interval=200")); err != nil {
		t.Fatal(err)
	}
	if err := browsertest.WaitSelector(ctx, `tr[data-key="item:7"]`); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string][3]string{
		"item:42": {"2.5M", "max 4k/s", "4000.0"},
		"item:7":  {"–", "max 1.25k/s", "1250.0"},
	} {
		b, sc, q := text(`tr[data-key="`+key+`"] td.bytes`), text(`tr[data-key="`+key+`"] td.trend .scale`), text(`tr[data-key="`+key+`"] td.qps`)
		if b != want[0] || sc != want[1] || q != want[2] {
			t.Errorf("%s: bytes %q, scale %q, demand %q; want %q %q %q", key, b, sc, q, want[0], want[1], want[2])
		}
	}
	if q := text(`tr[data-key="blazing"] td.qps`); q != "≥32000.0" {
		t.Errorf("lower-bound demand %q, want ≥32000.0", q)
	}
	if th := text(`th[data-sort="bytes"]`); th != "Bytes/s" {
		t.Errorf("bytes column title %q", th)
	}
	if st := text(`#status`); st != "" {
		t.Errorf("status %q", st)
	}
	browsertest.Screenshot(t, ctx, "hotsniff-webview-bytes")
}
