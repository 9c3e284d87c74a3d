// Package fanout measures what the hot-key channel costs its Redis: N
// publishers (hotsniff's own publisher, one per simulated daemon) send
// events at a set rate to M real subscriber connections on a real
// redis-server (or the shard of a 3-master cluster that owns the channel,
// with SPUBLISH/SSUBSCRIBE), and the harness reports deliveries per second,
// subscriber lag and the channel Redis's CPU. Its tests run a smoke version
// in `make test` and the full table when HOTSNIFF_FANOUT=1
// (docs/channel-sizing.md).
package fanout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/publish"
	"github.com/redis/go-redis/v9"
)

// Config is one measurement.
type Config struct {
	// Addrs: one standalone server, or the masters of a cluster.
	Addrs   []string
	Cluster bool
	Channel string
	// Publishers (N), each its own connection and node name; Subscribers
	// (M), each its own connection.
	Publishers, Subscribers int
	// Rate is the events per second all publishers send together.
	Rate float64
	// Format is publish.FormatV1 or FormatV2; BatchWindow the publisher's
	// (0: its default, 2ms).
	Format      string
	BatchWindow time.Duration
	// Warmup is run before Duration is measured.
	Warmup, Duration time.Duration
}

// Result is what one measurement saw.
type Result struct {
	Config
	Events     uint64  // events published in the measured span
	Messages   uint64  // channel messages (PUBLISH) in it
	Deliveries uint64  // of those events, deliveries that arrived (within 3 s after the span)
	PerSec     float64 // event deliveries received per second during the span
	MsgPerSec  float64 // messages delivered per second (messages × subscribers)
	// Lag is from Emit (the event's ts) to a subscriber reading it, for
	// events published in the span.
	LagP50 time.Duration
	LagP99 time.Duration
	LagMax time.Duration
	// OutMBps is the channel Redis's network output (INFO stats), MB/s.
	OutMBps float64
	// RedisCPU is the channel Redis's CPU (user+sys, in cores) over the
	// measured span, from INFO cpu; for a cluster, the busiest master.
	RedisCPU float64
	// HarnessCPU is this process's CPU (cores): publishers and subscribers
	// share the machine with Redis.
	HarnessCPU float64
	Lost       uint64 // deliveries of span events that did not arrive within 3 s after it (late or lost)
}

// RaiseFileLimit lifts RLIMIT_NOFILE to its hard limit: each subscriber is
// a connection. It returns the new soft limit.
func RaiseFileLimit() (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, fmt.Errorf("get file limit: %w", err)
	}
	r.Cur = r.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, fmt.Errorf("raise file limit: %w", err)
	}
	return r.Cur, nil
}

// lagHist is a histogram of lags in 10µs buckets up to 10 s.
type lagHist struct {
	b   [1_000_001]atomic.Uint64
	max atomic.Int64
}

func (h *lagHist) add(d time.Duration) {
	i := int(d / (10 * time.Microsecond))
	if i < 0 {
		i = 0
	}
	if i >= len(h.b) {
		i = len(h.b) - 1
	}
	h.b[i].Add(1)
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			break
		}
	}
}

func (h *lagHist) quantile(q float64) time.Duration {
	var total uint64
	for i := range h.b {
		total += h.b[i].Load()
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var n uint64
	for i := range h.b {
		n += h.b[i].Load()
		if n >= want {
			return time.Duration(i+1) * 10 * time.Microsecond
		}
	}
	return time.Duration(len(h.b)) * 10 * time.Microsecond
}

func (h *lagHist) reset() {
	for i := range h.b {
		h.b[i].Store(0)
	}
	h.max.Store(0)
}

func dial(c Config, poolSize int) redis.UniversalClient {
	if c.Cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, PoolSize: poolSize})
	}
	return redis.NewClient(&redis.Options{Addr: c.Addrs[0], PoolSize: poolSize})
}

