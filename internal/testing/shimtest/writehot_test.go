package shimtest

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client"
	"github.com/hotsniff/hotsniff/client/event"
	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/publish"
)

// feeder drives the real detector with what the daemon would see on the
// cache server's wire, on wall time: reads of one key at a steady rate (the
// reads the shim does not absorb, plus other clients'), and every write the
// test makes, at the moment it makes it. The detector emits to the test's
// publisher exactly as in the daemon; only the capture is stood in for.
type feeder struct {
	det    *detect.Detector
	rec    *recording
	mu     sync.Mutex
	wts    []time.Time // the time each write was fed to the detector
	writes chan string
	stop   chan struct{}
	done   chan struct{}
}

func startFeeder(t *testing.T, pub *publish.Publisher, server, key string, readQPS float64, cfg detect.Config) *feeder {
	t.Helper()
	rec := &recording{next: pub}
	det, err := detect.New(cfg, rec)
	if err != nil {
		t.Fatal(err)
	}
	srv := netip.MustParseAddrPort(server)
	f := &feeder{det: det, rec: rec, writes: make(chan string, 1<<16), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		start, lastTick, sent := time.Now(), time.Now(), 0
		read := decode.Request{Op: "GET"}
		write := decode.Request{Op: "SET", Write: true}
		for {
			select {
			case <-f.stop:
				return
			case <-tick.C:
			}
			now := time.Now()
			fl := decode.Flow{Server: srv, Proto: decode.ProtoRedis, TS: now.UnixNano()}
			for n := int(readQPS*now.Sub(start).Seconds()) - sent; n > 0; n-- {
				det.Key(&fl, &read, decode.Key{Bytes: []byte(key), Weight: 1})
				sent++
			}
		drain:
			for {
				select {
				case k := <-f.writes:
					det.Key(&fl, &write, decode.Key{Bytes: []byte(k), Weight: 1})
					f.mu.Lock()
					f.wts = append(f.wts, now)
					f.mu.Unlock()
				default:
					break drain
				}
			}
			if now.Sub(lastTick) >= 100*time.Millisecond { // the daemon's tick
				det.Tick(now.UnixNano())
				lastTick = now
			}
		}
	}()
	t.Cleanup(f.close)
	return f
}

// recording forwards the detector's events to the publisher and keeps a
// copy, with the wall time each was emitted.
type recording struct {
	next *publish.Publisher
	mu   sync.Mutex
	evs  []recorded
}

type recorded struct {
	ev event.Event
	at time.Time
}

func (r *recording) Emit(e *event.Event) {
	r.next.Emit(e)
	r.mu.Lock()
	r.evs = append(r.evs, recorded{*e, time.Now()})
	r.mu.Unlock()
}

// count is how many events of type typ were emitted so far.
func (r *recording) count(typ string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.evs {
		if e.ev.Type == typ {
			n++
		}
	}
	return n
}

func (r *recording) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.evs...)
}

func (f *feeder) close() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	<-f.done
}

