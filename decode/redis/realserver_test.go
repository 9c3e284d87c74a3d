package redis

import (
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

var update = flag.Bool("update", false, "rewrite testdata/*.resp from a real redis-server")

// teeConn records every byte the client writes.
type teeConn struct {
	net.Conn
	mu  sync.Mutex
	out []byte
}

func (c *teeConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.out = append(c.out, b...)
	c.mu.Unlock()
	return c.Conn.Write(b)
}

// step is one thing the test does through go-redis and what the decoder
// must report for it: the independent truth is what the test asked for.
type step struct {
	do   func(ctx context.Context, c *goredis.Conn) error
	want []string // recReq.String() form
}

// binKey holds bytes a naive line or space splitter would break on.
var binKey = "bin key\r\n*2\r\n\x00\xff end"

func steps() []step {
	bigValue := strings.Repeat("v", 20000)
	return []step{
		{func(ctx context.Context, c *goredis.Conn) error { return c.Set(ctx, "k1", "v1", 0).Err() }, []string{"SET/w k1"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.Get(ctx, "k1").Err() }, []string{"GET k1"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.MGet(ctx, "a", "b", "k1").Err() }, []string{"MGET a b k1"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.MSet(ctx, "a", "1", "b", "2").Err() }, []string{"MSET/w a b"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.HSet(ctx, "h", "f1", "1", "f2", "2").Err() }, []string{"HSET/w h"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.HMGet(ctx, "h", "f1", "f2", "f3").Err() }, []string{"HMGET h*3"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.HGet(ctx, "h", "f1").Err() }, []string{"HGET h"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.HExists(ctx, "h", "f9").Err() }, []string{"HEXISTS h"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.SAdd(ctx, "s", "x").Err() }, []string{"SADD/w s"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.SMIsMember(ctx, "s", "x", "y").Err() }, []string{"SMISMEMBER s*2"}},
		{func(ctx context.Context, c *goredis.Conn) error {
			return c.ZAdd(ctx, "z1", goredis.Z{Score: 1, Member: "m"}).Err()
		}, []string{"ZADD/w z1"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.ZMScore(ctx, "z1", "m", "n", "o").Err() }, []string{"ZMSCORE z1*3"}},
		{func(ctx context.Context, c *goredis.Conn) error {
			return c.ZUnionStore(ctx, "zdst", &goredis.ZStore{Keys: []string{"z1", "z2"}, Weights: []float64{1, 2}}).Err()
		}, []string{"ZUNIONSTORE/w zdst z1 z2"}},
		{func(ctx context.Context, c *goredis.Conn) error {
			return c.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{"k1", "k2"}, "arg1").Err()
		}, []string{"EVAL k1 k2"}},
		{func(ctx context.Context, c *goredis.Conn) error {
			sha, err := c.ScriptLoad(ctx, "return 1").Result()
			if err != nil {
				return err
			}
			return c.EvalSha(ctx, sha, []string{"k3"}).Err()
		}, []string{"SCRIPT|LOAD", "EVALSHA k3"}},
		{func(ctx context.Context, c *goredis.Conn) error {
			return c.EvalRO(ctx, "return 1", nil, "x", "y").Err()
		}, []string{"EVAL_RO"}},
		{func(ctx context.Context, c *goredis.Conn) error {
			return c.XAdd(ctx, &goredis.XAddArgs{Stream: "st1", Values: []string{"f", "v"}}).Err()
		}, []string{"XADD/w st1"}},
		{func(ctx context.Context, c *goredis.Conn) error {
			return c.XRead(ctx, &goredis.XReadArgs{Streams: []string{"st1", "st2", "0", "0"}, Count: 5, Block: -1}).Err()
		}, []string{"XREAD st1 st2"}},
		{func(ctx context.Context, c *goredis.Conn) error {
			if err := c.RPush(ctx, "list", "3", "1", "2").Err(); err != nil {
				return err
			}
			return c.SortStore(ctx, "list", "sorted", &goredis.Sort{Order: "DESC"}).Err()
		}, []string{"RPUSH/w list", "SORT/w list sorted"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.ObjectEncoding(ctx, "k1").Err() }, []string{"OBJECT|ENCODING k1"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.Exists(ctx, "a", "zz").Err() }, []string{"EXISTS a zz"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.Ping(ctx).Err() }, []string{"PING"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.Set(ctx, "big", bigValue, 0).Err() }, []string{"SET/w big"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.Get(ctx, "big").Err() }, []string{"GET big"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.Set(ctx, binKey, "x", 0).Err() }, []string{"SET/w " + showKey(binKey)}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.MGet(ctx, binKey, "", "a").Err() }, []string{"MGET " + showKey(binKey) + ` "" a`}},
		{func(ctx context.Context, c *goredis.Conn) error {
			_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for _, k := range []string{"p1", "p2", "p3"} {
					p.Get(ctx, k)
				}
				p.Incr(ctx, "p4")
				p.HMGet(ctx, "h", "f1", "f2")
				return nil
			})
			if errors.Is(err, goredis.Nil) {
				err = nil
			}
			return err
		}, []string{"GET p1", "GET p2", "GET p3", "INCR/w p4", "HMGET h*2"}},
		{func(ctx context.Context, c *goredis.Conn) error {
			_, err := c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
				p.Set(ctx, "t1", "v", 0)
				p.Get(ctx, "t1")
				p.Del(ctx, "t2", "t3")
				return nil
			})
			return err
		}, []string{"MULTI", "SET/w t1", "GET t1", "DEL/w t2 t3", "EXEC"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.Select(ctx, 2).Err() }, []string{"SELECT"}},
		{func(ctx context.Context, c *goredis.Conn) error { return c.Get(ctx, "in2").Err() }, []string{"GET@2 in2"}},
		{func(ctx context.Context, c *goredis.Conn) error {
			_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
				p.Set(ctx, "in2", "v", 0)
				p.MGet(ctx, "in2", "x")
				p.Select(ctx, 0)
				p.Get(ctx, "in0")
				return nil
			})
			return err
		}, []string{"SET/w@2 in2", "MGET@2 in2 x", "SELECT@2", "GET in0"}},
	}
}

