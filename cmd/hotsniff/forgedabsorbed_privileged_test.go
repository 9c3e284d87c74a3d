package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// TestForgedAbsorbedReports replays the attack on a live daemon (TC
// capture in front of a real redis-server, --hot-qps 500): a key is made
// hot by real reads (2,000 GET/s for 4 s), the real reads stop, and a plain
// client sends 20 GET + ECHO "hotsniff:absorbed:1 …" pairs a second, each
// claiming a billion local hits. Before, the key stayed hot for the whole
// attack at about 1000 × the threshold (499,177 qps). Now one client's
// claims are worth at most --absorbed-client-cap (16) × the threshold, the
// events say "capped", and after --absorbed-hold (5 s here) of holding the
// key hot alone its reports stop counting: the key is gone from /hotkeys.
func TestForgedAbsorbedReports(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	cache := p.StartRedis(t, 6379)
	d := startDaemon(t, p, "--capture", "tc", "--port", "redis=6379", "--hot-qps", "500", "--absorbed-hold", "5s")
	const key = "victim"

	pace := func(ctx context.Context, every time.Duration, send []byte, replies int) error {
		c, err := net.Dial("tcp", cache.String())
		if err != nil {
			return err
		}
		defer c.Close()
		rd := bufio.NewReader(c)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write(send); err != nil {
				return err
			}
			for range replies {
				line, err := rd.ReadString('\n')
				if err != nil {
					return err
				}
				if line[0] == '$' && line[1] != '-' {
					var n int
					fmt.Sscanf(line[1:], "%d", &n)
					if _, err := rd.Discard(n + 2); err != nil {
						return err
					}
				}
			}
		}
	}
	// Real reads: 2,000/s (20 GETs every 10 ms) for 4 s.
	real := make([]byte, 0, 20*32)
	for range 20 {
		real = append(real, netnstest.RESP("GET", key)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	if err := pace(ctx, 10*time.Millisecond, real, 20); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, ok := d.hotkey(t, key); !ok {
		t.Fatalf("%s not hot after real reads\n%s", key, d.log())
	}
	// The forger.
	forged := append(netnstest.RESP("GET", key), netnstest.RESP("ECHO", "hotsniff:absorbed:1 1000000000 50 "+key)...)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := pace(ctx, 50*time.Millisecond, forged, 2); err != nil {
			t.Errorf("forger: %v", err)
		}
	}()
	start := time.Now()
	var maxQPS float64
	var goneAt time.Duration
	uncapped := 0
	for time.Since(start) < 20*time.Second {
		time.Sleep(250 * time.Millisecond)
		e, ok := d.hotkey(t, key)
		if !ok {
			goneAt = time.Since(start)
			break
		}
		if time.Since(start) > 2*time.Second { // past the real reads' window
			maxQPS = max(maxQPS, e.QPS)
			if !e.Capped {
				uncapped++
			}
		}
	}
	// Gone for good while the forger goes on.
	time.Sleep(3 * time.Second)
	_, back := d.hotkey(t, key)
	cancel()
	wg.Wait()
	_, m := d.scrape(t)
	t.Logf("forged reports: max qps %.0f, gone from /hotkeys %v after the attack began (back: %v); reports %v, held %v, capped %v",
		maxQPS, goneAt, back, m["hotsniff_absorbed_reports_total"], m[`hotsniff_absorbed_rejected_total{reason="held"}`], m[`hotsniff_absorbed_rejected_total{reason="capped"}`])
	if maxQPS > 16*500*1.15 {
		t.Errorf("one client's reports inflated the key to %.0f qps (cap 16 × 500)", maxQPS)
	}
	if uncapped > 1 {
		t.Errorf("%d samples of the forged demand without capped:true", uncapped)
	}
	if goneAt == 0 || goneAt > 12*time.Second || back {
		t.Errorf("key held hot by one client's reports: gone after %v (want within hold 5 s + windows), back %v", goneAt, back)
	}
}
