package httpserve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/hotsniff/hotsniff/event"
)

// /hotkeys stays within its bound whatever the keys, keeps the hottest and
// says how many it left out; a set that fits is written whole, in order.
func TestWriteHotkeysBounded(t *testing.T) {
	long := strings.Repeat("\x01", 64<<10) // escapes to six bytes each
	var keys []event.Event
	for i := range 1024 {
		keys = append(keys, event.Event{Type: "hot", Proto: "redis", Key: []byte(fmt.Sprintf("%s%d", long, i)), QPS: float64(i), TS: time.Unix(0, 0)})
	}
	rec := httptest.NewRecorder()
	WriteHotkeys(rec, HotkeysHead{V: 1, Node: "n"}, keys, HotkeysLimit)
	if rec.Body.Len() > HotkeysLimit {
		t.Fatalf("document %d bytes, over %d", rec.Body.Len(), HotkeysLimit)
	}
	var doc struct {
		Keys      []*event.Event `json:"keys"`
		Truncated int            `json:"truncated"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Keys) == 0 || doc.Truncated != 1024-len(doc.Keys) {
		t.Fatalf("%d keys, truncated %d", len(doc.Keys), doc.Truncated)
	}
	if doc.Keys[0].QPS != 1023 {
		t.Errorf("first key at %v qps, want the hottest (1023)", doc.Keys[0].QPS)
	}
	small := []event.Event{{Key: []byte("a"), QPS: 1}, {Key: []byte("b"), QPS: 2}}
	rec = httptest.NewRecorder()
	WriteHotkeys(rec, HotkeysHead{V: 1}, small, HotkeysLimit)
	doc.Keys, doc.Truncated = nil, 0
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || len(doc.Keys) != 2 || string(doc.Keys[0].Key) != "a" || doc.Truncated != 0 {
		t.Fatalf("small set: %s (%v)", rec.Body.Bytes(), err)
	}
}

func startServer(t *testing.T, opt Options) *Server {
	t.Helper()
	opt.Addr = "127.0.0.1:0"
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := Listen(opt)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(s.Close)
	return s
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })

// At the bound, idle keep-alive connections make room: a new client is
// served at once, the table never holds more than the bound.
func TestConnBoundEvictsIdle(t *testing.T) {
	s := startServer(t, Options{Handler: okHandler, MaxConns: 8, IdleTimeout: time.Minute})
	addr := s.Addr().String()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 50 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d not served: %v", len(held), err)
		}
		resp.Body.Close()
	}
	if n := s.Stats().Conns; n > 8 {
		t.Errorf("%d connections held, bound 8", n)
	}
	if s.Stats().Evicted < 40 {
		t.Errorf("evicted %d, want the idle ones", s.Stats().Evicted)
	}
}

// Failed logins from one address are limited (429 without bcrypt), a
// remembered credential still gets in from that address during the flood,
// and every rejection closes its connection.
func TestFailedLoginLimit(t *testing.T) {
	dir := t.TempDir()
	hash, _ := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
	cfg := filepath.Join(dir, "web.yml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("basic_auth_users:\n  u: %q\n", hash)), 0o600)
	s := startServer(t, Options{Handler: okHandler, WebConfig: cfg})
	url := "http://" + s.Addr().String() + "/"
	get := func(pass string) (int, bool) {
		req, _ := http.NewRequest("GET", url, nil)
		req.SetBasicAuth("u", pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Close
	}
	if code, _ := get("right"); code != 200 {
		t.Fatalf("right password: %d", code)
	}
	codes := map[int]int{}
	for i := range 40 {
		code, closed := get(fmt.Sprint("wrong", i))
		codes[code]++
		if !closed {
			t.Errorf("a %d kept its connection open", code)
		}
	}
	if codes[401] > failBurst+1 || codes[429] < 40-failBurst-1 {
		t.Errorf("40 wrong passwords at once: %v; want %d checked, the rest 429", codes, failBurst)
	}
	if code, _ := get("right"); code != 200 {
		t.Errorf("remembered credential during the flood: %d", code)
	}
	if st := s.Stats(); st.AuthFailed > failBurst+1 {
		t.Errorf("%d bcrypt failures, want at most the burst", st.AuthFailed)
	}
}

// net/http's error lines become structured records, rate-limited per kind.
func TestErrorLogStructured(t *testing.T) {
	var buf bytes.Buffer
	l := newErrorLog(slog.New(slog.NewTextHandler(&buf, nil)))
	for range 5 {
		l.Printf("http: TLS handshake error from 10.0.0.1:5555: EOF")
	}
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, `msg="TLS handshake failed"`) || !strings.Contains(out, "remote=10.0.0.1:5555") || !strings.Contains(out, "err=EOF") {
		t.Fatalf("log: %q", out)
	}
}

// A web configuration rewritten while running applies on the next request;
// one that turns bad is reported once and the last good one stays.
func TestWebConfigReload(t *testing.T) {
	dir := t.TempDir()
	h1, _ := bcrypt.GenerateFromPassword([]byte("one"), bcrypt.MinCost)
	h2, _ := bcrypt.GenerateFromPassword([]byte("two"), bcrypt.MinCost)
	cfg := filepath.Join(dir, "web.yml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("basic_auth_users:\n  u: %q\n", h1)), 0o600)
	var logs bytes.Buffer
	s := startServer(t, Options{Handler: okHandler, WebConfig: cfg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	url := "http://" + s.Addr().String() + "/"
	get := func(pass string) int {
		req, _ := http.NewRequest("GET", url, nil)
		req.SetBasicAuth("u", pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if get("one") != 200 {
		t.Fatal("first password refused")
	}
	os.WriteFile(cfg, []byte(fmt.Sprintf("basic_auth_users:\n  u: %q\n  v: x\n", h2)), 0o600)
	if get("two") != 200 || get("one") != 401 {
		t.Fatal("new password not applied")
	}
	os.WriteFile(cfg, []byte("basic_auth_user: {}\n"), 0o600)
	for range 3 {
		if get("two") != 200 {
			t.Fatal("bad file replaced the good configuration")
		}
	}
	if n := strings.Count(logs.String(), "keeping the previous one"); n != 1 {
		t.Fatalf("bad file reported %d times: %s", n, logs.String())
	}
}

// A keep-alive connection left without a request is closed after
// IdleTimeout.
func TestIdleTimeoutCloses(t *testing.T) {
	s := startServer(t, Options{Handler: okHandler, IdleTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.Close {
		t.Fatalf("keep-alive response: %v close=%v", err, resp != nil && resp.Close)
	}
	io.Copy(io.Discard, resp.Body)
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("idle connection still open after %v (err %v)", time.Since(start), err)
	}
}