// TestUncacheableKey: a key the channel marks cacheable:false is not
// cached (a copy cached before the verdict is dropped when it arrives), and
// every read of it returns what the last write stored: each read reaches
// Redis. A cacheable key beside it is still served locally.
func TestUncacheableKey(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{DisableTracking: true})
	ctx := context.Background()
	e.plain.Set(ctx, "bench:hot", "v0", 0)
	e.plain.Set(ctx, "bench:warm", "w0", 0)
	e.makeHot(t, "bench:hot", "bench:warm")
	for range 5 {
		e.app.Get(ctx, "bench:hot")
		e.app.Get(ctx, "bench:warm")
	}
	if st := e.shim.Stats(); st.Entries != 2 || st.Hits == 0 {
		t.Fatalf("before the verdict: %d entries, %d hits", st.Entries, st.Hits)
	}
	ev := &event.Event{Type: event.TypeHot, Proto: "redis", Server: e.cache.Addr, NS: "0", Key: []byte("bench:hot"),
		QPS: 12000, WriteQPS: 4000, Uncacheable: true, TTLms: 60000, TS: time.Now(), Source: event.SourceDetected}
	e.pub.Emit(ev)
	eventually(t, "verdict applied", func() bool { st := e.shim.Stats(); return st.HotKeys == 1 && st.Entries == 1 })

	resetStats(t, e.plain)
	h0 := e.shim.Stats().Hits
	const n = 2000
	for i := 1; i <= n; i++ {
		want := fmt.Sprint("v", i)
		if err := e.plain.Set(ctx, "bench:hot", want, 0).Err(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if got, err := e.app.Get(ctx, "bench:hot").Result(); err != nil || got != want {
				t.Fatalf("read after write %d: %q, %v; want %q", i, got, err, want)
			}
		}
	}
	st := e.shim.Stats()
	if st.Hits != h0 || st.Entries != 1 {
		t.Fatalf("uncacheable key served locally: %d hits (before %d), %d entries", st.Hits, h0, st.Entries)
	}
	if c := calls(t, e.plain, "get"); c != 2*n {
		t.Fatalf("%d of %d GETs of the uncacheable key reached Redis", c, 2*n)
	}
	// The cacheable key is still served locally.
	for range 20 {
		e.app.Get(ctx, "bench:warm")
	}
	if e.shim.Stats().Hits == st.Hits {
		t.Fatal("cacheable key no longer served locally")
	}
	// A verdict back to cacheable: the key is cached again.
	ev2 := *ev
	ev2.Uncacheable, ev2.WriteQPS = false, 0
	e.pub.Emit(&ev2)
	eventually(t, "cacheable again", func() bool { return e.shim.Stats().HotKeys == 2 })
	h1 := e.shim.Stats().Hits
	for range 10 {
		e.app.Get(ctx, "bench:hot")
	}
	if e.shim.Stats().Hits == h1 {
		t.Fatal("key not cached after turning cacheable again")
	}
}

// TestWriteHotEndToEnd: the case through the real detector and
// publisher: a key read 12 000/s (at the wire) and written about 4 000/s is
// published cacheable:false within milliseconds; the shim stops caching it
// and every read returns the value just written; invalidates for it stay
// under the coalescing cap before the verdict and stop after it.
func TestWriteHotEndToEnd(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{DisableTracking: true})
	ctx := context.Background()
	e.plain.Set(ctx, "bench:hot", "v0", 0)
	f := startFeeder(t, e.pub, e.cache.Addr, "bench:hot", 12000, detect.Config{HotQPS: 1000})
	eventually(t, "hot", func() bool { return e.shim.Stats().HotKeys == 1 })
	for range 3 {
		e.app.Get(ctx, "bench:hot")
	}
	start := time.Now()
	var writes, reads int
	for time.Since(start) < 2*time.Second {
		// Pipelined writes at about 4 000/s, each fed to the detector as
		// the capture would see it; a read after each batch must see the
		// last one.
		p := e.plain.Pipeline()
		var want string
		for range 4 {
			writes++
			want = fmt.Sprint("v", writes)
			p.Set(ctx, "bench:hot", want, 0)
			f.writes <- "bench:hot"
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		// Once the verdict reached the shim, nothing is cached: the read
		// must return the last write exactly.
		verdict := e.shim.Stats().HotKeys == 0
		got, err := e.app.Get(ctx, "bench:hot").Result()
		if verdict {
			reads++
		}
		if verdict && (err != nil || got != want) {
			t.Fatalf("%v after the writes started: read %q, %v; want %q (the last write)", time.Since(start).Round(time.Millisecond), got, err, want)
		}
		time.Sleep(time.Until(start.Add(time.Duration(writes) * time.Second / 4000)))
	}
	f.close()
	for _, r := range f.rec.all() {
		t.Logf("+%v %s cacheable=%v write_qps=%v", r.at.Sub(start).Round(time.Millisecond), r.ev.Type, !r.ev.Uncacheable, r.ev.WriteQPS)
	}
	ds := f.det.Stats()
	hs := f.det.HotSet()
	if len(hs) != 1 || !hs[0].Uncacheable {
		t.Fatalf("hot set %+v: want bench:hot cacheable:false", hs)
	}
	st := e.shim.Stats()
	t.Logf("%d writes in 2s (%.0f/s), %d reads after the verdict, all of the last write; detector: %d invalidates, %d merged, %d verdicts; write_qps %.0f; shim: %d hot keys, %d entries, hits %d",
		writes, float64(writes)/2, reads, ds.Invalidates, ds.InvalMerged, ds.Verdicts, hs[0].WriteQPS, st.HotKeys, st.Entries, st.Hits)
	if ds.Invalidates > 5 {
		t.Fatalf("%d invalidates for a write-hot key, want a few before the verdict and none after", ds.Invalidates)
	}
	if reads < 200 {
		t.Fatalf("only %d reads after the verdict reached the shim", reads)
	}
	if st.HotKeys != 0 || st.Entries != 0 {
		t.Fatalf("shim still treats the key as cacheable: %d hot keys, %d entries", st.HotKeys, st.Entries)
	}
}

