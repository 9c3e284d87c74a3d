package webview_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/exporter-toolkit/web"
	"golang.org/x/crypto/bcrypt"

	"github.com/hotsniff/hotsniff/internal/testing/browsertest"
	"github.com/hotsniff/hotsniff/internal/webview"
)

// TestPageWithCredentialsInURL opens the page the way docs/http.md writes
// the address, with the basic-auth user and password in the URL
// (http://sre:pw@host:port/), behind the exporter toolkit's basic auth as
// the daemon serves it. Chromium refuses fetch() of a URL resolved against
// such a page ("Request cannot be constructed from a URL that includes
// credentials"); the page must build its /hotkeys URL without them and
// still be let in (the browser keeps the credentials for the origin).
func TestPageWithCredentialsInURL(t *testing.T) {
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("basic_auth_users:\n  sre: %q\n", hash)), 0o600); err != nil {
		t.Fatal(err)
	}
	var polls atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("/", webview.Handler())
	mux.HandleFunc("/hotkeys", func(w http.ResponseWriter, r *http.Request) {
		polls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(doc))
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	addrs, noSystemd := []string{l.Addr().String()}, false
	served := make(chan error, 1)
	go func() {
		served <- web.Serve(l, srv, &web.FlagConfig{WebListenAddresses: &addrs, WebSystemdSocket: &noSystemd, WebConfigFile: &cfg},
			slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})

	// Without credentials the page itself is refused: auth is in front.
	resp, err := http.Get("http://" + l.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET / without credentials: %d, want 401", resp.StatusCode)
	}

	ctx, cancel := context.WithTimeout(browsertest.New(t, nil), 30*time.Second)
	defer cancel()
	url := "http://sre:pw@" + l.Addr().String() + "/?interval=200"
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	err = browsertest.WaitSelector(wctx, `tr[data-key="item:42"]`)
	wcancel()
	status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("status").textContent`))
	if err != nil {
		t.Fatalf("page opened as %s shows no hot key (status %q, %d authenticated polls): %v", url, status, polls.Load(), err)
	}
	if status != "" {
		t.Errorf("status %q", status)
	}
	// It keeps polling, authenticated.
	before := polls.Load()
	deadline := time.Now().Add(5 * time.Second)
	for polls.Load() < before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("page stopped polling /hotkeys after %d authenticated polls", polls.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
