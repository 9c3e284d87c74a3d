package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// forgedRequests is what each forged datagram asks for: twenty reads of a
// victim key and a write to it.
var forgedRequests = append([]byte(strings.Repeat("*2\r\n$3\r\nGET\r\n$6\r\nvictim\r\n", 20)), "*3\r\n$3\r\nSET\r\n$6\r\nvictim\r\n$1\r\nx\r\n"...)

// forgedDatagrams builds VXLAN and Geneve datagrams carrying forged
// requests client > server, one per (kind, port, VNI) given, each from a
// random client port and sequence number.
func forgedDatagrams(client, server netip.Addr, redisPort int, tunnels ...string) []netnstest.Datagram {
	var out []netnstest.Datagram
	for _, spec := range tunnels { // KIND:PORT:VNI
		f := strings.Split(spec, ":")
		port, _ := strconv.Atoi(f[1])
		vni, _ := strconv.Atoi(f[2])
		for range 4 {
			src := netip.AddrPortFrom(client, uint16(30000+rand.IntN(30000)))
			out = append(out, netnstest.Datagram{Port: port, Payload: netnstest.TunnelDatagram(f[0], uint32(vni), src,
				netip.AddrPortFrom(server, uint16(redisPort)), rand.Uint32(), rand.Uint32(), forgedRequests)})
		}
	}
	return out
}

// checkNoForged fails if anything of forgedRequests was counted: a write,
// or the victim key hot.
func checkNoForged(t *testing.T, d *nodeDaemon, m map[string]float64) {
	t.Helper()
	for k, v := range m {
		// redis-benchmark itself sends CONFIG GET at its start.
		if strings.HasPrefix(k, "hotsniff_requests_total") && !strings.Contains(k, `op="GET"`) && !strings.Contains(k, `op="CONFIG|GET"`) && v != 0 {
			t.Errorf("%s = %v: forged writes counted", k, v)
		}
	}
	if e, hot := d.hotkey(t, "victim"); hot {
		t.Errorf("forged key reported hot: %+v", e)
	}
}

// TestForgedTunnelDatagrams: an unprivileged user (nobody) in another
// network namespace sends VXLAN and Geneve datagrams, from a plain UDP
// socket, carrying GETs and SETs of a victim key. The capture hooks see
// them before any firewall. On a node with no tunnel, and on a node with a
// real VXLAN overlay (VNI 42 on 4789) to ports, VNIs it does not carry, or
// to its own VNI but on no accepted connection, none is decoded in xdp, tc or afpacket mode: 0 forged keys, 0 forged
// writes, while real traffic (through the overlay for the second) is
// counted exactly.
func TestForgedTunnelDatagrams(t *testing.T) {
	netnstest.RequireRoot(t)
	netnstest.Need(t, "redis-benchmark")
	netnstest.Need(t, "nsenter")
	port := testPorts(4)[3]
	modes := []string{"xdp", "tc", "afpacket"}

	t.Run("plain node", func(t *testing.T) {
		p := netnstest.NewPair(t)
		srv := p.StartRedis(t, port)
		for i, mode := range modes {
			t.Run(mode, func(t *testing.T) {
				d := startNodeDaemon(t, p.NS, p.NSIP, "--iface", p.NSIface, "--capture", mode,
					"--port", fmt.Sprintf("redis=%d", port), "--hot-qps", "100")
				dgs := forgedDatagrams(p.HostIP, p.NSIP, port, "vxlan:4789:1", "vxlan:8472:1", "geneve:6081:1")
				sent := netnstest.SendAsNobody(t, "", p.NSIP, 100, 0.002, dgs)
				n := 20000 + 1024*i
				netnstest.RedisBenchmarkKey(t, srv, n, 16)
				m := checkCounts(t, &d.daemonProc, float64(n))
				checkNoForged(t, d, m)
				t.Logf("%d forged datagrams (%d forged GETs) sent as nobody", sent, sent*20)
				if err := d.stop(t, syscall.SIGTERM); err != nil {
					t.Errorf("exit: %v\n%s", err, d.log())
				}
			})
		}
	})

	t.Run("vxlan overlay", func(t *testing.T) {
		o := netnstest.NewOverlay(t, "vxlan")
		srv := o.StartRedis(t, port)
		for i, mode := range modes {
			t.Run(mode, func(t *testing.T) {
				d := startNodeDaemon(t, o.Server.NS, o.Server.NSIP, "--iface", o.Uplink, "--capture", mode,
					"--port", fmt.Sprintf("redis=%d", port), "--hot-qps", "100")
				// VNI 43 on the overlay's port, VNI 42 on ports it does
				// not use: the kernel itself drops them. And VNI 42 on
				// 4789, which is the overlay's: the kernel decapsulates
				// them too, but they belong to no connection the server
				// accepted, so the stream layer rejects them.
				dgs := forgedDatagrams(o.ClientIP, o.ServerIP, port, "vxlan:4789:43", "vxlan:8472:42", "geneve:6081:42", "vxlan:4789:42")
				sent := netnstest.SendAsNobody(t, o.Client.NS, o.Underlay, 100, 0.002, dgs)
				n := 20000 + 1024*i
				out, err := o.Client.Command(context.Background(), "redis-benchmark", "-h", srv.Addr().String(),
					"-p", strconv.Itoa(port), "-n", strconv.Itoa(n), "-P", "16", "-c", "4", "-q", "GET", "real").CombinedOutput()
				if err != nil {
					t.Fatalf("redis-benchmark: %v: %s", err, out)
				}
				m := checkCounts(t, &d.daemonProc, float64(n))
				checkNoForged(t, d, m)
				if m[`hotsniff_stream_rejected_total{reason="unconfirmed"}`] == 0 {
					t.Error("the datagrams to the overlay's own VNI did not reach the stream layer's check")
				}
				d.waitHot(t, "real", srv)
				t.Logf("%d forged datagrams (%d forged GETs) sent as nobody", sent, sent*20)
				if err := d.stop(t, syscall.SIGTERM); err != nil {
					t.Errorf("exit: %v\n%s", err, d.log())
				}
			})
		}
	})
}

