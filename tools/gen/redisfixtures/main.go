// Command redisfixtures captures the Redis fixtures in testdata/redis from a
// real redis-server driven by real clients (redis-benchmark, go-redis), and
// writes beside each capture the truth the clients were told to send, in
// `hotsniff decode --count` form. It needs root (tcpdump), redis-server,
// redis-benchmark and a free port 6379. See testdata/README.md.
//
//	go run ./tools/gen/redisfixtures -out testdata/redis
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/tools/gen/fixture"
)

const port = 6379

func main() {
	out := flag.String("out", "testdata/redis", "output directory")
	only := flag.String("only", "", "comma-separated fixture names to make (default all)")
	flag.Parse()
	if err := run(*out, *only); err != nil {
		fmt.Fprintln(os.Stderr, "redisfixtures:", err)
		os.Exit(1)
	}
}

type gen struct {
	name string
	fn   func(ctx context.Context, t *fixture.Truth) error
}

func run(out, only string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", out, err)
	}
	if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		return fmt.Errorf("port %d is busy: the fixtures use Redis's default port", port)
	} else {
		l.Close()
	}
	dir, err := os.MkdirTemp("", "redisfixtures")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1 ::1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--databases", "16")
	if err := srv.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	time.Sleep(300 * time.Millisecond)

	gens := []gen{
		{"get-p1", benchmark("-P", "1", "-n", "1500", "-c", "3")},
		{"get-p16", benchmark("-P", "16", "-n", "8000", "-c", "2")},
		{"goredis-mix", goredisMix},
		{"resp3", resp3},
		{"midstream", nil}, // special: capture starts while traffic is flowing
		{"hotkey", hotkey},
		{"writehot", writehot},
		{"bytes-mix", bytesMix},
		{"bytes-bench", benchBytes},
	}
	ctx := context.Background()
	for _, g := range gens {
		if only != "" && !strings.Contains(","+only+",", ","+g.name+",") {
			continue
		}
		pcap := filepath.Join(out, g.name+".pcap")
		golden := filepath.Join(out, g.name+".count.golden")
		truth := fixture.NewTruth()
		btruth = fixture.NewBytesTruth()
		if g.name == "midstream" {
			err = midstream(ctx, pcap, truth)
		} else {
			err = captureRun(pcap, func() error { return g.fn(ctx, truth) })
		}
		if err != nil {
			return fmt.Errorf("fixture %s: %w", g.name, err)
		}
		if err := truth.Write(golden); err != nil {
			return err
		}
		if btruth.Len() > 0 {
			if err := btruth.Write(filepath.Join(out, g.name+".bytes.golden")); err != nil {
				return err
			}
		}
		if g.name == "hotkey" || g.name == "writehot" || g.name == "bytes-mix" {
			// Kept gzipped: it is the largest capture, and it exercises the
			// reader's transparent gunzip.
			if out, err := exec.Command("gzip", "-9", "-f", pcap).CombinedOutput(); err != nil {
				return fmt.Errorf("gzip %s: %v: %s", pcap, err, out)
			}
		}
		c, w := truth.Keys()
		slog.Info("fixture", "name", g.name, "keys", c, "weight", w)
	}
	return nil
}

func captureRun(path string, fn func() error) error {
	c, err := fixture.StartCapture(path, fmt.Sprintf("tcp port %d", port))
	if err != nil {
		return err
	}
	ferr := fn()
	if err := c.Stop(); err != nil {
		return err
	}
	return ferr
}

func client(opt *redis.Options) *redis.Client {
	if opt.Addr == "" {
		opt.Addr = fmt.Sprintf("127.0.0.1:%d", port)
	}
	return redis.NewClient(opt)
}

