package main

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// TestMaxCPUSampling runs `hotsniff run --capture tc --max-cpu 0.05` under
// load that costs it several times that unsampled (64 connections sending
// pipelines of 16 GETs: random keys of 100 000 and 5 % one hot key), and
// checks the closed loop end to end: the budget makes the programs sample
// (sample rate below 1, connections sampled out), sampled-out data is not
// a loss (no ring drops, no stream gaps, no decode errors), the hot key is
// reported at its true rate (the requests the load really sent for it,
// within 35 %) with the sample rate on it, no other key is reported, and
// nothing stays attached. How close the cost stays to the budget is a
// measurement (internal/testing/perf TestMaxCPUBudget), not asserted here.
func TestMaxCPUSampling(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	cache := p.StartRedis(t, 6379)
	d := startDaemon(t, p, "--capture", "tc", "--port", "redis=6379", "--hot-qps", "500", "--max-cpu", "0.05")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sent, hotSent atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		netnstest.LoadMix(ctx, t, cache, 64, 16, 100000, "hot:planted", 0.05, &sent, &hotSent)
	}()
	// The controller cuts the first second's cost at once and settles
	// within seconds; then read the hot key's rate each second.
	time.Sleep(6 * time.Second)
	h0, t0 := hotSent.Load(), time.Now()
	var rates []float64
	var sample float64
	for range 6 {
		time.Sleep(time.Second)
		if e, ok := d.hotkey(t, "hot:planted"); ok {
			rates = append(rates, e.QPS)
			sample = e.Sample
		}
	}
	trueQPS := float64(hotSent.Load()-h0) / time.Since(t0).Seconds()
	_, m := d.scrape(t)
	hot := d.hotkeys(t)
	cancel()
	wg.Wait()

	t.Logf("%d requests; sample rate %.4f, cpu share %.4f, sampled out %v, kernel steps %v; hot key %v at %.4f",
		sent.Load(), m["hotsniff_capture_sample_rate"], m["hotsniff_cpu_share"], m["hotsniff_capture_sampled_out_total"],
		m["hotsniff_capture_sample_kernel_steps_total"], rates, sample)
	if r := m["hotsniff_capture_sample_rate"]; !(r > 0 && r < 0.9) {
		t.Errorf("sample rate %v under a budget several times exceeded: want sampling", r)
	}
	if m["hotsniff_capture_sampled_out_total"] == 0 || m["hotsniff_cpu_budget"] != 0.05 || m["hotsniff_cpu_share"] <= 0 {
		t.Errorf("sampled out %v, budget %v, share %v", m["hotsniff_capture_sampled_out_total"], m["hotsniff_cpu_budget"], m["hotsniff_cpu_share"])
	}
	for k, v := range m {
		if v != 0 && (prefixed(k, "hotsniff_capture_dropped_total") || prefixed(k, "hotsniff_stream_gaps_total") ||
			prefixed(k, "hotsniff_decode_errors_total") || k == "hotsniff_detect_late_reads_total") {
			t.Errorf("%s = %v, want 0: sampled-out data is not a loss", k, v)
		}
	}
	if len(rates) < 4 {
		t.Fatalf("hot key in /hotkeys %d of 6 times, want nearly all\n%s", len(rates), d.log())
	}
	var mean float64
	for _, r := range rates {
		mean += r / float64(len(rates))
	}
	if math.Abs(mean/trueQPS-1) > 0.35 {
		t.Errorf("hot key at %.0f/s (mean of %v), true %.0f/s: want within 35 %%", mean, rates, trueQPS)
	}
	if !(sample > 0 && sample < 1) {
		t.Errorf("hot key's sample %v, want the rate in effect", sample)
	}
	for _, e := range hot {
		if string(e.Key) != "hot:planted" {
			t.Errorf("phantom hot key %q at %.0f/s (random keys are read at a few per second)", e.Key, e.QPS)
		}
	}
	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, d.log())
	}
	assertNothingAttached(t, p)
}

func prefixed(series, name string) bool {
	return series == name || len(series) > len(name) && series[:len(name)+1] == name+"{"
}