// Run performs one measurement.
func Run(ctx context.Context, c Config) (*Result, error) {
	if c.Channel == "" {
		c.Channel = "hotsniff:fanout"
	}
	if c.Publishers < 1 || c.Subscribers < 1 || c.Rate <= 0 || c.Duration <= 0 {
		return nil, errors.New("run fanout: publishers, subscribers, rate and duration must be positive")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		hist      = new(lagHist)
		delivered atomic.Uint64 // of events published in the span
		received  atomic.Uint64 // any events, received during the span
		spanFrom  atomic.Int64  // the span, Unix ns
		spanTo    atomic.Int64
		wg        sync.WaitGroup
	)
	spanFrom.Store(math.MaxInt64)
	spanTo.Store(math.MaxInt64)
	// Subscribers: one client each would be one pool each; a shared
	// client still gives every PubSub its own connection.
	subc := dial(c, 4)
	defer subc.Close()
	ready := make(chan error, c.Subscribers)
	for range c.Subscribers {
		var ps *redis.PubSub
		if c.Cluster {
			ps = subc.SSubscribe(ctx, c.Channel)
		} else {
			ps = subc.Subscribe(ctx, c.Channel)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer ps.Close()
			if _, err := ps.Receive(ctx); err != nil {
				ready <- fmt.Errorf("subscribe: %w", err)
				return
			}
			ready <- nil
			for {
				m, err := ps.ReceiveMessage(ctx)
				if err != nil {
					return
				}
				now := time.Now()
				p := []byte(m.Payload)
				// Events in the message, and the first one's time: cheap
				// scanning, so the harness's own CPU stays small.
				n := uint64(bytes.Count(p, []byte(`"seq":`)))
				from, to, at := spanFrom.Load(), spanTo.Load(), now.UnixNano()
				if at >= from && at <= to {
					received.Add(n)
				}
				// Each event by its own ts (a v2 message carries several).
				for rest := p; ; {
					i := bytes.Index(rest, []byte(`"ts":"`))
					if i < 0 || len(rest) < i+6+27 {
						break
					}
					if ts, err := time.Parse(event.TSFormat, string(rest[i+6:i+6+27])); err == nil {
						if t := ts.UnixNano(); t >= from && t <= to {
							delivered.Add(1)
							hist.add(now.Sub(ts))
						}
					}
					rest = rest[i+6+27:]
				}
			}
		}()
	}
	for range c.Subscribers {
		if err := <-ready; err != nil {
			return nil, err
		}
	}
	// Publishers.
	pubs := make([]*publish.Publisher, c.Publishers)
	for i := range pubs {
		rdb := dial(c, 2)
		defer rdb.Close()
		sharded := c.Cluster
		p, err := publish.New(rdb, publish.Options{
			Channel: c.Channel, Node: fmt.Sprint("bench-", i), Sharded: &sharded,
			Format: c.Format, BatchWindow: c.BatchWindow, QueueSize: 1 << 20,
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			return nil, err
		}
		pubs[i] = p
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		for _, p := range pubs {
			_ = p.Close(cctx)
		}
	}()
	var emitted atomic.Uint64
	stop := make(chan struct{})
	var pwg sync.WaitGroup
	for i, p := range pubs {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			rate := c.Rate / float64(c.Publishers)
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			start, sent := time.Now(), 0
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				for n := int(rate*time.Since(start).Seconds()) - sent; n > 0; n-- {
					sent++
					// The ts as subscribers will read it (µs).
					ts := time.Now().Truncate(time.Microsecond)
					p.Emit(&event.Event{Type: event.TypeInvalidate, Proto: "redis", Server: "10.0.0.5:6379", NS: "0",
						Key: []byte("item:" + strconv.Itoa(i*1_000_000+sent%1000)), TTLms: 60000, TS: ts, Source: event.SourceDetected})
					if ts.UnixNano() >= spanFrom.Load() {
						emitted.Add(1) // an event of the span
					}
				}
			}
		}()
	}
	sleep := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := sleep(c.Warmup); err != nil {
		return nil, err
	}
	cpu0, out0, err := redisCPU(ctx, c)
	if err != nil {
		return nil, err
	}
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	msg0 := messages(pubs)
	hist.reset()
	t0 := time.Now()
	spanFrom.Store(t0.UnixNano())
	if err := sleep(c.Duration); err != nil {
		return nil, err
	}
	close(stop)
	pwg.Wait()
	t1 := time.Now()
	spanTo.Store(t1.UnixNano())
	el := t1.Sub(t0)
	events := emitted.Load()
	cpu1, out1, err := redisCPU(ctx, c)
	if err != nil {
		return nil, err
	}
	// Let what was published in the span arrive before counting.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		if delivered.Load() >= events*uint64(c.Subscribers) {
			break
		}
		_ = sleep(50 * time.Millisecond)
	}
	msg1 := messages(pubs)
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	got := delivered.Load()
	cancel()
	subc.Close()
	wg.Wait()

	r := &Result{Config: c, Events: events, Messages: msg1 - msg0, Deliveries: got}
	r.PerSec = float64(received.Load()) / el.Seconds()
	r.MsgPerSec = float64(r.Messages) * float64(c.Subscribers) / el.Seconds()
	r.LagP50, r.LagP99, r.LagMax = hist.quantile(0.50), hist.quantile(0.99), time.Duration(hist.max.Load())
	for i := range cpu1 {
		if c := (cpu1[i] - cpu0[i]) / el.Seconds(); c > r.RedisCPU {
			r.RedisCPU = c
			r.OutMBps = (out1[i] - out0[i]) / el.Seconds() / 1e6
		}
	}
	r.HarnessCPU = (tv(ru1.Utime) + tv(ru1.Stime) - tv(ru0.Utime) - tv(ru0.Stime)) / el.Seconds()
	if want := r.Events * uint64(c.Subscribers); want > got {
		r.Lost = want - got
	}
	return r, nil
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