// commandCalls reads the server's own count of executed commands, an
// independent check on the generator's bookkeeping.
func commandCalls(ctx context.Context, cmd string) (int64, error) {
	c := client(&redis.Options{})
	defer c.Close()
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(s, "\r\n") {
		if strings.HasPrefix(line, "cmdstat_"+cmd+":calls=") {
			v := strings.TrimPrefix(line, "cmdstat_"+cmd+":calls=")
			v, _, _ = strings.Cut(v, ",")
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, nil
}

func resetStats(ctx context.Context) error {
	c := client(&redis.Options{})
	defer c.Close()
	return c.ConfigResetStat(ctx).Err()
}

// benchmark runs redis-benchmark's GET test. Without -r every GET names the
// literal key "key:__rand_int__", so the truth is exact; the server's
// commandstats confirm how many GETs redis-benchmark really sent.
func benchmark(args ...string) func(ctx context.Context, t *fixture.Truth) error {
	return func(ctx context.Context, t *fixture.Truth) error {
		if err := resetStats(ctx); err != nil {
			return err
		}
		a := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-t", "get", "-q"}, args...)
		if out, err := exec.Command("redis-benchmark", a...).CombinedOutput(); err != nil {
			return fmt.Errorf("redis-benchmark: %w: %s", err, out)
		}
		n, err := commandCalls(ctx, "get")
		if err != nil {
			return err
		}
		t.Add("redis", "0", "key:__rand_int__", uint64(n), 1)
		return nil
	}
}

// zipfKeys returns a generator of keys "item:N" with a Zipf distribution:
// item:0 is the planted hot key.
func zipfKeys(seed uint64, n uint64) func() string {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	z := rand.NewZipf(r, 1.1, 1, n-1)
	return func() string { return "item:" + strconv.FormatUint(z.Uint64(), 10) }
}

// oddKeys are keys a decoder that splits on spaces or trusts UTF-8 gets wrong.
var oddKeys = []string{
	"key with spaces",
	"crlf\r\nin key",
	"nul\x00byte",
	"bin\xff\xfe\x80",
	"ünïcødé:🔑",
	"*2\r\n$3\r\nGET\r\n$4\r\nfake", // a RESP request inside a key: must stay one key
	strings.Repeat("L", 1000),
	"",
}

func goredisMix(ctx context.Context, t *fixture.Truth) error {
	if err := resetStats(ctx); err != nil {
		return err
	}
	var getCalls atomic.Int64 // GET commands sent, checked against the server
	var wg sync.WaitGroup
	var firstErr atomic.Value
	fail := func(err error) {
		if err != nil {
			firstErr.CompareAndSwap(nil, err)
		}
	}
	var mu sync.Mutex
	add := func(ns, key string, n, w uint64) {
		mu.Lock()
		t.Add("redis", ns, key, n, w)
		mu.Unlock()
	}
	// Seed some data so reads hit; writes are never counted as reads.
	seed := client(&redis.Options{})
	for i := 0; i < 50; i++ {
		fail(seed.Set(ctx, "item:"+strconv.Itoa(i), "v", 0).Err())
	}
	fail(seed.HSet(ctx, "user:1", "name", "a", "age", "3", "city", "x").Err())
	seed.Close()

	// Three applications on DBs 0, 3 and 7: go-redis sends SELECT at connect.
	for _, db := range []int{0, 3, 7} {
		db := db
		ns := strconv.Itoa(db)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client(&redis.Options{DB: db, PoolSize: 2})
			defer c.Close()
			next := zipfKeys(uint64(10+db), 2000)
			for i := 0; i < 300; i++ {
				k := next()
				if err := c.Get(ctx, k).Err(); err != redis.Nil {
					fail(err)
				}
				getCalls.Add(1)
				add(ns, k, 1, 1)
			}
			// Pipelines of mixed reads.
			for i := 0; i < 40; i++ {
				_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
					for j := 0; j < 10; j++ {
						k := next()
						p.Get(ctx, k)
						getCalls.Add(1)
						add(ns, k, 1, 1)
					}
					keys := []string{next(), next(), next()}
					p.MGet(ctx, keys...)
					for _, k := range keys {
						add(ns, k, 1, 1)
					}
					p.HMGet(ctx, "user:1", "name", "age")
					add(ns, "user:1", 1, 2)
					p.HGet(ctx, "user:1", "city")
					add(ns, "user:1", 1, 1)
					p.Set(ctx, next(), "w", time.Minute) // write
					p.Incr(ctx, "counter")               // write
					return nil
				})
				if err != nil && err != redis.Nil {
					fail(err)
				}
			}
		}()
	}
	wg.Wait()

	c := client(&redis.Options{})
	defer c.Close()
	// A huge MGET: larger than loopback's 64 KiB MTU, so it spans segments.
	big := make([]string, 6000)
	for i := range big {
		big[i] = fmt.Sprintf("bulk:%05d", i)
		add("0", big[i], 1, 1)
	}
	fail(c.MGet(ctx, big...).Err())
	// A large value write (skipped by the decoder) between reads.
	fail(c.Set(ctx, "blob", strings.Repeat("x", 100_000), 0).Err())
	fail(c.Get(ctx, "blob").Err())
	getCalls.Add(1)
	add("0", "blob", 1, 1)
	// Binary and odd keys, read and written.
	for _, k := range oddKeys {
		fail(c.Set(ctx, k, "odd", 0).Err())
		fail(c.Get(ctx, k).Err())
		getCalls.Add(1)
		add("0", k, 1, 1)
	}
	if err := c.MGet(ctx, oddKeys...).Err(); err != nil {
		fail(err)
	}
	for _, k := range oddKeys {
		add("0", k, 1, 1)
	}
	// HMGET with many fields weighs its hash key by the field count.
	fields := make([]string, 25)
	for i := range fields {
		fields[i] = "f" + strconv.Itoa(i)
	}
	fail(c.HMGet(ctx, "wide", fields...).Err())
	add("0", "wide", 1, 25)
	// EVAL names its keys through numkeys; the script reads both.
	fail(c.Eval(ctx, "return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}", []string{"item:1", "item:2"}, "arg").Err())
	getCalls.Add(2) // the script's own GETs count in commandstats too
	add("0", "item:1", 1, 1)
	add("0", "item:2", 1, 1)
	// MULTI/EXEC: queued reads are executed, so they count.
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, "item:3")
		p.Set(ctx, "item:3", "v2", 0)
		p.Get(ctx, "item:3")
		return nil
	})
	fail(err)
	getCalls.Add(2)
	add("0", "item:3", 2, 1)
	// DEL and EXPIRE are writes.
	fail(c.Del(ctx, "blob").Err())
	fail(c.Expire(ctx, "item:4", time.Hour).Err())
	// IPv6 loopback client.
	c6 := client(&redis.Options{Addr: fmt.Sprintf("[::1]:%d", port)})
	for i := 0; i < 20; i++ {
		if err := c6.Get(ctx, "v6:key").Err(); err != redis.Nil {
			fail(err)
		}
		getCalls.Add(1)
	}
	add("0", "v6:key", 20, 1)
	c6.Close()
	if v := firstErr.Load(); v != nil {
		return v.(error)
	}
	// The server's own count must agree with the bookkeeping.
	n, err := commandCalls(ctx, "get")
	if err != nil {
		return err
	}
	if n != getCalls.Load() {
		return fmt.Errorf("server executed %d GETs, generator counted %d", n, getCalls.Load())
	}
	return nil
}

