package topview

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hotsniff/hotsniff/event"
)

// Snapshot is the hot set at one moment.
type Snapshot struct {
	// Source names where the data comes from ("127.0.0.1:9464", "replay x.pcap").
	Source string
	// Node is the publishing host (the daemon's node name).
	Node string
	// TS is the time of the snapshot: the daemon's clock, or packet time on
	// a replay. Cold rows age by it.
	TS time.Time
	// HotQPS is the default threshold of the detector.
	HotQPS float64
	// Keys are the hot keys, type "hot", qps the current rate.
	Keys []event.Event
	// Warm are keys that are not hot, listed because they are among the
	// hottest (replay with a top N): qps is their rate over the interval.
	Warm []event.Event
}

// Source yields snapshots. Next blocks until the next snapshot is due (the
// source paces itself) or ctx is done.
//
// An error that wraps io.EOF ends the source: the view holds its last frame.
// A FatalError also ends it, and is shown. Any other error is transient: the
// view shows it and calls Next again, which retries after its interval.
type Source interface {
	Next(ctx context.Context) (Snapshot, error)
}

// FatalError is an error after which a Source cannot go on.
type FatalError struct{ Err error }

func (f *FatalError) Error() string { return f.Err.Error() }
func (f *FatalError) Unwrap() error { return f.Err }

// isFinal reports whether err ends a source.
func isFinal(err error) bool {
	var f *FatalError
	return errors.Is(err, io.EOF) || errors.As(err, &f)
}

// HotkeysDoc is the JSON document of GET /hotkeys (see the package doc).
type HotkeysDoc struct {
	V      int           `json:"v"`
	Node   string        `json:"node"`
	TS     string        `json:"ts"`
	HotQPS float64       `json:"hot_qps"`
	Keys   []event.Event `json:"keys"`
}

// HTTPSource polls a daemon's /hotkeys endpoint.
type HTTPSource struct {
	url      string
	shown    string // url with any password masked, for messages
	label    string
	interval time.Duration
	client   *http.Client
	last     time.Time
}

// NewHTTPSource polls addr every interval. addr is host:port, or a URL
// (http://host:port, https://..., with or without the /hotkeys path).
func NewHTTPSource(addr string, interval time.Duration) (*HTTPSource, error) {
	u, label, err := hotkeysURL(addr)
	if err != nil {
		return nil, err
	}
	if interval <= 0 {
		return nil, fmt.Errorf("interval %v: must be positive", interval)
	}
	timeout := max(interval, 5*time.Second)
	// Credentials in the URL (https://user:pass@node:9464, for a daemon
	// with a web configuration) are sent as basic auth by the client and
	// never shown.
	shown := u
	if p, err := url.Parse(u); err == nil {
		shown = p.Redacted()
	}
	return &HTTPSource{url: u, shown: shown, label: label, interval: interval, client: &http.Client{Timeout: timeout}}, nil
}

func hotkeysURL(addr string) (u, label string, err error) {
	if addr == "" {
		return "", "", errors.New("empty address")
	}
	raw := addr
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	p, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("address %q: %v", addr, err)
	}
	if p.Scheme != "http" && p.Scheme != "https" {
		return "", "", fmt.Errorf("address %q: scheme %q is not http or https", addr, p.Scheme)
	}
	if p.Host == "" {
		return "", "", fmt.Errorf("address %q: no host", addr)
	}
	if p.Path == "" || p.Path == "/" {
		p.Path = "/hotkeys"
	}
	label = p.Host
	if p.Scheme == "https" {
		label = "https://" + p.Host
	}
	return p.String(), label, nil
}

// withScheme is the address polled with another scheme, credentials
// masked, for hints.
func (h *HTTPSource) withScheme(scheme string) string {
	p, err := url.Parse(h.url)
	if err != nil {
		return scheme + "://"
	}
	p.Scheme = scheme
	if p.Path == "/hotkeys" {
		p.Path = ""
	}
	return p.Redacted()
}

// URL is the address polled.
func (h *HTTPSource) URL() string { return h.url }

// Next waits until interval has passed since the previous poll, then polls.
func (h *HTTPSource) Next(ctx context.Context) (Snapshot, error) {
	if !h.last.IsZero() {
		if err := sleepUntil(ctx, h.last.Add(h.interval)); err != nil {
			return Snapshot{}, err
		}
	}
	h.last = time.Now()
	return h.Fetch(ctx)
}

// Fetch polls once, now.
func (h *HTTPSource) Fetch(ctx context.Context) (Snapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url, nil)
	if err != nil {
		return Snapshot{}, &FatalError{err}
	}
	req.Header.Set("Accept", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		var rh tls.RecordHeaderError
		if errors.As(err, &rh) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
			// A TLS handshake answered by a plain HTTP server (net/http
			// reports it in text only).
			return Snapshot{}, fmt.Errorf("GET %s: the daemon serves plain HTTP on this port, not HTTPS: use %s", h.shown, h.withScheme("http"))
		}
		return Snapshot{}, fmt.Errorf("daemon unreachable: GET %s: %w", h.shown, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		if resp.StatusCode == http.StatusBadRequest && bytes.Contains(body, []byte("HTTP request to an HTTPS server")) {
			// Go's TLS server answers a plain request this way.
			return Snapshot{}, fmt.Errorf("GET %s: HTTP %s: the daemon serves HTTPS on this port (its web configuration sets TLS): use %s",
				h.shown, resp.Status, h.withScheme("https"))
		}
		return Snapshot{}, fmt.Errorf("GET %s: HTTP %s", h.shown, resp.Status)
	}
	var doc HotkeysDoc
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&doc); err != nil {
		return Snapshot{}, fmt.Errorf("GET %s: bad /hotkeys document: %v", h.shown, err)
	}
	s := Snapshot{Source: h.label, Node: doc.Node, HotQPS: doc.HotQPS, Keys: doc.Keys}
	if doc.TS != "" {
		t, err := time.Parse(time.RFC3339Nano, doc.TS)
		if err != nil {
			return Snapshot{}, fmt.Errorf("GET %s: bad ts %q: %v", h.shown, doc.TS, err)
		}
		s.TS = t
	} else {
		s.TS = time.Now()
	}
	return s, nil
}

// sleepUntil waits for t or ctx.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
