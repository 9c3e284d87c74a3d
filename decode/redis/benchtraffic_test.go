package redis

import (
	"context"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

// teeProxy forwards loopback connections to a server and records what each
// client wrote.
type teeProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []*teeConn
	wg    sync.WaitGroup
}

func startTeeProxy(t *testing.T, target string) *teeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &teeProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			tc := &teeConn{Conn: s} // writes to the server are the client's bytes
			p.mu.Lock()
			p.conns = append(p.conns, tc)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(tc, c); s.(*net.TCPConn).CloseWrite() }()
			go func() { defer p.wg.Done(); io.Copy(c, s); c.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return p
}

func (p *teeProxy) streams() [][]byte {
	p.ln.Close()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out [][]byte
	for _, c := range p.conns {
		out = append(out, c.out)
	}
	return out
}

// TestRedisBenchmarkTraffic decodes what redis-benchmark sends (pipelined
// RESP, inline PING, MSET of 10 keys) and checks the counts against the
// request counts redis-benchmark was told to send.
func TestRedisBenchmarkTraffic(t *testing.T) {
	bin := testutil.Need(t, "redis-benchmark")
	srv := testutil.StartRedis(t)
	proxy := startTeeProxy(t, srv.Addr)
	const n = 3200 // a multiple of -c × -P: redis-benchmark sends whole pipelines
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, port, _ := net.SplitHostPort(proxy.ln.Addr().String())
	cmd := exec.CommandContext(ctx, bin, "-h", "127.0.0.1", "-p", port, "-n", strconv.Itoa(n), "-c", "2", "-P", "16",
		"-r", "1000", "-q", "-t", "ping_inline,ping_mbulk,get,set,mset,hset,lpush,lrange_100")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	ops := map[string]int{}
	keys := map[string]int{}
	for _, stream := range proxy.streams() {
		r := decodeWhole(t, stream)
		if len(r.errs) != 0 {
			t.Errorf("errors %q", r.errs)
		}
		for _, q := range r.reqs {
			ops[q.Op]++
			for _, k := range q.Keys {
				keys[q.Op]++
				if !strings.HasPrefix(k.Key, "key:") && !strings.HasPrefix(k.Key, "mylist") && !strings.HasPrefix(k.Key, "myhash") {
					t.Fatalf("%s: unexpected key %q", q.Op, k.Key)
				}
			}
		}
	}
	want := map[string][2]int{ // op: requests, keys
		"PING":   {2 * n, 0}, // inline and multibulk
		"GET":    {n, n},
		"SET":    {n, n},
		"MSET":   {n, 10 * n},
		"HSET":   {n, n},
		"LRANGE": {n, n},
	}
	for op, w := range want {
		if ops[op] != w[0] || keys[op] != w[1] {
			t.Errorf("%s: %d requests, %d keys; want %d, %d", op, ops[op], keys[op], w[0], w[1])
		}
	}
	// lpush is also used to fill the list for lrange.
	if ops["LPUSH"] < n || keys["LPUSH"] != ops["LPUSH"] {
		t.Errorf("LPUSH: %d requests, %d keys", ops["LPUSH"], keys["LPUSH"])
	}
	t.Logf("ops %v", ops)
}