func resp3(ctx context.Context, t *fixture.Truth) error {
	c := client(&redis.Options{Protocol: 3, DB: 2})
	defer c.Close()
	for i := 0; i < 100; i++ {
		k := "r3:" + strconv.Itoa(i%7)
		if err := c.Get(ctx, k).Err(); err != nil && err != redis.Nil {
			return err
		}
		t.Add("redis", "2", k, 1, 1)
	}
	if err := c.HSet(ctx, "r3:h", "a", 1, "b", 2).Err(); err != nil {
		return err
	}
	if err := c.HMGet(ctx, "r3:h", "a", "b", "c").Err(); err != nil {
		return err
	}
	t.Add("redis", "2", "r3:h", 1, 3)
	if err := c.HGetAll(ctx, "r3:h").Err(); err != nil {
		return err
	}
	t.Add("redis", "2", "r3:h", 1, 1)
	return nil
}

// midstream captures busy connections from the middle. Phase A ("pre:"
// keys: pipelines holding an MGET larger than loopback's MTU, so it spans
// segments) runs on two connections at once; after a pause phase B ("mid:"
// keys) runs on the same connections. The capture is then trimmed so it
// starts with the second segment of a phase-A MGET: the sniffer joins in the
// middle of a request, without the handshake, while the other connection is
// between requests. The truth holds phase B only; phase-A keys may appear
// partially, and the test checks them only for phantoms.
func midstream(ctx context.Context, pcap string, t *fixture.Truth) error {
	const conns = 2
	clients := make([]*redis.Client, conns)
	for i := range clients {
		clients[i] = client(&redis.Options{PoolSize: 1, MinIdleConns: 1})
		defer clients[i].Close()
		if err := clients[i].Ping(ctx).Err(); err != nil {
			return err
		}
	}
	cap, err := fixture.StartCapture(pcap, fmt.Sprintf("tcp port %d", port))
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func(i int, c *redis.Client) {
			defer wg.Done()
			for n := 0; n < 3; n++ {
				_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
					keys := make([]string, 5500)
					for j := range keys {
						keys[j] = fmt.Sprintf("pre:%d:%d", i, j)
					}
					p.MGet(ctx, keys...)
					for j := 0; j < 50; j++ {
						p.Get(ctx, fmt.Sprintf("pre:%d:%d", i, j))
					}
					return nil
				})
			}
		}(i, c)
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	next := zipfKeys(7, 500)
	for _, c := range clients {
		for i := 0; i < 100; i++ {
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for j := 0; j < 4; j++ {
					k := "mid:" + strings.TrimPrefix(next(), "item:")
					p.Get(ctx, k)
					t.Add("redis", "0", k, 1, 1)
				}
				return nil
			})
			if err != nil && err != redis.Nil {
				return err
			}
		}
	}
	if err := cap.Stop(); err != nil {
		return err
	}
	// Start at the first client segment that continues a request.
	seen := 0
	dropped, err := fixture.TrimBefore(pcap, func(data []byte) bool {
		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.NoCopy)
		tcp, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if tcp == nil || tcp.DstPort != port || len(tcp.Payload) == 0 {
			return false
		}
		seen++
		return seen > 2 && tcp.Payload[0] != '*'
	})
	slog.Info("midstream trimmed", "dropped_packets", dropped)
	return err
}

