package shimtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client"
)

// monitor collects what redis-server executes (MONITOR on a raw
// connection), one line each, until the returned function is called.
func monitor(t *testing.T, addr string) func() []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	if l, err := r.ReadString('\n'); err != nil || l != "+OK\r\n" {
		t.Fatalf("MONITOR: %q %v", l, err)
	}
	var mu sync.Mutex
	var out []string
	go func() {
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			mu.Lock()
			out = append(out, strings.TrimPrefix(strings.TrimSuffix(l, "\r\n"), "+"))
			mu.Unlock()
		}
	}()
	return func() []string {
		time.Sleep(200 * time.Millisecond)
		c.Close()
		mu.Lock()
		defer mu.Unlock()
		return out
	}
}

// monitorCmd splits a MONITOR line into the client address and the command
// as printed: `1700000000.123 [0 127.0.0.1:5555] "GET" "k"`.
func monitorCmd(l string) (client, cmd string) {
	i := strings.Index(l, "[")
	j := strings.Index(l, "]")
	if i < 0 || j < i {
		return "", ""
	}
	f := strings.Fields(l[i+1 : j])
	return f[len(f)-1], strings.TrimSpace(l[j+1:])
}

// Each refresh of a key served locally is followed, on the same connection
// and as the very next command, by a report of the reads served locally
// since the previous one; the reports add up to the local hits.
func TestAbsorbedReportsOnWire(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: 20 * time.Millisecond})
	ctx := context.Background()
	key := "item:hot key" // a space: the key runs to the end of the report
	e.plain.Set(ctx, key, "v", 0)
	e.plain.HSet(ctx, "h:hot", "f", "1")
	e.makeHot(t, key, "h:hot")
	stop := monitor(t, e.cache.Addr)
	var reads int
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if v, err := e.app.Get(ctx, key).Result(); err != nil || v != "v" {
			t.Fatalf("GET = %q, %v", v, err)
		}
		if v, err := e.app.HGet(ctx, "h:hot", "f").Result(); err != nil || v != "1" {
			t.Fatalf("HGET = %q, %v", v, err)
		}
		reads++
		time.Sleep(100 * time.Microsecond)
	}
	lines := stop()
	st := e.shim.Stats()
	last := map[string]string{} // client -> its previous command
	reports := map[string]uint64{}
	nReports := 0
	for _, l := range lines {
		c, cmd := monitorCmd(l)
		if strings.HasPrefix(cmd, `"echo"`) || strings.HasPrefix(cmd, `"ECHO"`) {
			var hits, win uint64
			var k string
			msg := strings.TrimSuffix(strings.SplitN(cmd, " ", 2)[1], `"`)
			msg = strings.TrimPrefix(msg, `"`)
			if _, err := fmt.Sscanf(msg, "hotsniff:absorbed:1 %d %d", &hits, &win); err != nil {
				t.Fatalf("report %q: %v", cmd, err)
			}
			k = strings.SplitN(msg, " ", 4)[3]
			want := map[string]string{key: `"get" "item:hot key"`, "h:hot": `"hgetall" "h:hot"`}[k]
			if !strings.EqualFold(last[c], want) {
				t.Fatalf("report %q follows %q on %s, want %s", cmd, last[c], c, want)
			}
			if hits < 1 || win < 1 || win > 5000 {
				t.Fatalf("report %q", cmd)
			}
			reports[k] += hits
			nReports++
		}
		last[c] = cmd
	}
	if nReports == 0 || uint64(nReports) != st.Reports || reports[key]+reports["h:hot"] != st.ReportedHits {
		t.Fatalf("%d reports carrying %v on the wire; shim says %d carrying %d", nReports, reports, st.Reports, st.ReportedHits)
	}
	// What is not reported yet is at most one LocalTTL of reads per key.
	local := st.Hits + st.StaleHits
	if st.ReportedHits > local || local-st.ReportedHits > uint64(reads)/10 {
		t.Fatalf("reported %d of %d local hits (%d reads per key)", st.ReportedHits, local, reads)
	}
	t.Logf("%d reads per key, %d local hits, %d reports carrying %d", reads, local, nReports, st.ReportedHits)
}

