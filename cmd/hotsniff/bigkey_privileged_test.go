package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// TestBigKeySkipped: a request naming a 10 MB key on a connection is
// counted (its key skipped as too long) and the requests after it on the
// same connection are all decoded. AF_PACKET only: in the eBPF modes the
// 10 MB are copied into the ring buffer, and a reader that falls behind on
// a loaded machine lets the programs sample the connection out (counted in
// hotsniff_capture_sampled_out_total), which is the capture's bound, not the
// decoder's.
func TestBigKeySkipped(t *testing.T) {
	netnstest.RequireRoot(t)
	netnstest.Need(t, "nsenter")
	port := testPorts(4)[3]
	p := netnstest.NewPair(t)
	srv := p.StartRedis(t, port)
	big := strings.Repeat("k", 10<<20)
	for _, mode := range []string{"afpacket"} {
		t.Run(mode, func(t *testing.T) {
			d := startNodeDaemon(t, p.NS, p.NSIP, "--iface", p.NSIface, "--capture", mode,
				"--port", fmt.Sprintf("redis=%d", port), "--hot-qps", "1000000")
			rc := redis.NewClient(&redis.Options{Addr: srv.String(), PoolSize: 1, Protocol: 2, DisableIdentity: true})
			defer rc.Close()
			ctx := context.Background()
			const rounds = 5
			for r := range rounds {
				if err := rc.Get(ctx, big).Err(); err != redis.Nil {
					t.Fatalf("GET big: %v", err)
				}
				for i := range 9 {
					if err := rc.Get(ctx, fmt.Sprintf("k:%d:%d", r, i)).Err(); err != redis.Nil {
						t.Fatal(err)
					}
				}
			}
			_, m := d.waitMetric(t, `hotsniff_requests_total{op="GET",proto="redis"}`, rounds*10)
			time.Sleep(1500 * time.Millisecond)
			_, m = d.scrape(t)
			var notes []string
			for k, v := range m {
				if v != 0 && (strings.Contains(k, "dropped") || strings.Contains(k, "stream") || strings.Contains(k, "requests") || strings.Contains(k, "decode_errors") || strings.Contains(k, "truncated") || strings.Contains(k, "packets") || strings.Contains(k, "sampl")) {
					notes = append(notes, fmt.Sprintf("%s=%v", k, v))
				}
			}
			t.Log(notes)
			if got := m[`hotsniff_requests_total{op="GET",proto="redis"}`]; got != rounds*10 {
				t.Errorf("GETs counted %v, want %d (%d of them naming a 10 MB key)", got, rounds*10, rounds)
			}
			if got := m[`hotsniff_keys_total{proto="redis"}`]; got != rounds*9 {
				t.Errorf("keys counted %v, want %d: the 10 MB keys skipped", got, rounds*9)
			}
			if got := m[`hotsniff_decode_errors_total{proto="redis",reason="key_too_long"}`]; got != rounds {
				t.Errorf("key_too_long %v, want %d", got, rounds)
			}
			if err := d.stop(t, syscall.SIGTERM); err != nil {
				t.Errorf("exit: %v\n%s", err, d.log())
			}
		})
	}
}
