// Package testutil starts the real servers tests talk to: redis-server and
// memcached from Debian, on free loopback ports, stopped when the test ends.
package testutil

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Need skips the test when a binary is missing, except in CI (CI=true),
// where a missing server is a broken setup and fails the test.
func Need(t testing.TB, bin string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not installed (CI must install it)", bin)
		}
		t.Skipf("%s not installed", bin)
	}
	return p
}

// Redis is a running redis-server.
type Redis struct {
	Addr string
	Port int
	cmd  *exec.Cmd
}

// StartRedis starts redis-server on a free loopback port with no persistence.
// Extra arguments are passed as config directives ("--requirepass", "x").
func StartRedis(t testing.TB, extra ...string) *Redis {
	t.Helper()
	return StartRedisOn(t, FreePort(t), extra...)
}

// Stop kills the server; safe to call twice.
func (r *Redis) Stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

func waitRedis(t testing.TB, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if RedisUp(addr) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redis-server at %s did not come up", addr)
}

// RedisUp reports whether a Redis server answers PING at addr (an error
// reply, such as NOAUTH, counts: the server is up).
func RedisUp(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	fmt.Fprint(c, "PING\r\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && len(line) > 0 && (line[0] == '+' || line[0] == '-')
}

// Memcached is a running memcached.
type Memcached struct {
	Addr string
	Port int
	cmd  *exec.Cmd
}

// StartMemcached starts memcached on a free loopback port (TCP only).
func StartMemcached(t testing.TB, extra ...string) *Memcached {
	t.Helper()
	bin := Need(t, "memcached")
	port := FreePort(t)
	args := append([]string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0", "-m", "64", "-u", "root"}, extra...)
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start memcached: %v", err)
	}
	m := &Memcached{Addr: fmt.Sprintf("127.0.0.1:%d", port), Port: port, cmd: cmd}
	t.Cleanup(m.Stop)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", m.Addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return m
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("memcached at %s did not come up", m.Addr)
	return nil
}

// Stop kills the server; safe to call twice.
func (m *Memcached) Stop() {
	if m.cmd != nil && m.cmd.Process != nil {
		_ = m.cmd.Process.Kill()
		_ = m.cmd.Wait()
		m.cmd = nil
	}
}

// StartRedisOn starts redis-server on a given port, for tests that stop a
// server and bring it back where clients expect it.
func StartRedisOn(t testing.TB, port int, extra ...string) *Redis {
	t.Helper()
	bin := Need(t, "redis-server")
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(),
		"--protected-mode", "no",
	}, extra...)
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	r := &Redis{Addr: fmt.Sprintf("127.0.0.1:%d", port), Port: port, cmd: cmd}
	t.Cleanup(r.Stop)
	waitRedis(t, r.Addr)
	return r
}
