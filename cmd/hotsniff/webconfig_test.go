package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

// testCA is a throwaway certificate authority made by the test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hotsniff test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert, key, pool, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a certificate signed by the CA (server when ips are given,
// client otherwise) and its key into dir, returning their paths.
func (ca *testCA) issue(t *testing.T, dir, name string, ips ...net.IP) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(ips) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writeFile(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	writeFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	return certFile, keyFile
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// startDaemonOn is startDaemonVia with its own listen port and an HTTP
// client (TLS, credentials) to wait for /readyz with.
func startDaemonOn(t *testing.T, p *netnstest.Pair, port int, c *http.Client, scheme, user, pass string, args ...string) *daemonProc {
	t.Helper()
	return startDaemonWrapped(t, p, nil, port, c, scheme, user, pass, args...)
}

// startDaemonWrapped is startDaemonOn through a wrapper command (unshare,
// setpriv) run inside the namespace.
func startDaemonWrapped(t *testing.T, p *netnstest.Pair, wrapper []string, port int, c *http.Client, scheme, user, pass string, args ...string) *daemonProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := fmt.Sprintf("%s:%d", p.NSIP, port)
	args = append([]string{"run", "--iface", p.NSIface, "--listen", httpAddr, "--node", "test-node"}, testRings(args)...)
	argv := append(append(append([]string(nil), wrapper...), self), args...)
	cmd := p.Command(context.Background(), argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "HOTSNIFF_TEST_MAIN=1")
	d := &daemonProc{cmd: cmd, http: scheme + "://" + httpAddr, stderr: &testutil.Buffer{}}
	cmd.Stdout = io.Discard
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	d.waitReady(t, c, user, pass)
	return d
}

// waitReady polls /readyz with c (and basic auth when user is set) until
// the daemon is ready. Generous: loading and verifying the programs takes
// seconds on a loaded 2-core CI machine; a ready daemon answers at once.
func (d *daemonProc) waitReady(t *testing.T, c *http.Client, user, pass string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequest("GET", d.http+"/readyz", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not ready: %v\n%s", err, d.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// status GETs url with optional basic auth and returns the status code.
func status(t *testing.T, c *http.Client, url, user, pass string) (int, error) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestRunWebConfig runs the daemon with an exporter-toolkit web config:
// TLS from a CA the test makes, and basic auth. Every endpoint (the web
// view, /metrics, /hotkeys, /healthz, /readyz, pprof) answers 401 without
// credentials and 200 with them; a client that does not trust the CA
// fails the handshake; plain HTTP gets nothing. Then the file is rewritten
// to require client certificates, which applies without a restart.
func TestRunWebConfig(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	dir := t.TempDir()
	ca := newTestCA(t)
	srvCert, srvKey := ca.issue(t, dir, "server", p.NSIP.AsSlice())
	cliCert, cliKey := ca.issue(t, dir, "client")
	caFile := filepath.Join(dir, "ca.crt")
	writeFile(t, caFile, ca.pem)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret pass"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "web.yml")
	base := fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n", srvCert, srvKey)
	users := fmt.Sprintf("basic_auth_users:\n  sre: %q\n", hash)
	writeFile(t, cfgFile, []byte(base+users))

	trusted := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool}}}
	d := startDaemonOn(t, p, 19471, trusted, "https", "sre", "s3cret pass",
		"--capture", "tc", "--port", "redis=6379", "--pprof", "--web-config", cfgFile,
		"--health-listen", fmt.Sprintf("%s:19479", p.NSIP))

	// The probe listener answers /healthz and /readyz alone, without
	// credentials, and nothing else.
	health := fmt.Sprintf("http://%s:19479", p.NSIP)
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/hotkeys": 404, "/metrics": 404, "/": 404} {
		if code, err := status(t, &http.Client{Timeout: 5 * time.Second}, health+path, "", ""); err != nil || code != want {
			t.Errorf("--health-listen GET %s: %d %v, want %d", path, code, err, want)
		}
	}

	for _, path := range []string{"/", "/webview/app.js", "/metrics", "/hotkeys", "/healthz", "/readyz", "/debug/pprof/"} {
		if code, err := status(t, trusted, d.http+path, "", ""); err != nil || code != 401 {
			t.Errorf("GET %s without credentials: %d %v, want 401", path, code, err)
		}
		if code, err := status(t, trusted, d.http+path, "sre", "wrong"); err != nil || code != 401 {
			t.Errorf("GET %s with a wrong password: %d %v, want 401", path, code, err)
		}
		if code, err := status(t, trusted, d.http+path, "sre", "s3cret pass"); err != nil || code != 200 {
			t.Errorf("GET %s with credentials: %d %v, want 200", path, code, err)
		}
	}
	// A client without the CA does not get past the handshake.
	if _, err := status(t, &http.Client{Timeout: 5 * time.Second}, d.http+"/metrics", "sre", "s3cret pass"); err == nil ||
		!strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("untrusted client: %v, want an unknown authority error", err)
	}
	// Plain HTTP on the TLS port is refused.
	plain := "http" + strings.TrimPrefix(d.http, "https")
	if code, err := status(t, &http.Client{Timeout: 5 * time.Second}, plain+"/metrics", "sre", "s3cret pass"); err == nil && code == 200 {
		t.Errorf("plain HTTP served 200")
	}

	// `top` reads the protected daemon: credentials in the URL, the test
	// CA through SSL_CERT_FILE; a wrong password is an error that does not
	// show the password.
	self, _ := os.Executable()
	hostport := strings.TrimPrefix(d.http, "https://")
	topRun := func(pass string) (string, error) {
		cmd := exec.Command(self, "top", "--once", "--addr", "https://sre:"+url.PathEscape(pass)+"@"+hostport)
		cmd.Env = append(os.Environ(), "HOTSNIFF_TEST_MAIN=1", "SSL_CERT_FILE="+caFile)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := topRun("s3cret pass"); err != nil || !strings.Contains(out, "hotsniff top · https://"+hostport) || !strings.Contains(out, "node test-node") {
		t.Errorf("top against the TLS + basic auth daemon: %v\n%s", err, out)
	}
	if out, err := topRun("wrong-pass"); err == nil || !strings.Contains(out, "401") || strings.Contains(out, "wrong-pass") {
		t.Errorf("top with a wrong password: %v\n%s", err, out)
	}

	// Client certificates, applied on the next handshake.
	writeFile(t, cfgFile, []byte(base+fmt.Sprintf("  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: %s\n", caFile)+users))
	if _, err := status(t, &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool}}}, d.http+"/metrics", "sre", "s3cret pass"); err == nil {
		t.Errorf("no client certificate: the request went through")
	}
	pair, err := tls.LoadX509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	withCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{pair}}}}
	if code, err := status(t, withCert, d.http+"/hotkeys", "sre", "s3cret pass"); err != nil || code != 200 {
		t.Errorf("client certificate and credentials: %d %v, want 200", code, err)
	}
	if code, err := status(t, withCert, d.http+"/hotkeys", "", ""); err != nil || code != 401 {
		t.Errorf("client certificate without credentials: %d %v, want 401", code, err)
	}
	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("exit: %v\n%s", err, d.log())
	}
	assertNothingAttached(t, p)
}