// A server that refuses ECHO (an ACL without it): the shim logs once, stops
// reporting, and every read still gets its right answer.
func TestAbsorbedReportRefused(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	e := newShimEnv(t, client.ShimOptions{LocalTTL: 5 * time.Millisecond, Logger: log})
	ctx := context.Background()
	e.plain.Set(ctx, "k", "v", 0)
	if err := e.plain.Do(ctx, "ACL", "SETUSER", "default", "-echo").Err(); err != nil {
		t.Fatal(err)
	}
	e.makeHot(t, "k")
	for i := range 2000 {
		if v, err := e.app.Get(ctx, "k").Result(); err != nil || v != "v" {
			t.Fatalf("read %d: GET = %q, %v", i, v, err)
		}
		if i%100 == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	st := e.shim.Stats()
	mu.Lock()
	n := strings.Count(logs.String(), "absorbed-demand reports disabled")
	mu.Unlock()
	if st.Reporting || st.Reports != 0 || n != 1 || st.Refreshes < 5 || st.FetchErrors != 0 {
		t.Fatalf("reporting %v, %d reports, %d log lines, %d refreshes, %d fetch errors", st.Reporting, st.Reports, n, st.Refreshes, st.FetchErrors)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// BenchmarkLocalHit is what counting a local hit for the report adds to a
// hit (no refresh: LocalTTL is an hour), side by side with reports off.
func BenchmarkLocalHit(b *testing.B) {
	ctx := context.Background()
	for _, off := range []bool{false, true} {
		name := "reports-on"
		if off {
			name = "reports-off"
		}
		b.Run(name, func(b *testing.B) {
			e := warmHot(b, client.ShimOptions{LocalTTL: time.Hour, DisableAbsorbedReports: off})
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if e.app.Get(ctx, "item:hot").Val() != "v" {
						b.Error("miss")
						return
					}
				}
			})
		})
	}
}

// BenchmarkHotKeyReadReports is a hot-key read loop against a real
// redis-server with the default 50ms local expiry (a refresh, and with
// reports on a report, every 50ms), side by side with reports off.
func BenchmarkHotKeyReadReports(b *testing.B) {
	ctx := context.Background()
	for _, off := range []bool{false, true} {
		name := "reports-on"
		if off {
			name = "reports-off"
		}
		b.Run(name, func(b *testing.B) {
			e := warmHot(b, client.ShimOptions{DisableAbsorbedReports: off})
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if e.app.Get(ctx, "item:hot").Val() != "v" {
					b.Fatal("wrong value")
				}
			}
		})
	}
}

// An MGET whose other keys are served locally sends the one key it
// refreshes alone: that MGET carries the report, and the daemon pairs it.
func TestAbsorbedReportAfterMGET(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: 20 * time.Millisecond})
	ctx := context.Background()
	e.plain.Set(ctx, "a", "1", 0)
	e.makeHot(t, "a")
	stop := monitor(t, e.cache.Addr)
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if v, err := e.app.MGet(ctx, "a").Result(); err != nil || len(v) != 1 || v[0] != "1" {
			t.Fatalf("MGET = %v, %v", v, err)
		}
		time.Sleep(100 * time.Microsecond)
	}
	lines := stop()
	last := map[string]string{}
	n := 0
	for _, l := range lines {
		c, cmd := monitorCmd(l)
		if strings.HasPrefix(strings.ToLower(cmd), `"echo" "hotsniff:absorbed:1 `) {
			if !strings.EqualFold(last[c], `"mget" "a"`) || !strings.HasSuffix(cmd, ` a"`) {
				t.Fatalf("report %q after %q", cmd, last[c])
			}
			n++
		}
		last[c] = cmd
	}
	if st := e.shim.Stats(); n == 0 || uint64(n) != st.Reports {
		t.Fatalf("%d reports on the wire, shim sent %d", n, st.Reports)
	}
}
