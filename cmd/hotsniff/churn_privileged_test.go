package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// procFigures is what a process holds: file descriptors (and of them BPF
// programs and links), resident memory; and the TCX programs the kernel has
// attached to the interfaces of the node's namespace.
type procFigures struct {
	fds, progFDs, linkFDs int
	rssKiB                int
	tcx                   int
	goroutines            int
	heapKiB               int
}

func (f procFigures) String() string {
	return fmt.Sprintf("fds %d (bpf-prog %d, bpf_link %d), RSS %d KiB, Go heap in use %d KiB, goroutines %d, TCX programs on the node's interfaces %d",
		f.fds, f.progFDs, f.linkFDs, f.rssKiB, f.heapKiB, f.goroutines, f.tcx)
}

func figures(t *testing.T, d *nodeDaemon, node *netnstest.Node) procFigures {
	t.Helper()
	var f procFigures
	pid := d.cmd.Process.Pid
	// A heap profile with gc=1 collects garbage first (the daemon runs with
	// --pprof), so the heap figure is what is live, not what GC has yet to
	// find.
	resp, err := http.Get(d.http + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp, err = http.Get(d.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f.goroutines, _ = strconv.Atoi(v)
		}
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_inuse_bytes "); ok {
			x, _ := strconv.ParseFloat(v, 64)
			f.heapKiB = int(x / 1024)
		}
	}
	resp.Body.Close()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		f.fds++
		target, _ := os.Readlink(dir + "/" + e.Name())
		switch target {
		case "anon_inode:bpf-prog":
			f.progFDs++
		case "anon_inode:bpf_link":
			f.linkFDs++
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	f.rssKiB = int(statusKB(status, "VmRSS"))
	err = node.Do(func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, ifc := range ifs {
			for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
				r, err := link.QueryPrograms(link.QueryOptions{Target: ifc.Index, Attach: at})
				if err != nil {
					return err
				}
				f.tcx += len(r.Programs)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("query TCX programs: %v", err)
	}
	return f
}

// TestPodChurn creates and deletes 200 pods on a node under traffic, each
// pod sending requests of its own, with the daemon following veth* (one
// attach and detach per pod) and with the cgroup capture: every request is
// counted, and afterwards the daemon holds the same file descriptors, BPF
// programs and links as before, and about the same memory.
func TestPodChurn(t *testing.T) {
	netnstest.RequireRoot(t)
	netnstest.Need(t, "nsenter")
	const cycles, perPod = 200, 20
	for _, mode := range []string{"iface-pattern", "cgroup"} {
		t.Run(mode, func(t *testing.T) {
			if _, ok := cgroupRoot(); mode == "cgroup" && !ok {
				netnstest.Skip(t, "no cgroup v2 hierarchy mounted")
			}
			node := netnstest.NewNode(t)
			port := testPorts(4)[3]
			args := []string{"--port", fmt.Sprintf("redis=%d", port), "--hot-qps", "1000000", "--pprof"}
			if mode == "cgroup" {
				args = append(args, "--capture", "cgroup")
			} else {
				args = append(args, "--iface", "veth*")
			}
			d := startNodeDaemon(t, node.NS, node.NSIP, args...)
			server := node.AddPod(t)
			srv := server.StartRedis(t, port)
			bg := node.AddPod(t)

			// Background traffic from a long-lived client pod.
			rc := redis.NewClient(&redis.Options{Addr: srv.String(), PoolSize: 2, Protocol: 2, DisableIdentity: true,
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					var c net.Conn
					err := bg.Do(func() error {
						var err error
						c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
						return err
					})
					return c, err
				}})
			defer rc.Close()
			var bgGets atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := rc.Get(context.Background(), "bg").Err(); err == nil || err == redis.Nil {
						bgGets.Add(1)
					}
					time.Sleep(time.Millisecond)
				}
			}()

			// One churn cycle: a pod appears, sends perPod GETs on a
			// connection of its own, and is deleted.
			cycle := func() {
				p := node.AddPod(t)
				err := p.Do(func() error {
					c, err := net.DialTimeout("tcp", srv.String(), 5*time.Second)
					if err != nil {
						return err
					}
					defer c.Close()
					_ = c.SetDeadline(time.Now().Add(5 * time.Second))
					var req []byte
					for range perPod {
						req = append(req, netnstest.RESP("GET", "churn")...)
					}
					if _, err := c.Write(req); err != nil {
						return err
					}
					rd := bufio.NewReader(c)
					for range perPod {
						if _, err := rd.ReadString('\n'); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					t.Fatalf("pod %s: %v", p.NS, err)
				}
				p.Delete()
			}
			const warm = 10
			for range warm {
				cycle()
			}
			time.Sleep(1500 * time.Millisecond) // detaches of the warm-up done
			d.scrape(t)                         // the test's HTTP connection to the daemon stays open from here on
			before := figures(t, d, node)
			start := time.Now()
			for range cycles {
				cycle()
			}
			churnTime := time.Since(start)
			close(stop)
			wg.Wait()
			want := float64((warm+cycles)*perPod) + float64(bgGets.Load())
			checkCounts(t, &d.daemonProc, want)
			var after procFigures
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				after = figures(t, d, node)
				if after.fds == before.fds && after.tcx == before.tcx && after.goroutines <= before.goroutines || time.Now().After(deadline) {
					break
				}
			}
			t.Logf("%s: %d pods in %v (%d GETs in the background)\n  before: %v\n  after:  %v",
				mode, cycles, churnTime.Round(time.Millisecond), bgGets.Load(), before, after)
			// Goroutines: fewer after is not a leak (one running when the
			// figures were first taken, an HTTP connection's or a timer's,
			// had ended: 15 before, 14 after in one CI run).
			if after.fds != before.fds || after.progFDs != before.progFDs || after.linkFDs != before.linkFDs || after.tcx != before.tcx || after.goroutines > before.goroutines {
				t.Errorf("left behind after %d pods:\n  before: %v\n  after:  %v", cycles, before, after)
			}
			if grow := after.rssKiB - before.rssKiB; grow > 16<<10 {
				t.Errorf("RSS grew by %d KiB over %d pods", grow, cycles)
			}
			if grow := after.heapKiB - before.heapKiB; grow > 4<<10 {
				t.Errorf("Go heap in use grew by %d KiB over %d pods", grow, cycles)
			}
			if mode == "iface-pattern" {
				// Every attachment but the two live pods' was undone. (A pod
				// gone before its notification is handled is never attached:
				// a warning says so.)
				log := d.log()
				attached, detached := strings.Count(log, "msg=\"capture attached\""), strings.Count(log, "msg=\"capture detached\"")
				t.Logf("attached %d times, detached %d times", attached, detached)
				if attached-detached != 2 || attached < cycles {
					var warns []string
					for _, l := range d.stderr.Lines() {
						if strings.Contains(l, "WARN") {
							warns = append(warns, l)
						}
					}
					t.Errorf("attached %d, detached %d, want 2 apart; warnings:\n%s", attached, detached, strings.Join(warns, "\n"))
				}
				// Only the two live pods' interfaces carry programs.
				if after.linkFDs != 4 || after.tcx != 4 {
					t.Errorf("%d links held, %d TCX programs attached; want 4 (in and out on two veths)", after.linkFDs, after.tcx)
				}
			}
			if err := d.stop(t, 15); err != nil {
				t.Errorf("exit: %v\n%s", err, d.log())
			}
		})
	}
}
