package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/bcrypt"
)

// checkWebConfig loads the --web-config file (and the certificates it
// names) at start, so a mistake is one line and exit 2 rather than a
// daemon serving nothing.
func checkWebConfig(path string) error {
	if path == "" {
		return nil
	}
	if _, err := os.Stat(path); err != nil {
		return usagef("--web-config %s: %v", path, errors.Unwrap(err))
	}
	if err := web.Validate(path); err != nil {
		if strings.HasPrefix(err.Error(), "crypto/bcrypt:") {
			return usagef("--web-config %s: basic_auth_users: %s is not a bcrypt hash (%v): store the hash of the password, e.g. from htpasswd -nbBC 10 \"\" 'PASSWORD' | tr -d ':\\n'",
				path, badHashUsers(path), err)
		}
		return usagef("--web-config %s: %v", path, err)
	}
	return nil
}

// badHashUsers names the users of the file whose password is not a bcrypt
// hash (the toolkit's error names none), for the error line.
func badHashUsers(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "a password"
	}
	var c struct {
		Users map[string]string `yaml:"basic_auth_users"`
	}
	if yaml.Unmarshal(b, &c) != nil {
		return "a password"
	}
	var bad []string
	for u, h := range c.Users {
		if _, err := bcrypt.Cost([]byte(h)); err != nil {
			bad = append(bad, strconv.Quote(u))
		}
	}
	if len(bad) == 0 {
		return "a password"
	}
	sort.Strings(bad)
	return "the password of user " + strings.Join(bad, ", ")
}

// serveWeb serves srv on l through the exporter toolkit: with a web
// config it wraps every handler in basic auth and serves TLS (the file is
// re-read per request and per TLS handshake, so rotated certificates and
// passwords apply without a restart); without one, plain HTTP.
func serveWeb(l net.Listener, srv *http.Server, path string, log *slog.Logger) {
	noSystemd := false
	addrs := []string{l.Addr().String()}
	err := web.Serve(l, srv, &web.FlagConfig{WebListenAddresses: &addrs, WebSystemdSocket: &noSystemd, WebConfigFile: &path}, quietInfo(log))
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("serve HTTP", "err", fmt.Errorf("serve %s: %w", l.Addr(), err))
	}
}

// quietInfo keeps the toolkit's start-up lines at debug: the daemon logs
// its own "capturing" line with the address.
func quietInfo(log *slog.Logger) *slog.Logger {
	return slog.New(levelShift{log.Handler()})
}

type levelShift struct{ slog.Handler }

func (l levelShift) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo {
		r.Level = slog.LevelDebug
	}
	if !l.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return l.Handler.Handle(ctx, r)
}

func (l levelShift) Enabled(ctx context.Context, lvl slog.Level) bool { return true }
func (l levelShift) WithAttrs(a []slog.Attr) slog.Handler             { return levelShift{l.Handler.WithAttrs(a)} }
func (l levelShift) WithGroup(n string) slog.Handler                  { return levelShift{l.Handler.WithGroup(n)} }
