package restart

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/client"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

// appStat is one line of an application's report (cumulative counters).
type appStat struct {
	T         int64             `json:"t"` // Unix ns
	Reads     uint64            `json:"reads"`
	Errors    uint64            `json:"errors"`
	Local     uint64            `json:"local"` // reads served from local memory (shim hits)
	Reloads   uint64            `json:"reloads"`
	ChannelUp bool              `json:"channel_up"`
	Seen      map[string]int64  `json:"seen"`              // value -> start (Unix ns) of the last read that returned it
	Dropped   map[string]uint64 `json:"dropped,omitempty"` // Go: cached values dropped, by reason
	Ready     bool              `json:"ready"`
	Error     string            `json:"error"`
}

// appProc is one application process: a shim of one language reading one
// key from several workers at a paced rate until its stdin closes.
type appProc struct {
	lang  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	errb  testutil.Buffer
	mu    sync.Mutex
	stats []appStat
	ready chan struct{}
	done  chan struct{}
}

// startApp runs argv with the APP_* environment and follows its report.
func startApp(t *testing.T, lang string, argv, env []string) *appProc {
	t.Helper()
	// Raised priority: the measurement is about restarts, not about a
	// neighbour's load stalling the application past LocalTTL+StaleGrace
	// (after such a stall the workers wait for one refresh, at most
	// StaleGrace, then read from the server themselves, by design, which
	// shows as a few GETs more in a 100 ms sample).
	argv = append([]string{"nice", "-n", "-10"}, argv...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	a := &appProc{lang: lang, cmd: cmd, ready: make(chan struct{}), done: make(chan struct{})}
	a.errb.Max = 1 << 20
	cmd.Stderr = &a.errb
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	a.in = in
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s app: %v", lang, err)
	}
	t.Cleanup(func() { a.stop(5 * time.Second) })
	go func() {
		defer close(a.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		readyOnce := sync.OnceFunc(func() { close(a.ready) })
		for sc.Scan() {
			var s appStat
			if json.Unmarshal(sc.Bytes(), &s) != nil {
				continue
			}
			if s.Ready {
				readyOnce()
				continue
			}
			a.mu.Lock()
			a.stats = append(a.stats, s)
			a.mu.Unlock()
		}
		_ = cmd.Wait()
	}()
	return a
}

// waitReady waits for the app's shim to load its first snapshot.
func (a *appProc) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-a.ready:
	case <-a.done:
		t.Fatalf("%s app exited: %v\n%s", a.lang, a.cmd.ProcessState, a.errb.String())
	case <-time.After(timeout):
		t.Fatalf("%s app not ready after %v\n%s", a.lang, timeout, a.errb.String())
	}
}

// stop closes the app's stdin (it stops its readers and exits) and kills it
// if it has not exited within timeout.
func (a *appProc) stop(timeout time.Duration) {
	_ = a.in.Close()
	select {
	case <-a.done:
	case <-time.After(timeout):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
}

// last is the app's latest report.
func (a *appProc) last() appStat {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.stats) == 0 {
		return appStat{}
	}
	return a.stats[len(a.stats)-1]
}

// rate is the app's reads/s and local hits/s between two times.
func (a *appProc) rate(from, to time.Time) (reads, local float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var x, y *appStat
	for i := range a.stats {
		s := &a.stats[i]
		if x == nil && s.T >= from.UnixNano() {
			x = s
		}
		if s.T <= to.UnixNano() {
			y = s
		}
	}
	if x == nil || y == nil || y.T <= x.T {
		return 0, 0
	}
	dt := float64(y.T-x.T) / 1e9
	return float64(y.Reads-x.Reads) / dt, float64(y.Local-x.Local) / dt
}

// goApp is the Go application (TestMain runs it when
// HOTSNIFF_RESTART_APP=1): the same behaviour and output as testdata/app.py
// with the Go shim on a go-redis pool.
func goApp() int {
	env := os.Getenv
	readers, _ := strconv.Atoi(env("APP_READERS"))
	rate, _ := strconv.ParseFloat(env("APP_RATE"), 64)
	key := env("APP_KEY")
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	rdb := redis.NewClient(&redis.Options{Addr: env("APP_CACHE"), PoolSize: readers + 4})
	defer rdb.Close()
	chc := redis.NewClient(&redis.Options{Addr: env("APP_CHANNEL")})
	defer chc.Close()
	shim, err := client.Install(rdb, client.ShimOptions{ChannelClient: chc, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer shim.Close()
	select {
	case <-shim.Synced():
	case <-time.After(20 * time.Second):
		fmt.Fprintln(os.Stderr, "shim never synced")
		return 1
	}
	out := json.NewEncoder(os.Stdout)
	_ = out.Encode(appStat{Ready: true})

	var mu sync.Mutex
	var reads, errs uint64
	seen := map[string]int64{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	ctx := context.Background()
	for range readers {
		wg.Go(func() {
			every := time.Duration(float64(time.Second) / rate)
			next := time.Now()
			for {
				select {
				case <-stop:
					return
				default:
				}
				next = next.Add(every)
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				} else if d < -100*time.Millisecond {
					next = time.Now() // no catch-up burst after a stall
				}
				start := time.Now().UnixNano()
				v, err := rdb.Get(ctx, key).Result()
				mu.Lock()
				if err != nil {
					errs++
				} else {
					reads++
					seen[v] = max(seen[v], start)
				}
				mu.Unlock()
			}
		})
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // the test closes stdin to stop
		close(stop)
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			wg.Wait()
			return 0
		case <-tick.C:
			st := shim.Stats()
			sub := shim.Subscriber().Stats()
			mu.Lock()
			s := appStat{T: time.Now().UnixNano(), Reads: reads, Errors: errs, Local: st.Hits + st.StaleHits,
				Reloads: sub.Reloads, ChannelUp: st.ChannelUp, Seen: map[string]int64{}}
			for k, v := range seen {
				s.Seen[k] = v
			}
			s.Dropped = map[string]uint64{}
			for k, v := range st.Evictions {
				if v != 0 {
					s.Dropped["evict_"+k] = v
				}
			}
			for k, v := range st.Invalidations {
				if v != 0 {
					s.Dropped["inval_"+k] = v
				}
			}
			s.Dropped["misses"] = st.Misses
			mu.Unlock()
			_ = out.Encode(s)
		}
	}
}