// TestStalenessCoalesced: a key that stays cacheable, written in bursts
// faster than the coalescing interval, with invalidation by the channel
// only (no server-assisted tracking): the burst costs two invalidates (the
// first write's and the trailing one), and a read that starts after the
// burst's last write returned sees it within the coalescing interval plus
// the delivery, under the shim's LocalTTL + StaleGrace bound.
func TestStalenessCoalesced(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{DisableTracking: true})
	ctx := context.Background()
	e.plain.Set(ctx, "item:hot", "v0", 0)
	f := startFeeder(t, e.pub, e.cache.Addr, "item:hot", 2000, detect.Config{HotQPS: 1000})
	eventually(t, "hot", func() bool { return e.shim.Stats().HotKeys == 1 })
	bound := 150 * time.Millisecond
	var worst time.Duration
	for round := range 5 {
		before := f.rec.count(event.TypeInvalidate)
		last := fmt.Sprintf("b%d-4", round)
		var burst time.Duration
		stale := writeAndWatch(t, e.app, last, func() {
			start := time.Now()
			for i := range 5 {
				e.plain.Set(ctx, "item:hot", fmt.Sprintf("b%d-%d", round, i), 0)
				f.writes <- "item:hot"
				if i < 4 {
					time.Sleep(time.Millisecond)
				}
			}
			burst = time.Since(start)
		})
		worst = max(worst, stale)
		inv := f.rec.count(event.TypeInvalidate) - before
		// One per 10ms interval the burst spans as the detector saw it
		// (the feeder may lag the writes on a loaded machine), plus the
		// trailing one.
		f.mu.Lock()
		seen := f.wts[len(f.wts)-5:]
		span := seen[4].Sub(seen[0])
		f.mu.Unlock()
		limit := 1 + int(span/(10*time.Millisecond)) + 1
		t.Logf("round %d: 5 writes in %v (%v at the detector), %d invalidates (cap %d); last stale read started %v after the burst (bound %v)",
			round, burst.Round(100*time.Microsecond), span.Round(100*time.Microsecond), inv, limit, stale, bound)
		if inv > limit || inv < 1 {
			t.Errorf("round %d: %d invalidates for a %v burst, want 1 to %d (10ms interval)", round, inv, burst, limit)
		}
		if stale > bound {
			t.Errorf("round %d: stale %v past the write, bound %v", round, stale, bound)
		}
		if hs := f.det.HotSet(); len(hs) != 1 || hs[0].Uncacheable {
			t.Fatalf("hot set %+v: want item:hot cacheable", hs)
		}
	}
	if st := e.shim.Stats(); st.Hits == 0 {
		t.Fatal("the cacheable key was never served locally")
	}
	t.Logf("worst staleness over 5 bursts: %v", worst)
}
