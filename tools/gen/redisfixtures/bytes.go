package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/tools/gen/fixture"
)

// btruth receives the reply-bytes truth of the fixture being made, written
// as NAME.bytes.golden when it holds any key.
var btruth *fixture.BytesTruth

const wrongType = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"

// bytesMix: one RESP2 and one RESP3 go-redis connection read values of
// known sizes for 3 s, paced: "big:0" (50 000 bytes, 40 reads/s: hot by
// bytes only at --hot-qps 500 --hot-bytes 1000000), "hot:both" (2 000 bytes,
// 600 reads/s: hot by both), pipelines of GETs of "v:0".."v:19" (100..2000
// bytes), an MGET of two values and a missing key, GETs of missing keys
// (nil: 5 bytes in RESP2, 3 in RESP3) and a GET of a hash (a WRONGTYPE
// error). The truth is each read's reply size from RESP's encoding.
func bytesMix(ctx context.Context, t *fixture.Truth) error {
	setup := client(&redis.Options{})
	defer setup.Close()
	sizes := map[string]int{"big:0": 50000, "hot:both": 2000}
	for i := range 20 {
		sizes["v:"+strconv.Itoa(i)] = 100 * (i + 1)
	}
	for k, n := range sizes {
		if err := setup.Set(ctx, k, strings.Repeat("x", n), 0).Err(); err != nil {
			return err
		}
	}
	if err := setup.HSet(ctx, "h:1", "f", "v").Err(); err != nil {
		return err
	}
	setup.Close()

	var mu sync.Mutex
	nilLen := map[int]uint64{2: 5, 3: 3}
	get := func(proto int, k string) {
		t.Add("redis", "0", k, 1, 1)
		switch n, ok := sizes[k]; {
		case k == "h:1":
			btruth.Add("redis", "0", k, uint64(len(wrongType)))
		case ok:
			btruth.Add("redis", "0", k, fixture.RESPBulk(n))
		default:
			btruth.Add("redis", "0", k, nilLen[proto])
		}
	}
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	start := time.Now()
	for c, proto := range []int{2, 3} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := client(&redis.Options{PoolSize: 1, Protocol: proto})
			defer cl.Close()
			r := rand.New(rand.NewPCG(uint64(c), 7))
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for n := 0; ; n++ {
				<-tick.C
				if time.Since(start) > 3*time.Second {
					return
				}
				_, err := cl.Pipelined(ctx, func(p redis.Pipeliner) error {
					mu.Lock()
					defer mu.Unlock()
					var ks []string
					if n%5 == 0 {
						ks = append(ks, "big:0")
					}
					ks = append(ks, "hot:both", "hot:both", "hot:both")
					for range 8 {
						ks = append(ks, "v:"+strconv.Itoa(r.IntN(20)))
					}
					ks = append(ks, "miss:"+strconv.Itoa(r.IntN(5)))
					if n%10 == 0 {
						ks = append(ks, "h:1")
					}
					for _, k := range ks {
						p.Get(ctx, k)
						get(proto, k)
					}
					mk := []string{"v:" + strconv.Itoa(r.IntN(20)), "miss:m", "v:" + strconv.Itoa(r.IntN(20))}
					p.MGet(ctx, mk...)
					elems := make([]uint64, len(mk))
					for i, k := range mk {
						t.Add("redis", "0", k, 1, 1)
						if n, ok := sizes[k]; ok {
							elems[i] = fixture.RESPBulk(n)
						} else {
							elems[i] = nilLen[proto]
						}
					}
					btruth.Split("redis", "0", mk, fixture.RESPArrayHeader(len(mk)), elems)
					return nil
				})
				if err != nil && err != redis.Nil && !strings.HasPrefix(err.Error(), "WRONGTYPE") {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// benchBytes runs redis-benchmark's SET and GET tests with -d 1000: every
// GET names "key:__rand_int__" and gets its 1000-byte value back, a
// 1009-byte reply ("$1000\r\n", the value, CRLF). The server's commandstats
// say how many GETs were sent.
func benchBytes(ctx context.Context, t *fixture.Truth) error {
	if err := resetStats(ctx); err != nil {
		return err
	}
	a := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-t", "set,get", "-q", "-d", "1000", "-P", "16", "-n", "3000", "-c", "2"}
	if out, err := exec.Command("redis-benchmark", a...).CombinedOutput(); err != nil {
		return fmt.Errorf("redis-benchmark: %w: %s", err, out)
	}
	n, err := commandCalls(ctx, "get")
	if err != nil {
		return err
	}
	t.Add("redis", "0", "key:__rand_int__", uint64(n), 1)
	for range n {
		btruth.Add("redis", "0", "key:__rand_int__", fixture.RESPBulk(1000))
	}
	return nil
}