// ignoredOps are what go-redis sends by itself when it connects.
func connectionSetup(op string) bool {
	return op == "HELLO" || strings.HasPrefix(op, "CLIENT")
}

func wantLines(ss []step) []string {
	var w []string
	for _, s := range ss {
		w = append(w, s.want...)
	}
	return w
}

func decodedLines(t testing.TB, stream []byte) []string {
	t.Helper()
	r := decodeWhole(t, stream)
	if len(r.errs) != 0 || r.orphan != 0 {
		t.Errorf("decode errors %q, orphan keys %d", r.errs, r.orphan)
	}
	var got []string
	for _, q := range r.reqs {
		if !connectionSetup(q.Op) {
			got = append(got, q.String())
		}
	}
	return got
}

// record runs the steps through go-redis against a real server and returns
// what the client wrote.
func record(t *testing.T, protocol int) []byte {
	t.Helper()
	srv := testutil.StartRedis(t)
	var mu sync.Mutex
	var conns []*teeConn
	rdb := goredis.NewClient(&goredis.Options{
		Addr:     srv.Addr,
		Protocol: protocol,
		PoolSize: 1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := &teeConn{Conn: c}
			mu.Lock()
			conns = append(conns, tc)
			mu.Unlock()
			return tc, nil
		},
	})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn := rdb.Conn()
	for i, s := range steps() {
		if err := s.do(ctx, conn); err != nil && !errors.Is(err, goredis.Nil) {
			t.Fatalf("step %d (%q): %v", i, s.want, err)
		}
	}
	conn.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(conns) != 1 {
		t.Fatalf("go-redis opened %d connections, want 1", len(conns))
	}
	return conns[0].out
}

func TestRealServer(t *testing.T) {
	for _, proto := range []struct {
		name string
		ver  int
	}{{"resp2", 2}, {"resp3", 3}} {
		t.Run(proto.name, func(t *testing.T) {
			stream := record(t, proto.ver)
			if got, want := decodedLines(t, stream), wantLines(steps()); !slices.Equal(got, want) {
				t.Errorf("decoded\n got %q\nwant %q", got, want)
			}
			if *update {
				path := filepath.Join("testdata", "goredis_"+proto.name+".resp")
				if err := os.WriteFile(path, stream, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// recordedStreams are the client bytes of TestRealServer, committed so the
// splitting and mid-stream tests run without a server.
func recordedStreams(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.resp"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded streams in testdata (run go test -run TestRealServer -update): %v", err)
	}
	m := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m[filepath.Base(f)] = b
	}
	return m
}

func TestRecordedStreams(t *testing.T) {
	for name, stream := range recordedStreams(t) {
		t.Run(name, func(t *testing.T) {
			if got, want := decodedLines(t, stream), wantLines(steps()); !slices.Equal(got, want) {
				t.Errorf("decoded\n got %q\nwant %q", got, want)
			}
		})
	}
}
