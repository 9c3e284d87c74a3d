package publish

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Target is a parsed --redis-url: either one server or a Redis Cluster.
type Target struct {
	// Cluster is set by ?cluster=true or by any addr= parameter.
	Cluster bool
	// Single holds the options of a standalone server (Cluster false).
	Single *redis.Options
	// ClusterOpts holds the options of a cluster (Cluster true).
	ClusterOpts *redis.ClusterOptions
	// Redacted is the URL with the password masked, fit for logs and errors.
	Redacted string
}

// TLS reports whether the URL asked for TLS (rediss://).
func (t *Target) TLS() bool {
	if t.Cluster {
		return t.ClusterOpts.TLSConfig != nil
	}
	return t.Single.TLSConfig != nil
}

// TLSOptions are the TLS settings a URL cannot carry. They apply to rediss://
// URLs only.
type TLSOptions struct {
	// CAFile is a PEM bundle of CAs trusted for the server certificate;
	// empty means the system roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and key, for servers
	// run with tls-auth-clients.
	CertFile, KeyFile string
	// InsecureSkipVerify disables server certificate checks (testing only).
	InsecureSkipVerify bool
	// ServerName overrides the name checked in the server certificate; the
	// URL host by default.
	ServerName string
}

// IsZero reports whether no TLS option is set.
func (o TLSOptions) IsZero() bool { return o == TLSOptions{} }

// ParseURL parses redis://[user:pass@]host:port[/db] and rediss:// (TLS).
// A cluster is addressed as redis://host:port?cluster=true, optionally with
// more seed nodes as addr=host:port parameters (which also imply cluster
// mode); a cluster has no database number. Other query parameters are
// go-redis options (dial_timeout=2s, ...). Errors never contain the password.
func ParseURL(raw string) (*Target, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, errors.New("parse redis url: empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the whole URL, password included: keep only the cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("parse redis url: %w", err)
	}
	red := u.Redacted()
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("parse redis url %s: scheme must be redis:// or rediss://", red)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("parse redis url %s: missing host", red)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("parse redis url %s: bad port %q", red, p)
		}
	}
	q := u.Query()
	cluster := false
	if vs, ok := q["cluster"]; ok {
		v := vs[len(vs)-1]
		switch v {
		case "true", "1", "":
			cluster = true
		case "false", "0":
		default:
			return nil, fmt.Errorf("parse redis url %s: cluster must be true or false, not %q", red, v)
		}
		q.Del("cluster")
	}
	if len(q["addr"]) > 0 {
		cluster = true
	}
	u.RawQuery = q.Encode()
	t := &Target{Cluster: cluster, Redacted: red}
	if cluster {
		if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
			return nil, fmt.Errorf("parse redis url %s: a cluster has no database %s", red, db)
		}
		u.Path = ""
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("parse redis url %s: %s", red, strings.TrimPrefix(err.Error(), "redis: "))
		}
		t.ClusterOpts = o
		return t, nil
	}
	o, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("parse redis url %s: %s", red, strings.TrimPrefix(err.Error(), "redis: "))
	}
	t.Single = o
	return t, nil
}

// Connect makes a client for t. It does not dial: the publisher must start
// (and keep capturing) while Redis is down; callers that want to fail fast
// Ping. TLS files are read here, so a bad CA file is reported at once.
func Connect(t *Target, to TLSOptions) (redis.UniversalClient, error) {
	if t == nil {
		return nil, errors.New("connect redis: no target")
	}
	var base *tls.Config
	if t.Single != nil {
		base = t.Single.TLSConfig
	} else if t.ClusterOpts != nil {
		base = t.ClusterOpts.TLSConfig
	}
	if base == nil && !to.IsZero() {
		return nil, fmt.Errorf("connect redis %s: TLS options need a rediss:// URL", t.Redacted)
	}
	if base != nil {
		cfg, err := tlsConfig(base, to)
		if err != nil {
			return nil, fmt.Errorf("connect redis %s: %w", t.Redacted, err)
		}
		base = cfg
	}
	// Short timeouts: a stuck server must show up as an error the publisher
	// backs off from, not as a batch loop hung for a minute.
	if t.Cluster {
		o := *t.ClusterOpts
		o.TLSConfig = base
		connDefaults(&o.ClientName, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.DialerRetries)
		return redis.NewClusterClient(&o), nil
	}
	o := *t.Single
	o.TLSConfig = base
	connDefaults(&o.ClientName, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.DialerRetries)
	return redis.NewClient(&o), nil
}

// connDefaults fills what the URL left unset, for single and cluster
// options alike.
func connDefaults(name *string, dial, read, write *time.Duration, retries *int) {
	if *name == "" {
		*name = "hotsniff"
	}
	if *dial == 0 {
		*dial = 2 * time.Second
	}
	if *retries == 0 {
		*retries = 1 // the publisher and subscriber back off themselves
	}
	if *read == 0 {
		*read = 3 * time.Second
	}
	if *write == 0 {
		*write = 3 * time.Second
	}
}

// Dial is ParseURL then Connect.
func Dial(raw string, to TLSOptions) (redis.UniversalClient, error) {
	t, err := ParseURL(raw)
	if err != nil {
		return nil, err
	}
	return Connect(t, to)
}

// IsCluster reports whether c talks to a Redis Cluster, where the channel is
// a sharded one (SPUBLISH/SSUBSCRIBE).
func IsCluster(c redis.UniversalClient) bool {
	_, ok := c.(*redis.ClusterClient)
	return ok
}

func tlsConfig(base *tls.Config, to TLSOptions) (*tls.Config, error) {
	cfg := base.Clone()
	if cfg.MinVersion == 0 {
		cfg.MinVersion = tls.VersionTLS12
	}
	if to.ServerName != "" {
		cfg.ServerName = to.ServerName
	}
	cfg.InsecureSkipVerify = to.InsecureSkipVerify
	if to.CAFile != "" {
		pem, err := os.ReadFile(to.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("read CA file %s: no PEM certificate in it", to.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (to.CertFile == "") != (to.KeyFile == "") {
		return nil, errors.New("load client certificate: need both a certificate and a key file")
	}
	if to.CertFile != "" {
		c, err := tls.LoadX509KeyPair(to.CertFile, to.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}
