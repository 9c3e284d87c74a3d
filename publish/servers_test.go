package publish_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

// server is a redis-server started on a port of our choosing, so a test can
// kill it and start a new one on the same port (testutil picks its own).
type server struct {
	Addr string
	Port int
	cmd  *exec.Cmd
	out  *testutil.Buffer
	// exited is closed by the only goroutine that waits for the process.
	exited chan struct{}
}

// startRedisOn starts redis-server on port; it fails the test if the server
// does not answer PING on that plain port.
func startRedisOn(t testing.TB, port int, extra ...string) *server {
	t.Helper()
	s, err := tryRedisOn(t, port, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func tryRedisOn(t testing.TB, port int, extra ...string) (*server, error) {
	t.Helper()
	bin := testutil.Need(t, "redis-server")
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(),
		"--protected-mode", "no",
	}, extra...)
	s := &server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Port: port, out: &testutil.Buffer{}}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	s.exited = exited
	go func() { _ = s.cmd.Wait(); close(exited) }()
	t.Cleanup(s.Stop)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return nil, fmt.Errorf("redis-server exited: %s", lastLines(s.out.String()))
		default:
		}
		if testutil.RedisUp(s.Addr) {
			return s, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, fmt.Errorf("redis-server on %s did not come up: %s", s.Addr, lastLines(s.out.String()))
}

func lastLines(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > 3 {
		l = l[len(l)-3:]
	}
	return strings.Join(l, " | ")
}

// Stop kills the server; safe to call twice.
func (s *server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
		s.cmd = nil
	}
}

// startCluster starts three masters and joins them with redis-cli. It
// returns their addresses once every node reports cluster_state:ok.
func startCluster(t testing.TB) []string {
	t.Helper()
	dir := t.TempDir()
	var addrs []string
	for i := 0; i < 3; i++ {
		p := testutil.ClusterPort(t)
		s := startRedisOn(t, p, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", p)),
			"--cluster-node-timeout", "2000")
		addrs = append(addrs, s.Addr)
	}
	testutil.CreateCluster(t, addrs)
	return addrs
}

// pki is a throwaway CA with a server certificate for 127.0.0.1 and a
// client certificate, all written as PEM files in a temp dir.
type pki struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

func makePKI(t testing.TB) pki {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hotsniff test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p := pki{CA: filepath.Join(dir, "ca.pem")}
	writePEM(t, p.CA, "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			DNSNames:    []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		cf, kf := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, cf, "CERTIFICATE", der)
		writePEM(t, kf, "PRIVATE KEY", kd)
		return cf, kf
	}
	p.ServerCert, p.ServerKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.ClientCert, p.ClientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func init() {
	// go-redis logs every failed dial on stderr; the outage tests make many.
	redis.SetLogger(nopLogger{})
}

type nopLogger struct{}

func (nopLogger) Printf(context.Context, string, ...any) {}