// hotkey is paced traffic with one planted hot key, for `hotsniff replay`:
// two connections each send a pipeline of 20 reads every 10 ms (about
// 4000 reads/s in all) for 3 s. Background reads are Zipf over 10 000 keys
// (the busiest near 450 reads/s); "item:hot" takes 6 of every 20 reads
// (about 1200/s, plus its share of MGETs) during the first 2 s only, and is
// written once at 1 s (an invalidate). So with --hot-qps 1000 exactly one
// key is hot, from the start until about 2 s.
func hotkey(ctx context.Context, t *fixture.Truth) error {
	var mu sync.Mutex
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	start := time.Now()
	for c := 0; c < 2; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			cl := client(&redis.Options{PoolSize: 1})
			defer cl.Close()
			next := zipfKeys(uint64(100+c), 10000)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			wrote := false
			for range tick.C {
				el := time.Since(start)
				if el > 3*time.Second {
					return
				}
				hot := el < 2*time.Second
				_, err := cl.Pipelined(ctx, func(p redis.Pipeliner) error {
					mu.Lock()
					defer mu.Unlock()
					for j := 0; j < 16; j++ {
						k := next()
						if hot && j%3 == 0 {
							k = "item:hot"
						}
						p.Get(ctx, k)
						t.Add("redis", "0", k, 1, 1)
					}
					keys := []string{next(), next(), next(), next()}
					if hot {
						keys[0] = "item:hot"
					}
					p.MGet(ctx, keys...)
					for _, k := range keys {
						t.Add("redis", "0", k, 1, 1)
					}
					if c == 0 && !wrote && el > time.Second {
						p.Set(ctx, "item:hot", "new value", 0)
						wrote = true
					}
					return nil
				})
				if err != nil && err != redis.Nil {
					errc <- err
					return
				}
			}
		}(c)
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// writehot is the channel-at-scale case for `hotsniff replay`: one key read
// 12 000/s and written 4 000/s, beside a hot key that is written rarely.
// For 2.5 s, every 2 ms, a reader connection sends one pipeline of what is
// owed by then at 12 000 GETs/s of "bench:hot", 2 000/s of "bench:warm" and
// 2 000/s Zipf background reads; a writer connection sends one pipeline of
// what is owed at 4 000 SETs/s of "bench:hot" (a new value each) and 4/s of
// "bench:warm". Pacing by elapsed time, not by ticks, keeps the rates exact
// when the ticker lags.
func writehot(ctx context.Context, t *fixture.Truth) error {
	const dur = 2500 * time.Millisecond
	var mu sync.Mutex
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	start := time.Now()
	for c := 0; c < 2; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			cl := client(&redis.Options{PoolSize: 1})
			defer cl.Close()
			next := zipfKeys(uint64(200+c), 10000)
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			var sent [3]int // by stream
			owed := func(i int, rate float64, el time.Duration) int {
				n := int(rate*el.Seconds()) - sent[i]
				sent[i] += n
				return n
			}
			for range tick.C {
				el := min(time.Since(start), dur)
				_, err := cl.Pipelined(ctx, func(p redis.Pipeliner) error {
					mu.Lock()
					defer mu.Unlock()
					if c == 1 {
						for j := owed(0, 4000, el); j > 0; j-- {
							p.Set(ctx, "bench:hot", fmt.Sprintf("v%d", sent[0]-j), 0)
						}
						for j := owed(1, 4, el); j > 0; j-- {
							p.Set(ctx, "bench:warm", fmt.Sprintf("w%d", sent[1]-j), 0)
						}
						return nil
					}
					hot, warm, bg := owed(0, 12000, el), owed(1, 2000, el), owed(2, 2000, el)
					for j := 0; j < hot+warm+bg; j++ {
						k := "bench:hot"
						switch {
						case j >= hot+warm:
							k = next()
						case j >= hot:
							k = "bench:warm"
						}
						p.Get(ctx, k)
						t.Add("redis", "0", k, 1, 1)
					}
					return nil
				})
				if err != nil && err != redis.Nil && !strings.Contains(err.Error(), "no commands") {
					errc <- err
					return
				}
				if el >= dur {
					return
				}
			}
		}(c)
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}
