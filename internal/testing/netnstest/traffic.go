package netnstest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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

// LoadMix drives conns connections, each sending pipelines of pipe GETs
// until ctx ends: a key from keyspace at random, or hot with probability
// hotShare. It counts the requests answered in total, and those for hot in
// hotTotal, as they are answered.
func LoadMix(ctx context.Context, t testing.TB, srv netip.AddrPort, conns, pipe, keyspace int, hot string, hotShare float64, total, hotTotal *atomic.Int64) {
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", srv.String())
			if err != nil {
				t.Errorf("dial: %v", err)
				return
			}
			defer c.Close()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			rd := bufio.NewReaderSize(c, 64<<10)
			var buf []byte
			for ctx.Err() == nil {
				buf = buf[:0]
				nhot := 0
				for range pipe {
					k := hot
					if rng.Float64() >= hotShare {
						k = "key:" + strconv.Itoa(rng.IntN(keyspace))
					} else {
						nhot++
					}
					buf = append(buf, RESP("GET", k)...)
				}
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Write(buf); err != nil {
					return
				}
				for range pipe {
					line, err := rd.ReadString('\n')
					if err != nil {
						return
					}
					if line[0] == '$' && line[1] != '-' {
						n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
						if _, err := rd.Discard(n + 2); err != nil {
							return
						}
					}
				}
				total.Add(int64(pipe))
				hotTotal.Add(int64(nhot))
			}
		}()
	}
	wg.Wait()
}