func messages(pubs []*publish.Publisher) uint64 {
	var n uint64
	for _, p := range pubs {
		n += p.Stats().Messages
	}
	return n
}

// redisCPU returns used_cpu_user+used_cpu_sys (seconds) and
// total_net_output_bytes of every server.
func redisCPU(ctx context.Context, c Config) (cpu, out []float64, err error) {
	cpu, out = make([]float64, len(c.Addrs)), make([]float64, len(c.Addrs))
	for i, a := range c.Addrs {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		info, err := rdb.Info(ctx, "cpu", "stats").Result()
		rdb.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("read INFO cpu of %s: %w", a, err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "used_cpu_user", "used_cpu_sys":
				cpu[i] += f
			case "total_net_output_bytes":
				out[i] = f
			}
		}
	}
	return cpu, out, nil
}

// Row formats r as a markdown table row.
func (r *Result) Row() string {
	mode := "standalone PUBLISH"
	if r.Cluster {
		mode = "3-master cluster SPUBLISH"
	}
	format := r.Format
	if r.BatchWindow > 0 {
		format += fmt.Sprintf(" (%v window)", r.BatchWindow)
	}
	return fmt.Sprintf("| %s | %s | %d | %d | %.0f | %.0f | %.0f | %.0f | %v | %v | %.2f | %.2f | %.1f | %.2f | %.2f%% |",
		mode, format, r.Publishers, r.Subscribers, r.Rate, float64(r.Messages)/r.Duration.Seconds(), r.MsgPerSec, r.PerSec,
		r.LagP50.Round(10*time.Microsecond), r.LagP99.Round(10*time.Microsecond), r.RedisCPU, 1e6*r.RedisCPU/math.Max(r.MsgPerSec, 1), r.OutMBps, r.HarnessCPU,
		100*float64(r.Lost)/math.Max(1, float64(r.Events*uint64(r.Subscribers))))
}

// Header is the markdown table header matching Row.
const Header = `| channel Redis | format | publishers | subscribers | events/s | messages/s | message deliveries/s | event deliveries/s | lag p50 | lag p99 | Redis CPU (cores) | Redis µs per message delivery | Redis out MB/s | harness CPU (cores) | late or lost |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|`
