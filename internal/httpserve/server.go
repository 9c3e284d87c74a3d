// Package httpserve serves the daemon's HTTP endpoints so that no client
// can deny them: idle and header timeouts, a bound on connections that
// closes idle ones rather than waiting (so /healthz keeps answering), basic
// auth whose bcrypt cost an attacker cannot spend at will, and server
// errors logged through slog.
package httpserve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Options configure one listener.
type Options struct {
	Addr    string
	Handler http.Handler
	// WebConfig is the exporter-toolkit web configuration file (TLS, basic
	// auth, headers); empty: plain HTTP, no auth.
	WebConfig string
	// MaxConns bounds the connections held (0: DefaultMaxConns).
	MaxConns int
	// IdleTimeout closes a keep-alive connection without a request for this
	// long (0: DefaultIdleTimeout).
	IdleTimeout time.Duration
	Logger      *slog.Logger
}

// Defaults.
const (
	DefaultMaxConns    = 256
	DefaultIdleTimeout = 30 * time.Second
	// HealthMaxConns bounds the probe listener: probes are a few per
	// period.
	HealthMaxConns = 32
	// Request headers must arrive within readHeaderTimeout and the whole
	// request within readTimeout; a response must be written within
	// writeTimeout (a profile of up to 50 s included).
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 60 * time.Second
	maxHeaderBytes    = 16 << 10
)

// Server is one listening HTTP server.
type Server struct {
	srv   *http.Server
	l     net.Listener
	conns *connTable
	auth  *auth
	log   *slog.Logger
}

// Listen opens the listener and checks the web configuration; Serve serves.
func Listen(opt Options) (*Server, error) {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	maxConns := opt.MaxConns
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	idle := opt.IdleTimeout
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	s := &Server{conns: newConnTable(maxConns), log: log}
	handler := opt.Handler
	var tc *tls.Config
	if opt.WebConfig != "" {
		wc := &webConfig{path: opt.WebConfig}
		var err error
		if _, tc, err = wc.get(); err != nil {
			return nil, fmt.Errorf("load web configuration %s: %w", opt.WebConfig, err)
		}
		s.auth = newAuth(wc, handler, log)
		handler = s.auth
		if tc != nil {
			// Certificates and client-auth settings reload on the next
			// handshake after the file changes.
			tc = &tls.Config{NextProtos: []string{"http/1.1"}, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
				_, cur, err := wc.get()
				if err != nil {
					log.Warn("reload web configuration: keeping the previous one", "err", err)
				}
				return cur, nil
			}}
		}
	}
	l, err := net.Listen("tcp", opt.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", opt.Addr, err)
	}
	s.l = l
	if tc != nil {
		l = tls.NewListener(l, tc)
	}
	s.l = &limitListener{Listener: l, t: s.conns}
	s.srv = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idle,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         s.conns.connState,
		ErrorLog:          newErrorLog(log),
	}
	return s, nil
}

// Addr is the listening address.
func (s *Server) Addr() net.Addr { return s.l.Addr() }

// Serve serves until Shutdown or Close; it logs a failure.
func (s *Server) Serve() {
	if err := s.srv.Serve(s.l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Error("serve HTTP", "addr", s.l.Addr().String(), "err", err)
	}
}

// Shutdown stops accepting and waits for requests in progress until ctx
// ends, then closes what is left.
func (s *Server) Shutdown(ctx context.Context) {
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
}

// Close closes the listener and every connection.
func (s *Server) Close() { s.srv.Close() }

// Stats is what the server counted.
type Stats struct {
	Conns                 int
	Evicted, Refused      uint64
	AuthOK, AuthCached    uint64
	AuthFailed, AuthLimit uint64
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	st := Stats{Conns: s.conns.len(), Evicted: s.conns.evicted.Load(), Refused: s.conns.refused.Load()}
	if s.auth != nil {
		st.AuthOK, st.AuthCached = s.auth.Stats.OK.Load(), s.auth.Stats.Cached.Load()
		st.AuthFailed, st.AuthLimit = s.auth.Stats.Failed.Load(), s.auth.Stats.Limited.Load()
	}
	return st
}

// OnShutdown runs f when Shutdown is called.
func (s *Server) OnShutdown(f func()) { s.srv.RegisterOnShutdown(f) }