// TestForgedSegments: while a real client runs GETs on one connection, an
// attacker off the path sends 20,000 segments with that connection's
// addresses and random sequence and acknowledgment numbers, carrying SETs
// and GETs. In xdp, tc and afpacket mode the daemon's counts equal what the
// server itself executed (the server's own commandstats), and neither lost
// bytes nor gaps appear: the forged segments were rejected, and counted.
func TestForgedSegments(t *testing.T) {
	netnstest.RequireRoot(t)
	netnstest.Need(t, "nsenter")
	port := testPorts(4)[3]
	p := netnstest.NewPair(t)
	srv := p.StartRedis(t, port)
	forged := append(netnstest.RESP("SET", "forged", "x"), netnstest.RESP("GET", "forged")...)
	for _, mode := range []string{"xdp", "tc", "afpacket"} {
		t.Run(mode, func(t *testing.T) {
			d := startNodeDaemon(t, p.NS, p.NSIP, "--iface", p.NSIface, "--capture", mode,
				"--port", fmt.Sprintf("redis=%d", port), "--hot-qps", "1000000")
			var local netip.AddrPort
			rc := redis.NewClient(&redis.Options{Addr: srv.String(), PoolSize: 1, Protocol: 2, DisableIdentity: true,
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
					if err == nil {
						local = c.LocalAddr().(*net.TCPAddr).AddrPort()
					}
					return c, err
				}})
			defer rc.Close()
			ctx := context.Background()
			if err := rc.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			f := netnstest.NewSegmentForger(t)
			done := make(chan error, 1)
			go func() {
				rng := rand.New(rand.NewPCG(rand.Uint64(), 7))
				for i := range 20000 {
					if err := f.Send(local, srv, rng.Uint32(), rng.Uint32(), forged); err != nil {
						done <- err
						return
					}
					if i%100 == 0 {
						time.Sleep(time.Millisecond) // spread over the real traffic
					}
				}
				done <- nil
			}()
			const rounds, pipe = 400, 50
			for range rounds {
				pl := rc.Pipeline()
				for range pipe {
					pl.Get(ctx, "real")
				}
				if _, err := pl.Exec(ctx); err != nil && err != redis.Nil {
					t.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				t.Fatalf("forge: %v", err)
			}
			// The server's own count is the truth (a forged segment that
			// happened to fall in its receive window would really run).
			stats, err := rc.Info(ctx, "commandstats").Result()
			if err != nil {
				t.Fatal(err)
			}
			calls := func(cmd string) float64 {
				_, rest, ok := strings.Cut(stats, "cmdstat_"+cmd+":calls=")
				if !ok {
					return 0
				}
				n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				return float64(n)
			}
			gets, sets := calls("get"), calls("set")
			if gets < rounds*pipe {
				t.Fatalf("server ran %v GETs, want at least %d", gets, rounds*pipe)
			}
			_, m := d.waitMetric(t, `hotsniff_requests_total{op="GET",proto="redis"}`, gets)
			time.Sleep(1500 * time.Millisecond) // one more metrics refresh: nothing beyond
			_, m = d.scrape(t)
			t.Logf("server: %v GETs, %v SETs; daemon: %v GETs, %v SETs, rejected %v/%v/%v, lost bytes %v, gaps %v",
				gets, sets, m[`hotsniff_requests_total{op="GET",proto="redis"}`], m[`hotsniff_requests_total{op="SET",proto="redis"}`],
				m[`hotsniff_stream_rejected_total{reason="out_of_window"}`], m[`hotsniff_stream_rejected_total{reason="unconfirmed"}`],
				m[`hotsniff_stream_rejected_total{reason="unexpected_syn"}`], m["hotsniff_stream_lost_bytes_total"], m[`hotsniff_stream_gaps_total{proto="redis"}`])
			if got := m[`hotsniff_requests_total{op="GET",proto="redis"}`]; got != gets {
				t.Errorf("daemon counted %v GETs, the server ran %v", got, gets)
			}
			if got := m[`hotsniff_requests_total{op="SET",proto="redis"}`]; got != sets {
				t.Errorf("daemon counted %v SETs, the server ran %v", got, sets)
			}
			if m["hotsniff_stream_lost_bytes_total"] != 0 || m[`hotsniff_stream_gaps_total{proto="redis"}`] != 0 {
				t.Errorf("forged segments counted as lost bytes (%v) or gaps (%v)", m["hotsniff_stream_lost_bytes_total"], m[`hotsniff_stream_gaps_total{proto="redis"}`])
			}
			if m[`hotsniff_stream_rejected_total{reason="out_of_window"}`] < 19000 {
				t.Errorf("rejected out of window: %v, want nearly all 20000 forged", m[`hotsniff_stream_rejected_total{reason="out_of_window"}`])
			}
			if err := d.stop(t, syscall.SIGTERM); err != nil {
				t.Errorf("exit: %v\n%s", err, d.log())
			}
		})
	}
}