// TestRunWebConfigErrors: a bad file is one line and exit 2, before any
// capture starts (so no root is needed to see it).
func TestRunWebConfigErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yml")
	writeFile(t, bad, []byte("tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /nonexistent.key\n"))
	typo := filepath.Join(dir, "typo.yml")
	writeFile(t, typo, []byte("basic_auth_user:\n  a: b\n"))
	// A plain password where the hash belongs: the line names the user and
	// says what to store.
	plain := filepath.Join(dir, "plain.yml")
	writeFile(t, plain, []byte("basic_auth_users:\n  sre: change-me\n"))
	for _, c := range []struct{ file, want string }{
		{filepath.Join(dir, "missing.yml"), "no such file"},
		{bad, "nonexistent.crt"},
		{typo, "basic_auth_user"},
		{plain, `basic_auth_users: the password of user "sre" is not a bcrypt hash`},
		{plain, "store the hash of the password, e.g. from htpasswd -nbBC 10"},
	} {
		var errb strings.Builder
		code := runWith([]string{"run", "--web-config", c.file, "--iface", "lo"}, io.Discard, &errb)
		if code != 2 || strings.Count(errb.String(), "\n") != 1 || !strings.Contains(errb.String(), c.want) || !strings.Contains(errb.String(), "--web-config") {
			t.Errorf("%s: exit %d, stderr %q; want 2 and one line naming %q", c.file, code, errb.String(), c.want)
		}
	}
}

// TestDocsWebConfigExamples loads every web configuration example of
// docs/http.md verbatim (certificates made by the test where an example
// names them), as `run --web-config` would.
func TestDocsWebConfigExamples(t *testing.T) {
	b, err := os.ReadFile("../../docs/http.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(b), "```yaml\n")[1:]
	if len(blocks) < 2 {
		t.Fatalf("%d yaml examples in docs/http.md", len(blocks))
	}
	ca := newTestCA(t)
	for i, blk := range blocks {
		body := blk[:strings.Index(blk, "```")]
		dir := t.TempDir()
		crt, key := ca.issue(t, dir, "tls", net.IPv4(127, 0, 0, 1))
		os.Rename(crt, filepath.Join(dir, "tls.crt"))
		os.Rename(key, filepath.Join(dir, "tls.key"))
		path := filepath.Join(dir, "web-config.yml")
		writeFile(t, path, []byte(body))
		if err := checkWebConfig(path); err != nil {
			t.Errorf("example %d does not load: %v\n%s", i+1, err, body)
		}
	}
	// The documented hash is the documented password's.
	hash := strings.Fields(strings.SplitN(blocks[0], "sre:", 2)[1])[0]
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte("change-me")); err != nil {
		t.Errorf("documented hash is not change-me's: %v", err)
	}
}
