package topview

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// hotkeysDoc is a /hotkeys answer in the shape the daemon serves.
const hotkeysDoc = `{"v":1,"node":"cache-node-3","ts":"2026-11-29T18:00:00.123456Z","hot_qps":1000,"keys":[
 {"v":1,"seq":42,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key":"item:42","qps":1843.5,"ttl_ms":60000,"ts":"2026-11-29T18:00:00.123456Z","source":"detected","node":"cache-node-3"},
 {"v":1,"seq":40,"type":"hot","proto":"memcache","server":"10.0.0.6:11211","ns":"","key_b64":"/wBh","qps":1200,"ttl_ms":60000,"ts":"2026-11-29T17:59:59.5Z","source":"detected","node":"cache-node-3"},
 {"v":1,"seq":41,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"3","key":"flag:maintenance","ttl_ms":300000,"ts":"2026-11-29T17:59:00Z","source":"manual","node":"cache-node-3","future_field":true}
]}`

func hotkeysServer(t *testing.T, fail *atomic.Bool) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/hotkeys" {
			http.NotFound(w, r)
			return
		}
		if fail != nil && fail.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, hotkeysDoc)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestHTTPSourceFetch(t *testing.T) {
	srv := hotkeysServer(t, nil)
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, a := range []string{addr, srv.URL, srv.URL + "/", srv.URL + "/hotkeys"} {
		src, err := NewHTTPSource(a, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if src.URL() != srv.URL+"/hotkeys" {
			t.Errorf("URL of %q = %q", a, src.URL())
		}
		s, err := src.Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s.Node != "cache-node-3" || s.HotQPS != 1000 || len(s.Keys) != 3 || s.Source != addr ||
			!s.TS.Equal(time.Date(2026, 11, 29, 18, 0, 0, 123456000, time.UTC)) {
			t.Fatalf("snapshot = %+v", s)
		}
		if string(s.Keys[1].Key) != "\xff\x00a" || s.Keys[0].QPS != 1843.5 || s.Keys[2].Source != "manual" {
			t.Errorf("keys = %+v", s.Keys)
		}
	}
}

func TestHTTPSourceErrors(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	srv := hotkeysServer(t, &fail)
	src, _ := NewHTTPSource(srv.URL, time.Second)
	if _, err := src.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "HTTP 503") {
		t.Errorf("503: err = %v", err)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "<html>") }))
	defer bad.Close()
	src, _ = NewHTTPSource(bad.URL, time.Second)
	if _, err := src.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "bad /hotkeys document") {
		t.Errorf("html: err = %v", err)
	}
	src, _ = NewHTTPSource(closedAddr(t), time.Second)
	_, err := src.Fetch(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "daemon unreachable: GET http://") || isFinal(err) {
		t.Errorf("closed port: err = %v", err)
	}
	for _, a := range []string{"", "ftp://x", "http://"} {
		if _, err := NewHTTPSource(a, time.Second); err == nil {
			t.Errorf("NewHTTPSource(%q) accepted", a)
		}
	}
}

// closedAddr returns a local address nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().String()
	l.Close()
	return a
}

// TestViewHTTP runs the view on a daemon that answers 503, then recovers.
func TestViewHTTP(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	srv := hotkeysServer(t, &fail)
	src, err := NewHTTPSource(srv.URL, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	h := startHarness(t, 100, 24, src, NewModel(srv.URL, Options{}))
	h.waitText("✖ GET "+srv.URL+"/hotkeys: HTTP 503", "retrying")
	fail.Store(false)
	f := h.waitText("item:42", "flag:maintenance", "b64:/wBh")
	if got := tableKeys(f); len(got) != 3 || got[0] != "item:42" || got[1] != "b64:/wBh" || got[2] != "flag:maintenance" {
		t.Errorf("rows = %v\n%s", got, f)
	}
	if fs := rowFields(f, "flag:maintenance"); len(fs) != 11 || fs[0] != "-" || fs[6] != "hot" || fs[7] != "manual" || fs[8] != "-" || fs[9] != "-" {
		t.Errorf("manual row = %q", fs)
	}
	if !strings.Contains(f.lines[0], "node cache-node-3") || !strings.Contains(f.lines[0], "18:00:00Z") {
		t.Errorf("header = %q", f.lines[0])
	}
	h.typeText("q")
	if err := h.ended(); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPSourceSchemeHints: polling a TLS port over plain HTTP (the
// daemon answers 400) or a plain port over HTTPS says which scheme to use,
// with the password still masked.
func TestHTTPSourceSchemeHints(t *testing.T) {
	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, hotkeysDoc) }))
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the plain request's handshake error is expected
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	hostport := strings.TrimPrefix(tlsSrv.URL, "https://")
	src, _ := NewHTTPSource("http://sre:secret@"+hostport, time.Second)
	_, err := src.Fetch(context.Background())
	want := "the daemon serves HTTPS on this port (its web configuration sets TLS): use https://sre:xxxxx@" + hostport
	if err == nil || !strings.Contains(err.Error(), "HTTP 400") || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
		t.Errorf("HTTP to an HTTPS port: err = %v, want the hint %q", err, want)
	}

	plain := hotkeysServer(t, nil)
	hostport = strings.TrimPrefix(plain.URL, "http://")
	src, _ = NewHTTPSource("https://"+hostport, time.Second)
	_, err = src.Fetch(context.Background())
	want = "the daemon serves plain HTTP on this port, not HTTPS: use http://" + hostport
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("HTTPS to an HTTP port: err = %v, want the hint %q", err, want)
	}
}

// TestHTTPSourceWithoutSeq: /hotkeys is the hot set, not a stream of
// messages; an event without seq, or with seq 0, is listed like any other.
// (A guard: the view never needed seq, and the daemon may omit it there.)
func TestHTTPSourceWithoutSeq(t *testing.T) {
	doc := `{"v":1,"node":"n","ts":"2026-11-29T18:00:00Z","hot_qps":1000,"keys":[
 {"v":1,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key":"no-seq","qps":1500,"ttl_ms":60000,"ts":"2026-11-29T18:00:00Z","source":"detected"},
 {"v":1,"seq":0,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key":"seq-zero","qps":1200,"ttl_ms":60000,"ts":"2026-11-29T18:00:00Z","source":"detected"}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, doc) }))
	defer srv.Close()
	src, _ := NewHTTPSource(srv.URL, time.Second)
	s, err := src.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := NewModel("x", Options{})
	m.Apply(s)
	var b strings.Builder
	m.WritePlain(&b)
	if !strings.Contains(b.String(), "no-seq") || !strings.Contains(b.String(), "seq-zero") || !strings.Contains(b.String(), "2 hot") {
		t.Errorf("events without seq not listed:\n%s", b.String())
	}
}
