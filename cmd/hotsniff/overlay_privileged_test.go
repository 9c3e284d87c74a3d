package main

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// TestOverlayUplink: pods' traffic between two nodes over VXLAN (4789 and
// Flannel's 8472), Geneve and IP-in-IP, captured on the server node's
// uplink where every packet is encapsulated: exact counts in xdp, tc and
// afpacket modes, and the hot key reported on the inner (pod) address.
func TestOverlayUplink(t *testing.T) {
	netnstest.RequireRoot(t)
	netnstest.Need(t, "redis-benchmark")
	netnstest.Need(t, "redis-cli")
	netnstest.Need(t, "nsenter")
	port := testPorts(3)[2]
	for _, kind := range []string{"vxlan", "vxlan8472", "geneve", "ipip"} {
		t.Run(kind, func(t *testing.T) {
			o := netnstest.NewOverlay(t, kind)
			srv := o.StartRedis(t, port)
			// The kernel's VXLAN devices are detected (--decap auto);
			// the Geneve and IP-in-IP endpoints are user-space programs
			// (see netnstest.NewOverlay), which the operator names.
			decap := map[string]string{"vxlan": "auto", "vxlan8472": "auto", "geneve": "geneve:6081", "ipip": "ipip"}[kind]
			for i, mode := range []string{"xdp", "tc", "afpacket"} {
				t.Run(mode, func(t *testing.T) {
					d := startNodeDaemon(t, o.Server.NS, o.Server.NSIP, "--iface", o.Uplink, "--capture", mode,
						"--port", fmt.Sprintf("redis=%d", port), "--hot-qps", "2000", "--decap", decap)
					// A multiple of the pipeline depth: redis-benchmark
					// finishes a pipeline it started even past -n.
					n := 20000 + 1024*i
					key := "hot:" + kind + ":" + mode
					cli := func(args ...string) string {
						out, err := o.Client.Command(context.Background(), "redis-cli", append([]string{"-h", srv.Addr().String(), "-p", strconv.Itoa(port)}, args...)...).CombinedOutput()
						if err != nil {
							t.Fatalf("redis-cli %v: %v: %s", args, err, out)
						}
						return string(out)
					}
					cli("CONFIG", "RESETSTAT")
					out, err := o.Client.Command(context.Background(), "redis-benchmark", "-h", srv.Addr().String(),
						"-p", strconv.Itoa(port), "-n", strconv.Itoa(n), "-P", "16", "-c", "4", "-q", "GET", key).CombinedOutput()
					if err != nil {
						t.Fatalf("redis-benchmark: %v: %s", err, out)
					}
					// The server's own count is the truth.
					if st := cli("INFO", "commandstats"); !strings.Contains(st, "cmdstat_get:calls="+strconv.Itoa(n)+",") {
						t.Fatalf("server counted other than %d GETs: %s", n, st)
					}
					checkCounts(t, &d.daemonProc, float64(n))
					d.waitHot(t, key, netip.AddrPortFrom(o.ServerIP, uint16(port)))
					if err := d.stop(t, syscall.SIGTERM); err != nil {
						t.Errorf("exit: %v\n%s", err, d.log())
					}
				})
			}
		})
	}
}
