package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// procStat returns a process's resident memory (bytes) and CPU time.
func procStat(t *testing.T, pid int) (rss int64, cpu time.Duration) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	rss = statusKB(b, "VmRSS") << 10
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	stt, _ := strconv.ParseInt(f[12], 10, 64)
	return rss, time.Duration(ut+stt) * 10 * time.Millisecond // USER_HZ 100
}

// authScrape is scrape with basic auth.
func (d *daemonProc) authScrape(t *testing.T, c *http.Client, user, pass string) map[string]float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", d.http+"/metrics", nil)
	req.SetBasicAuth(user, pass)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, "hotsniff_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	if resp.StatusCode != 200 {
		t.Fatalf("scrape: HTTP %d", resp.StatusCode)
	}
	return m
}

// healthWatch probes url (a fresh connection each time, as a kubelet does)
// every 200 ms until stop, and counts the probes that did not get 200
// within 2 s.
func healthWatch(url, user, pass string, stop <-chan struct{}, probes, failed *atomic.Int64, lastErr *atomic.Value) {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for {
		select {
		case <-stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
		req, _ := http.NewRequest("GET", url, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		probes.Add(1)
		resp, err := c.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
		}
		if err != nil {
			failed.Add(1)
			lastErr.Store(err.Error())
		}
	}
}

// TestHTTPFlood runs the daemon behind basic auth (bcrypt cost 10, as
// htpasswd makes it) with --max-cpu 0.05 and attacks its port as a client
// on the network would, while /healthz on --listen and on --health-listen
// are probed every 200 ms and real GETs reach the cache server:
//
//  1. 2,000 keep-alive connections that each got a 401 and stay open: every
//     one is closed (the 401 closes it, an idle one goes after
//     --http-idle-timeout, the bound evicts the oldest idle), memory stays
//     bounded, and both health endpoints answer throughout. Before, all
//     2,000 stayed open for good.
//  2. A wrong-password flood at 25/s from one address: most are refused
//     with 429 without bcrypt, so the daemon's CPU stays far below the core
//     the flood used to take.
//  3. That flood plus authenticated /metrics scrapes as fast as four
//     clients can: the capture's sample rate stays 1 under --max-cpu 0.05
//     (the budget measures the pipeline, not HTTP) and every real GET is
//     counted. Before, the budget counted the handlers and the capture
//     fell to sampling 1/244.
func TestHTTPFlood(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	cache := p.StartRedis(t, 6379)
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), 10)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "web.yml")
	writeFile(t, cfg, []byte(fmt.Sprintf("basic_auth_users:\n  sre: %q\n", hash)))
	healthAddr := fmt.Sprintf("%s:19489", p.NSIP)
	c := &http.Client{Timeout: 5 * time.Second}
	d := startDaemonOn(t, p, 19481, c, "http", "sre", "s3cret",
		"--capture", "tc", "--port", "redis=6379", "--hot-qps", "1000000", "--web-config", cfg,
		"--health-listen", healthAddr, "--http-max-conns", "64", "--http-idle-timeout", "2s", "--max-cpu", "0.05")
	pid := d.cmd.Process.Pid
	addr := strings.TrimPrefix(d.http, "http://")

	stop := make(chan struct{})
	var probes, failed, hprobes, hfailed atomic.Int64
	var lastErr, hlastErr atomic.Value
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		healthWatch(d.http+"/healthz", "sre", "s3cret", stop, &probes, &failed, &lastErr)
	}()
	go func() {
		defer wg.Done()
		healthWatch("http://"+healthAddr+"/healthz", "", "", stop, &hprobes, &hfailed, &hlastErr)
	}()
	stopWatch := func() {
		select {
		case <-stop:
		default:
			close(stop)
			wg.Wait()
		}
	}
	defer stopWatch()

	// 1. Keep-alive connections after a 401.
	time.Sleep(time.Second) // the daemon settles
	rss0, _ := procStat(t, pid)
	const floodConns = 2000
	conns := make([]net.Conn, 0, floodConns)
	defer func() {
		for _, cn := range conns {
			cn.Close()
		}
	}()
	got401 := 0
	for range floodConns {
		cn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			continue
		}
		conns = append(conns, cn)
		cn.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := cn.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			continue
		}
		resp, err := http.ReadResponse(bufio.NewReader(cn), nil)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 401 {
				got401++
			}
		}
	}
	rss1, _ := procStat(t, pid)
	// Past the idle timeout, none is open: a read ends (EOF or reset)
	// rather than waiting.
	time.Sleep(3 * time.Second)
	open := 0
	for _, cn := range conns {
		cn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		var b [1]byte
		if _, err := cn.Read(b[:]); err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			open++
		}
	}
	t.Logf("keep-alive flood: %d connections, %d got 401, %d still open after the idle timeout; RSS %d -> %d MB",
		len(conns), got401, open, rss0>>20, rss1>>20)
	if got401 < floodConns/2 {
		t.Errorf("%d of %d flood connections got their 401", got401, floodConns)
	}
	if open > 0 {
		t.Errorf("%d of %d connections still open %v after their 401, past --http-idle-timeout 2s", open, len(conns), 3*time.Second)
	}
	if rss1-rss0 > 32<<20 {
		t.Errorf("RSS grew by %d MB under the connection flood", (rss1-rss0)>>20)
	}

	// 2. Wrong passwords at 25/s, one address.
	flood := func(ctx context.Context, codes map[int]int, mu *sync.Mutex) {
		fc := &http.Client{Timeout: 5 * time.Second}
		tick := time.NewTicker(40 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			req, _ := http.NewRequest("GET", d.http+"/metrics", nil)
			req.SetBasicAuth("sre", "guess-"+strconv.Itoa(i))
			resp, err := fc.Do(req)
			code := 0
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}
	}
	var mu sync.Mutex
	codes := map[int]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	_, cpu0 := procStat(t, pid)
	t0 := time.Now()
	flood(ctx, codes, &mu)
	cancel()
	_, cpu1 := procStat(t, pid)
	share := (cpu1 - cpu0).Seconds() / time.Since(t0).Seconds()
	t.Logf("wrong-password flood: %v; daemon CPU %.3f of a core", codes, share)
	if codes[429] == 0 || codes[401] > 20 {
		t.Errorf("wrong-password flood answered %v: want at most the burst and one a second checked (401), the rest refused (429)", codes)
	}
	if share > 0.35 {
		t.Errorf("daemon used %.2f of a core under 25 wrong passwords a second", share)
	}

	// 3. The flood, authenticated scrapes as fast as they go, and real GETs.
	m0 := d.authScrape(t, c, "sre", "s3cret")
	ctx, cancel = context.WithCancel(context.Background())
	var hw sync.WaitGroup
	hw.Add(1)
	go func() { defer hw.Done(); flood(ctx, codes, &mu) }()
	var scrapes atomic.Int64
	for range 4 {
		hw.Add(1)
		go func() {
			defer hw.Done()
			sc := &http.Client{Timeout: 5 * time.Second}
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", d.http+"/metrics", nil)
				req.SetBasicAuth("sre", "s3cret")
				if resp, err := sc.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == 200 {
						scrapes.Add(1)
					}
				}
			}
		}()
	}
	// GETs: 4 connections, a pipeline of 50 every 20 ms each (10,000/s).
	var sent atomic.Int64
	var gw sync.WaitGroup
	for i := range 4 {
		gw.Add(1)
		go func() {
			defer gw.Done()
			cn, err := net.Dial("tcp", cache.String())
			if err != nil {
				t.Errorf("dial cache: %v", err)
				return
			}
			defer cn.Close()
			rd := bufio.NewReader(cn)
			var buf []byte
			for j := 0; ; j++ {
				buf = buf[:0]
				for k := range 50 {
					buf = append(buf, netnstest.RESP("GET", fmt.Sprintf("k:%d:%d", i, (j*50+k)%1000))...)
				}
				cn.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := cn.Write(buf); err != nil {
					return
				}
				for range 50 {
					if _, err := rd.ReadString('\n'); err != nil { // $-1: keys are absent
						return
					}
				}
				sent.Add(50)
				if ctx.Err() != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	var minRate = 1.0
	var maxShare float64
	_, pcpu0 := procStat(t, pid)
	t1 := time.Now()
	for time.Since(t1) < 10*time.Second {
		time.Sleep(500 * time.Millisecond)
		m := d.authScrape(t, c, "sre", "s3cret")
		minRate = min(minRate, m["hotsniff_capture_sample_rate"])
		maxShare = max(maxShare, m["hotsniff_cpu_share"])
	}
	_, pcpu1 := procStat(t, pid)
	cancel()
	hw.Wait()
	gw.Wait()
	procShare := (pcpu1 - pcpu0).Seconds() / time.Since(t1).Seconds()
	// Every GET sent is counted: wait for the pipeline to catch up.
	want := m0[`hotsniff_requests_total{op="GET",proto="redis"}`] + float64(sent.Load())
	var m map[string]float64
	for deadline := time.Now().Add(15 * time.Second); ; {
		m = d.authScrape(t, c, "sre", "s3cret")
		if m[`hotsniff_requests_total{op="GET",proto="redis"}`] >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	stopWatch()
	counted := m[`hotsniff_requests_total{op="GET",proto="redis"}`] - m0[`hotsniff_requests_total{op="GET",proto="redis"}`]
	t.Logf("HTTP load: %d scrapes, flood %v; daemon CPU %.3f of a core, pipeline budget share at most %.4f, sample rate at least %.4f; GETs sent %d, counted %.0f; health probes %d (%d failed), --health-listen %d (%d failed)",
		scrapes.Load(), codes, procShare, maxShare, minRate, sent.Load(), counted, probes.Load(), failed.Load(), hprobes.Load(), hfailed.Load())
	if minRate != 1 {
		t.Errorf("capture sample rate fell to %.4f under HTTP load (daemon CPU %.3f, budget share %.4f): the budget must measure the pipeline only", minRate, procShare, maxShare)
	}
	if counted != float64(sent.Load()) {
		t.Errorf("GETs counted %.0f, sent %d", counted, sent.Load())
	}
	if failed.Load() > 0 || hfailed.Load() > 0 {
		t.Errorf("health probes failed: --listen %d of %d (last: %v), --health-listen %d of %d (last: %v)",
			failed.Load(), probes.Load(), lastErr.Load(), hfailed.Load(), hprobes.Load(), hlastErr.Load())
	}
	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("exit: %v\n%s", err, d.log())
	}
}
