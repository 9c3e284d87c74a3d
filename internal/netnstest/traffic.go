package netnstest

import (
	"bytes"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"testing"
)

// RedisBenchmark runs redis-benchmark from the calling namespace against
// addr: n GET requests over 4 connections, pipeline p, keys drawn from
// keyspace ("key:NNNNNNNNNNNN"). It returns the tool's output.
func RedisBenchmark(t testing.TB, addr netip.AddrPort, n, p, keyspace int) string {
	t.Helper()
	bin := Need(t, "redis-benchmark")
	out, err := exec.Command(bin, "-h", addr.Addr().String(), "-p", strconv.Itoa(int(addr.Port())),
		"-n", strconv.Itoa(n), "-P", strconv.Itoa(p), "-r", strconv.Itoa(keyspace), "-c", "4",
		"-t", "get", "-q").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-benchmark: %v: %s", err, out)
	}
	return string(out)
}

// GetCommand is how a two-argument GET starts on the wire; CONFIG GET and
// other commands with a GET argument do not match it.
var GetCommand = []byte("*2\r\n$3\r\nGET\r\n")

// CountGets counts GET requests in a client-to-server byte stream, in either
// case (go-redis sends "get").
func CountGets(stream []byte) int {
	return bytes.Count(stream, GetCommand) + bytes.Count(stream, bytes.ToLower(GetCommand))
}

// RESP encodes a command as a RESP array of bulk strings.
func RESP(args ...string) []byte {
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b
}

// RedisBenchmarkKey runs redis-benchmark's GET test without -r, so every
// request names the literal key "key:__rand_int__": n GETs over 4
// connections with pipeline p, a known workload with one planted hot key.
func RedisBenchmarkKey(t testing.TB, addr netip.AddrPort, n, p int) string {
	t.Helper()
	bin := Need(t, "redis-benchmark")
	out, err := exec.Command(bin, "-h", addr.Addr().String(), "-p", strconv.Itoa(int(addr.Port())),
		"-n", strconv.Itoa(n), "-P", strconv.Itoa(p), "-c", "4", "-t", "get", "-q").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-benchmark: %v: %s", err, out)
	}
	return string(out)
}
