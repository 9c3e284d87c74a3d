package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/client"
)

// fleetApp is an application process of the fleet tests (TestMain runs it
// when HOTSNIFF_FLEET_APP=1): FLEET_READERS goroutines each read FLEET_KEY
// from the cache at FLEET_CACHE at FLEET_RATE reads/s for FLEET_SECONDS,
// through the client shim when FLEET_SHIM=1 (following the channel at
// FLEET_CHANNEL). It counts its own reads and prints, once a second and at
// the end, one JSON fleetStat line on stdout.
func fleetApp() int {
	env := func(k string) string { return os.Getenv(k) }
	readers, _ := strconv.Atoi(env("FLEET_READERS"))
	rate, _ := strconv.ParseFloat(env("FLEET_RATE"), 64)
	secs, _ := strconv.ParseFloat(env("FLEET_SECONDS"), 64)
	key := env("FLEET_KEY")
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	rdb := redis.NewClient(&redis.Options{Addr: env("FLEET_CACHE"), PoolSize: readers + 2})
	defer rdb.Close()
	var shim *client.Shim
	if env("FLEET_SHIM") == "1" {
		chc := redis.NewClient(&redis.Options{Addr: env("FLEET_CHANNEL")})
		defer chc.Close()
		var err error
		shim, err = client.Install(rdb, client.ShimOptions{ChannelClient: chc, Logger: log})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer shim.Close()
		select {
		case <-shim.Synced():
		case <-time.After(10 * time.Second):
			fmt.Fprintln(os.Stderr, "shim never synced")
			return 1
		}
	}
	ctx := context.Background()
	var reads, errs atomic.Uint64
	start := time.Now()
	end := start.Add(time.Duration(secs * float64(time.Second)))
	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() {
			every := time.Duration(float64(time.Second) / rate)
			next := time.Now()
			for {
				next = next.Add(every)
				if next.After(end) {
					return
				}
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				} else if d < -100*time.Millisecond {
					next = time.Now() // do not burst to catch up after a stall
				}
				if v, err := rdb.Get(ctx, key).Result(); err != nil || v != "v" {
					errs.Add(1)
					continue
				}
				reads.Add(1)
			}
		})
	}
	out := json.NewEncoder(os.Stdout)
	stat := func(done bool) fleetStat {
		s := fleetStat{T: time.Now().UnixNano(), Start: start.UnixNano(), Reads: reads.Load(), Errors: errs.Load(), Done: done}
		if shim != nil {
			st := shim.Stats()
			s.Local = st.Hits + st.StaleHits
			s.Reports, s.Reported = st.Reports, st.ReportedHits
			s.NotHot, s.ColdInval = st.Evictions["not_hot"]+st.Evictions["mode_end"], st.Invalidations["cold"]
		}
		return s
	}
	stop := make(chan struct{})
	go func() { wg.Wait(); close(stop) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			out.Encode(stat(false))
		case <-stop:
			s := stat(true)
			s.T = min(s.T, end.UnixNano())
			out.Encode(s)
			return 0
		}
	}
}

// fleetStat is one line of a fleet application's report (cumulative).
type fleetStat struct {
	T         int64  `json:"t"`     // Unix ns
	Start     int64  `json:"start"` // Unix ns the readers started
	Reads     uint64 `json:"reads"` // reads answered right, counted by the application
	Errors    uint64 `json:"errors"`
	Local     uint64 `json:"local"` // of those, served from local memory (shim hits)
	Reports   uint64 `json:"reports"`
	Reported  uint64 `json:"reported"`   // local hits sent in reports
	NotHot    uint64 `json:"not_hot"`    // entries dropped because the key stopped being hot
	ColdInval uint64 `json:"cold_inval"` // cold messages that dropped a value
	Done      bool   `json:"done"`
}
