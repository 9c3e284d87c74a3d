package ebpfsrc

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	rediscmd "github.com/hotsniff/hotsniff/decode/redis"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// cmdstatGet reads the server's count of GET calls.
func cmdstatGet(t *testing.T, p *netnstest.Pair, srv string) int {
	t.Helper()
	var info string
	err := p.Do(func() error {
		c := redis.NewClient(&redis.Options{Addr: srv})
		defer c.Close()
		var err error
		info, err = c.Info(context.Background(), "commandstats").Result()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_get:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// TestLiveKernelCount: redis-benchmark GETs over a real connection, with
// the programs counting in the kernel: every GET the server executed is in
// the bucket counts, and (nothing located) the requests stay in the
// kernel. The same traffic with counting off, in the same run, copies a
// record per request segment: records per GET side by side.
func TestLiveKernelCount(t *testing.T) {
	p, srv := newEnv(t)
	const n, keyspace = 20000, 1000
	for _, mode := range modes {
		for _, pipe := range []int{1, 16} {
			t.Run(fmt.Sprintf("%s/P%d", mode, pipe), func(t *testing.T) {
				// Before: every request copied.
				e := attach(t, p, srv, mode, 0)
				before := cmdstatGet(t, p, srv.String())
				netnstest.RedisBenchmark(t, srv, n, pipe, keyspace)
				off := e.check(t, false)
				e.src.Close()

				// After: counted in the kernel.
				sub := time.Second
				c, err := bpf.Open(bpf.Config{Ports: []uint16{srv.Port()}, RingSize: 64 << 20,
					KernelCount: &bpf.KernelCountConfig{Commands: testRedisTable(), SubWindow: sub, Buckets: 4096, Protos: map[uint16]uint8{srv.Port(): 1}}})
				if err != nil {
					t.Fatalf("open bpf capture as root: %v", err)
				}
				var att *bpf.Attachment
				if err := p.Do(func() error { att, err = c.Attach(p.NSIface, mode); return err }); err != nil {
					c.Close()
					t.Fatal(err)
				}
				src, err := New(c)
				if err != nil {
					c.Close()
					t.Fatal(err)
				}
				ke := &env{pair: p, srv: srv, src: src, att: att}
				ke.col = netnstest.Collect(t, src)
				ep0 := c.KernelEpoch()
				mid := cmdstatGet(t, p, srv.String())
				netnstest.RedisBenchmark(t, srv, n, pipe, keyspace)
				after := cmdstatGet(t, p, srv.String())
				on := ke.check(t, false)
				last := c.KernelEpoch()
				time.Sleep(sub + 50*time.Millisecond)
				counts := make([]uint32, bpf.KernelBuckets)
				for ep := ep0; ep <= last; ep++ {
					if ok, err := c.ReadKernelCounts(ep, counts); err != nil || !ok {
						t.Fatalf("sub-window %d: complete %v, %v", ep, ok, err)
					}
				}
				var total uint64
				for _, v := range counts {
					total += uint64(v)
				}
				ks, err := c.KernelStats()
				if err != nil {
					t.Fatal(err)
				}
				ke.src.Close()
				if want := after - mid; total != uint64(want) || want != n || mid-before != n {
					t.Errorf("kernel counted %d reads; the server executed %d GETs (%d before)", total, want, mid-before)
				}
				t.Logf("records per GET: %.4f with kernel counting off, %.4f on (%d and %d records for %d GETs); kernel stats %+v",
					float64(off.Records)/n, float64(on.Records)/n, off.Records, on.Records, n, ks)
				var fb uint64
				for _, v := range ks.Fallback {
					fb += v
				}
				// The connections' first segments after the handshake are
				// counted; CONFIG GET at start parses too. Only the
				// handshakes and closes make records.
				if fb != 0 || on.Records > off.Records/10 {
					t.Errorf("fallbacks %v, %d records (off: %d)", ks.Fallback, on.Records, off.Records)
				}
			})
		}
	}
}

// testRedisTable is the decoder's command table in the loader's terms.
func testRedisTable() []bpf.RedisCommand {
	rs := rediscmd.KeyRanges()
	out := make([]bpf.RedisCommand, len(rs))
	for i, c := range rs {
		out[i] = bpf.RedisCommand(c)
	}
	return out
}

// TestKernelReaderSeenEpoch: under traffic, Step learns that a sub-window
// ended from the programs' own slots (KernelEpochSeen) and reads the
// coarse clock (a system call) rarely (at the first Step, and where no read
// was counted since the clock's tick that ended the sub-window); with no traffic it
// reads the clock again. Each Step at Due reads a sub-window either way,
// and the programs' latest epoch is never ahead of the clock.
func TestKernelReaderSeenEpoch(t *testing.T) {
	p, srv := newEnv(t)
	c, err := bpf.Open(bpf.Config{Ports: []uint16{srv.Port()}, RingSize: 1 << 20,
		KernelCount: &bpf.KernelCountConfig{Commands: testRedisTable(), SubWindow: 20 * time.Millisecond, Buckets: 4096, Protos: map[uint16]uint8{srv.Port(): 1}}})
	if err != nil {
		t.Fatalf("open bpf capture as root: %v", err)
	}
	defer c.Close() // detaches too
	if err := p.Do(func() error { _, err := c.Attach(p.NSIface, bpf.ModeTC); return err }); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", srv.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		// GETs back to back: reads throughout every sub-window.
		defer close(done)
		rd := bufio.NewReader(conn)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := conn.Write(netnstest.RESP("GET", "k"+strconv.Itoa(i%100))); err != nil {
				t.Errorf("GET: %v", err)
				return
			}
			if _, err := rd.ReadString('\n'); err != nil {
				t.Errorf("GET reply: %v", err)
				return
			}
		}
	}()
	st := &nopStage1{}
	r := NewKernelReader(c, st, 4096)
	steps := func(n int) (clock uint64) {
		t.Helper()
		before := r.Stats().ClockReads
		for i := range n {
			time.Sleep(time.Until(r.Due()))
			subs := st.subs
			if err := r.Step(); err != nil {
				t.Fatal(err)
			}
			if st.subs == subs {
				t.Fatalf("step %d at Due: no sub-window read", i)
			}
			seen, err := c.KernelEpochSeen()
			if err != nil {
				t.Fatal(err)
			}
			if now := c.KernelEpoch(); seen > now {
				t.Fatalf("programs' latest sub-window %d, ahead of the clock's %d", seen, now)
			}
		}
		return r.Stats().ClockReads - before
	}
	busy := steps(20)
	close(stop)
	<-done
	time.Sleep(50 * time.Millisecond)
	quiet := steps(5)
	t.Logf("clock system calls: %d in 20 steps under traffic, %d in 5 quiet", busy, quiet)
	if busy > 2 || quiet < 4 {
		t.Errorf("clock system calls: %d in 20 steps under traffic (want at most 2), %d in 5 quiet (want at least 4)", busy, quiet)
	}
}
