package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
	"github.com/hotsniff/hotsniff/internal/testing/promcheck"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

// daemonProc is `hotsniff run` running as a child inside the server's
// network namespace.
type daemonProc struct {
	cmd    *exec.Cmd
	http   string
	stderr *testutil.Buffer
}

func startDaemon(t *testing.T, p *netnstest.Pair, args ...string) *daemonProc {
	t.Helper()
	return startDaemonVia(t, p, nil, args...)
}

// startDaemonVia runs the daemon through a wrapper command (setpriv to drop
// capabilities) inside the namespace.
func startDaemonVia(t *testing.T, p *netnstest.Pair, wrapper []string, args ...string) *daemonProc {
	t.Helper()
	return startDaemonWrapped(t, p, wrapper, 19464, http.DefaultClient, "http", "", "", args...)
}

// testRings gives an eBPF daemon of a test 16 MiB rings per CPU unless the
// test sets --ring-size: the tests that count exactly send a few MB of
// records, and with the default 2 MiB a reader kept off the CPU of a loaded
// CI runner lets a ring pass three quarters full, where the programs start
// sampling connections out on purpose (see TestMaxCPUSampling and the bpf
// package's tests for that behaviour). AF_PACKET keeps its own default.
func testRings(args []string) []string {
	for i, a := range args {
		if a == "--ring-size" || strings.HasPrefix(a, "--ring-size=") ||
			a == "--capture" && i+1 < len(args) && (args[i+1] == "afpacket" || args[i+1] == "auto") {
			return args
		}
	}
	return append(args, "--ring-size", strconv.Itoa(16<<20))
}

func (d *daemonProc) log() string { return strings.Join(d.stderr.Lines(), "\n") }

// scrape returns /metrics as text and as name{labels} -> value.
func (d *daemonProc) scrape(t *testing.T) ([]byte, map[string]float64) {
	t.Helper()
	resp, err := http.Get(d.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, "hotsniff_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			m[line[:i]] = v
		}
	}
	return body, m
}

