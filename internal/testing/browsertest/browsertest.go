// Package browsertest drives a real headless Chromium (Debian's chromium
// package) over the DevTools protocol, for tests of the web view.
package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// Chromium is where Debian installs it; CHROMIUM overrides.
func chromium() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// New starts a headless Chromium with a throwaway profile and returns a
// tab's context; everything is stopped in t.Cleanup. Missing Chromium
// skips the test (fails it under CI=true).
func New(t testing.TB, headers map[string]any) context.Context {
	t.Helper()
	path := chromium()
	if _, err := os.Stat(path); err != nil {
		netnstest.Skip(t, "chromium not installed at %s", path)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // tests run as root, where the sandbox refuses to start
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 720),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelB()
		cancelA()
	})
	// Start the browser now, so its start-up is not counted in what the
	// test times. The first call must use the tab's own context: the
	// browser lives as long as the context it was started with.
	start := ctx
	if _, err := chromedp.Call(start, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if len(headers) > 0 {
		if _, err := chromedp.Call(start, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers(headers)}); err != nil {
			t.Fatalf("set headers: %v", err)
		}
	}
	return ctx
}

// Screenshot saves a PNG of the whole page to dir (HOTSNIFF_ARTIFACTS, or
// the system temp directory) and returns its path.
func Screenshot(t testing.TB, ctx context.Context, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("HOTSNIFF_ARTIFACTS")
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatalf("save screenshot: %v", err)
	}
	t.Logf("screenshot: %s", path)
	return path
}

// WaitSelector polls (every 20 ms) until an element matches the CSS
// selector or ctx ends. It reads the DOM in one evaluation per poll, so a
// page that rebuilds its elements cannot make it fail on a node that was
// replaced between two protocol calls (as waiting by node id can).
func WaitSelector(ctx context.Context, selector string) error {
	q, _ := json.Marshal(selector)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector(`+string(q)+`) !== null`))
		if err == nil && ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("wait for %s: %w (last error: %v)", selector, ctx.Err(), err)
			}
			return fmt.Errorf("wait for %s: %w", selector, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
