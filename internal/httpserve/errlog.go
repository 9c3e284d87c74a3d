package httpserve

import (
	"bytes"
	"log"
	"log/slog"
	"sync"
	"time"
)

// errorLog turns net/http's server errors (written to a standard logger)
// into structured slog records, at most one per kind every logEvery with
// the number left out: a scanner's failed TLS handshakes must not flood the
// daemon's log.
type errorLog struct {
	log *slog.Logger

	mu   sync.Mutex
	last map[string]time.Time
	left map[string]int
}

const logEvery = 10 * time.Second

func newErrorLog(l *slog.Logger) *log.Logger {
	return log.New(&errorLog{log: l, last: map[string]time.Time{}, left: map[string]int{}}, "", 0)
}

func (e *errorLog) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	kind, msg, attrs := "other", "HTTP server error", []any{"err", line}
	switch {
	case hasCut(&line, "http: TLS handshake error from "):
		// "http: TLS handshake error from ADDR: ERR"
		kind, msg = "tls", "TLS handshake failed"
		addr, err, _ := cutStr(line, ": ")
		attrs = []any{"remote", addr, "err", err}
	case hasCut(&line, "http: Accept error: "):
		kind, msg, attrs = "accept", "accept connection failed", []any{"err", line}
	case hasCut(&line, "http: "):
		attrs = []any{"err", line}
	}
	now := time.Now()
	e.mu.Lock()
	if now.Sub(e.last[kind]) < logEvery {
		e.left[kind]++
		e.mu.Unlock()
		return len(p), nil
	}
	e.last[kind] = now
	left := e.left[kind]
	e.left[kind] = 0
	e.mu.Unlock()
	if left > 0 {
		attrs = append(attrs, "suppressed", left)
	}
	e.log.Warn(msg, attrs...)
	return len(p), nil
}

func hasCut(s *string, prefix string) bool {
	if len(*s) >= len(prefix) && (*s)[:len(prefix)] == prefix {
		*s = (*s)[len(prefix):]
		return true
	}
	return false
}

func cutStr(s, sep string) (string, string, bool) {
	if i := bytes.Index([]byte(s), []byte(sep)); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}