// waitMetric polls /metrics until name reaches want (metrics refresh once a
// second) and returns the last scrape.
func (d *daemonProc) waitMetric(t *testing.T, name string, want float64) ([]byte, map[string]float64) {
	t.Helper()
	// Generous: a loaded runner may take long to read and decode a
	// benchmark's records; the callers check the exact value after.
	deadline := time.Now().Add(60 * time.Second)
	for {
		body, m := d.scrape(t)
		if m[name] >= want || time.Now().After(deadline) {
			return body, m
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stop sends sig and waits for the exit.
func (d *daemonProc) stop(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	_ = d.cmd.Process.Signal(sig)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		t.Fatalf("daemon did not exit on %v:\n%s", sig, d.log())
		return nil
	}
}

// assertNothingAttached checks that no program is left on the namespace's
// interface: XDP as `ip link` shows it, classic tc filters as `bpftool net`
// shows them, and TCX links by querying the kernel (Debian's bpftool does
// not list TCX yet). It looks at this interface only, so BPF tests running
// in parallel elsewhere do not disturb it.
func assertNothingAttached(t *testing.T, p *netnstest.Pair) {
	t.Helper()
	var last string
	// Links are released asynchronously after the last fd closes.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ipLink, _ := p.Command(context.Background(), "ip", "-d", "link", "show", p.NSIface).CombinedOutput()
		bpfNet, _ := p.Command(context.Background(), "bpftool", "net", "show", "dev", p.NSIface).CombinedOutput()
		var tcx int
		err := p.Do(func() error {
			ifc, err := net.InterfaceByName(p.NSIface)
			if err != nil {
				return err
			}
			for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
				r, err := link.QueryPrograms(link.QueryOptions{Target: ifc.Index, Attach: at})
				if err != nil {
					return err
				}
				tcx += len(r.Programs)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("query TCX programs: %v", err)
		}
		last = fmt.Sprintf("ip link:\n%s\nbpftool net:\n%s\nTCX programs: %d", ipLink, bpfNet, tcx)
		if !strings.Contains(string(ipLink), "prog/xdp") && !strings.Contains(string(bpfNet), "hotsniff") && tcx == 0 {
			return
		}
	}
	t.Fatalf("programs still attached after exit:\n%s", last)
}

// TestRunPrivileged runs the real daemon in each capture mode on a veth whose
// other end holds redis-server and memcached, with clients outside sending a
// known workload (including on connections opened before the daemon
// started), and checks the decoded counts, zero drops, the hot key reaching a
// real subscriber, a clean /metrics, and that nothing stays attached after
// SIGTERM or SIGKILL.
func TestRunPrivileged(t *testing.T) {
	netnstest.RequireRoot(t)
	netnstest.Need(t, "bpftool")
	netnstest.Need(t, "redis-benchmark")
	p := netnstest.NewPair(t)
	cache := p.StartRedis(t, 6379)
	mc := p.StartMemcached(t, 11211)
	chanRedis := p.StartRedis(t, 6390) // the pub/sub channel lives here

	// auto-nobpf is --capture auto in a process without CAP_BPF,
	// CAP_SYS_ADMIN and CAP_PERFMON (as in a pod that forbids eBPF): it must
	// fall back to AF_PACKET, say so in one log line, and count as exactly.
	noBPF := []string{"setpriv", "--bounding-set=-bpf,-sys_admin,-perfmon", "--inh-caps=-all", "--"}
	for _, name := range []string{"xdp", "tc", "afpacket", "auto-nobpf"} {
		mode, wrapper := name, []string(nil)
		if name == "auto-nobpf" {
			netnstest.Need(t, "setpriv")
			mode, wrapper = "auto", noBPF
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			// Connections opened and used before the daemon starts.
			rc := redis.NewClient(&redis.Options{Addr: cache.String(), PoolSize: 1, MinIdleConns: 1})
			defer rc.Close()
			if err := rc.Set(ctx, "warm", "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			mcc := memcache.New(mc.String())
			mcc.MaxIdleConns = 1
			if err := mcc.Set(&memcache.Item{Key: "mc:warm", Value: []byte("1")}); err != nil {
				t.Fatal(err)
			}

			sub := redis.NewClient(&redis.Options{Addr: chanRedis.String()})
			defer sub.Close()
			ps := sub.Subscribe(ctx, "hotsniff:hotkeys")
			defer ps.Close()
			if _, err := ps.Receive(ctx); err != nil {
				t.Fatal(err)
			}

			d := startDaemonVia(t, p, wrapper, "--capture", mode, "--port", "redis=6379", "--port", "memcache=11211",
				"--hot-qps", "2000", "--redis-url", "redis://127.0.0.1:6390")
			wantMode := mode
			if name == "auto-nobpf" {
				wantMode = "afpacket"
				if n := strings.Count(d.log(), "falling back to AF_PACKET"); n != 1 {
					t.Errorf("want one fallback log line, got %d:\n%s", n, d.log())
				}
			}

			// The known workload.
			const benchN = 30000
			netnstest.RedisBenchmarkKey(t, cache, benchN, 16)
			const preGets, preMGets = 200, 50
			for i := range preGets {
				if err := rc.Get(ctx, "pre:"+strconv.Itoa(i%20)).Err(); err != nil && err != redis.Nil {
					t.Fatal(err)
				}
			}
			for range preMGets {
				if err := rc.MGet(ctx, "a", "b", "c").Err(); err != nil {
					t.Fatal(err)
				}
			}
			const mcMulti = 40
			for range mcMulti {
				if _, err := mcc.GetMulti([]string{"mc:1", "mc:2", "mc:3", "mc:4"}); err != nil {
					t.Fatal(err)
				}
			}

			wantGets := float64(benchN + preGets)
			_, m := d.waitMetric(t, `hotsniff_requests_total{op="GET",proto="redis"}`, wantGets)
			if got := m[`hotsniff_requests_total{op="GET",proto="redis"}`]; got != wantGets {
				t.Errorf("redis GET requests = %v, want %v (the clients sent exactly that)\n%s", got, wantGets, d.log())
			}
			_, m = d.waitMetric(t, `hotsniff_requests_total{op="MGET",proto="redis"}`, preMGets)
			if got := m[`hotsniff_requests_total{op="MGET",proto="redis"}`]; got != preMGets {
				t.Errorf("redis MGET requests = %v, want %d", got, preMGets)
			}
			body, m := d.waitMetric(t, `hotsniff_keys_total{proto="memcache"}`, mcMulti*4)
			if got := m[`hotsniff_keys_total{proto="memcache"}`]; got != mcMulti*4 {
				t.Errorf("memcache keys = %v, want %d", got, mcMulti*4)
			}
			if got, want := m[`hotsniff_keys_total{proto="redis"}`], wantGets+preMGets*3; got != want {
				t.Errorf("redis keys = %v, want %v", got, want)
			}
			for k, v := range m {
				if strings.HasPrefix(k, "hotsniff_capture_dropped_total") && v != 0 {
					t.Errorf("%s = %v, want 0", k, v)
				}
				if strings.HasPrefix(k, "hotsniff_stream_gaps_total") && v != 0 {
					t.Errorf("%s = %v, want 0", k, v)
				}
				if strings.HasPrefix(k, "hotsniff_decode_errors_total") && v != 0 {
					t.Errorf("%s = %v, want 0", k, v)
				}
			}
			if m[`hotsniff_packets_total{iface="`+p.NSIface+`",mode="`+wantMode+`"}`] == 0 {
				t.Errorf("no packets counted for %s/%s", p.NSIface, wantMode)
			}
			promcheck.Check(t, body)

			// The hot key reaches the subscriber.
			deadline := time.After(10 * time.Second)
			for found := false; !found; {
				select {
				case msg := <-ps.Channel():
					var e event.Event
					if err := json.Unmarshal([]byte(msg.Payload), &e); err != nil {
						t.Fatalf("bad event %q: %v", msg.Payload, err)
					}
					if e.Type == "hot" && string(e.Key) == "key:__rand_int__" {
						found = true
						if e.Server != cache.String() || e.NS != "0" || e.Proto != "redis" || e.Node != "test-node" || e.Source != "detected" {
							t.Errorf("hot event fields: %+v", e)
						}
					}
				case <-deadline:
					t.Fatalf("no hot event for key:__rand_int__\n%s", d.log())
				}
			}
			// The detection reached the latency histogram.
			if _, m := d.waitMetric(t, "hotsniff_detection_latency_seconds_count", 1); m["hotsniff_detection_latency_seconds_count"] < 1 {
				t.Errorf("no detection latency observed")
			}
			if err := d.stop(t, syscall.SIGTERM); err != nil {
				t.Errorf("exit after SIGTERM: %v\n%s", err, d.log())
			}
			assertNothingAttached(t, p)

			if mode == "xdp" || mode == "tc" {
				// SIGKILL leaves no chance to detach: the kernel must.
				d := startDaemon(t, p, "--capture", mode, "--port", "redis=6379")
				_ = d.stop(t, syscall.SIGKILL)
				assertNothingAttached(t, p)
			}
		})
	}
}
