package httpserve

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v2"
	"golang.org/x/crypto/bcrypt"
)

// webConfig is the --web-config file (the Prometheus exporter-toolkit
// format: tls_server_config, http_server_config, basic_auth_users), re-read
// when the file changes so rotated certificates and passwords apply without
// a restart. The toolkit re-reads and parses it on every request and every
// handshake; under a flood that parse is work an attacker chooses, so here
// a stat of the file (its time and size) decides.
type webConfig struct {
	path string

	mu   sync.Mutex
	mod  time.Time
	size int64
	cfg  *web.Config
	tls  *tls.Config // nil: plain HTTP
	// badMod and badSize are the bad file last reported: it is reported
	// once, not on every request.
	badMod  time.Time
	badSize int64
}

// Validate loads path and the certificates it names as the server would.
func Validate(path string) error {
	if path == "" {
		return nil
	}
	if err := web.Validate(path); err != nil {
		if strings.HasPrefix(err.Error(), "crypto/bcrypt:") {
			return fmt.Errorf("basic_auth_users: %s is not a bcrypt hash (%v): store the hash of the password, e.g. from htpasswd -nbBC 10 \"\" 'PASSWORD' | tr -d ':\\n'", badHashUsers(path), err)
		}
		return err
	}
	_, _, err := loadWebConfig(path)
	return err
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

func loadWebConfig(path string) (*web.Config, *tls.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	c := &web.Config{
		TLSConfig:  web.TLSConfig{MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS13},
		HTTPConfig: web.HTTPConfig{HTTP2: true},
	}
	if err := yaml.UnmarshalStrict(b, c); err != nil {
		return nil, nil, err
	}
	for k := range c.HTTPConfig.Header {
		if http.CanonicalHeaderKey(k) == "Authorization" || http.CanonicalHeaderKey(k) == "Www-Authenticate" {
			return nil, nil, fmt.Errorf("http_server_config.headers: %s cannot be set", k)
		}
	}
	c.TLSConfig.SetDirectory(filepath.Dir(path))
	if !c.TLSConfig.IsEnabled() {
		return c, nil, nil
	}
	tc, err := web.ConfigToTLSConfig(&c.TLSConfig)
	if err != nil {
		return nil, nil, err
	}
	// HTTP/1.1 only: the connection bound counts connections, and one
	// HTTP/2 connection multiplexes any number of requests.
	tc.NextProtos = []string{"http/1.1"}
	return c, tc, nil
}

// get returns the current configuration. A file that turned bad keeps the
// last good configuration and returns the error (logged by the caller).
func (w *webConfig) get() (*web.Config, *tls.Config, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := os.Stat(w.path)
	if err != nil {
		if w.cfg == nil {
			return nil, nil, err
		}
		return w.cfg, w.tls, err
	}
	if w.cfg != nil && st.ModTime().Equal(w.mod) && st.Size() == w.size {
		return w.cfg, w.tls, nil
	}
	if w.cfg != nil && st.ModTime().Equal(w.badMod) && st.Size() == w.badSize {
		return w.cfg, w.tls, nil // known bad: already reported
	}
	c, tc, err := loadWebConfig(w.path)
	if err != nil {
		if w.cfg == nil {
			return nil, nil, err
		}
		w.badMod, w.badSize = st.ModTime(), st.Size()
		return w.cfg, w.tls, err
	}
	if (tc == nil) != (w.tls == nil) && w.cfg != nil {
		// The listener is TLS or not for its life.
		w.badMod, w.badSize = st.ModTime(), st.Size()
		return w.cfg, w.tls, errors.New("TLS cannot be turned on or off without a restart")
	}
	w.cfg, w.tls, w.mod, w.size = c, tc, st.ModTime(), st.Size()
	return c, tc, nil
}
