package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// rawRedis is a client that counts every reply byte it reads off the
// socket: the truth for the daemon's reply-bytes counter.
type rawRedis struct {
	c    net.Conn
	read int
}

func dialRaw(t *testing.T, addr string) *rawRedis {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawRedis{c: c}
}

// do sends cmds in one write and reads exactly want reply bytes.
func (r *rawRedis) do(t *testing.T, want int, cmds ...string) {
	t.Helper()
	_ = r.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(r.c, strings.Join(cmds, "")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, want)
	if _, err := io.ReadFull(r.c, buf); err != nil {
		t.Fatalf("read %d reply bytes: %v", want, err)
	}
	r.read += want
}

// TestRunReplyBytes runs the daemon on a real redis-server for each way of
// capturing replies (eBPF reply heads, the default; eBPF whole replies;
// AF_PACKET) and requires: hotsniff_reply_bytes_total{proto="redis"}
// equal to the bytes the clients read off their sockets, none unpaired,
// and the key read at a modest rate with a 200 000-byte value reported hot
// with reason "bytes" (below --hot-qps, above --hot-bytes). With
// --kernel-count the programs frame the replies themselves: every reply
// byte is looked at there once (hotsniff_kernel_reply_bytes_total
// {what="seen"} less what="duplicate" equal to what the clients read), attributed to the keys it answers or
// to none for a reason (only the writes' +OK here), and the same key is
// reported with the same reply size, measured on the replies the programs
// copy with its reads.
func TestRunReplyBytes(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	cache := p.StartRedis(t, 6379)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"tc-heads", []string{"--capture", "tc"}},
		{"xdp-heads", []string{"--capture", "xdp"}},
		{"tc-whole", []string{"--capture", "tc", "--capture-replies"}},
		{"afpacket", []string{"--capture", "afpacket"}},
		{"tc-kernel-count", []string{"--capture", "tc", "--kernel-count"}},
		{"xdp-kernel-count", []string{"--capture", "xdp", "--kernel-count"}},
	} {
		kernel := strings.HasSuffix(c.name, "kernel-count")
		t.Run(c.name, func(t *testing.T) {
			// Rings large enough that copying whole replies (20 MB/s here)
			// loses nothing on a loaded machine, and a reader at the
			// test's own priority: at its default nice 10, a reader kept off
			// the CPU for a second by parallel tests lets a ring pass three
			// quarters full, and the programs then shed connections on
			// purpose, which this exact comparison cannot survive.
			args := append(c.args, "--port", "redis=6379", "--hot-qps", "5000", "--hot-bytes", "1000000", "--ring-size", "33554432", "--nice", "0")
			d := startDaemon(t, p, args...)
			big := strings.Repeat("b", 200000)
			a, b := dialRaw(t, cache.String()), dialRaw(t, cache.String())
			// Every reply the clients read is counted, +OK of writes too.
			a.do(t, 5, respCmd("SET", "big", big))
			bulkLen := func(n int) int { return len(fmt.Sprintf("$%d\r\n", n)) + n + 2 }
			bigReply := bulkLen(len(big))
			smallVal := strings.Repeat("s", 100)
			for i := range 16 {
				b.do(t, 5, respCmd("SET", fmt.Sprintf("s:%d", i), smallVal))
			}
			// Watch the hot set while the load runs: the key turns cold
			// soon after it stops.
			hot := make(chan event.Event, 1)
			stopWatch := make(chan struct{})
			go func() {
				for {
					select {
					case <-stopWatch:
						return
					case <-time.After(100 * time.Millisecond):
					}
					for _, e := range hotKeys(d) {
						if string(e.Key) == "big" {
							select {
							case hot <- e:
							default:
							}
							return
						}
					}
				}
			}()
			// The big key: 100 reads/s (20 MB/s of replies) for 2.5 s,
			// far below --hot-qps.
			tick := time.NewTicker(10 * time.Millisecond)
			start := time.Now()
			for time.Since(start) < 2500*time.Millisecond {
				<-tick.C
				a.do(t, bigReply, respCmd("GET", "big"))
				// A pipeline of 16 small GETs and an MGET with a miss.
				var cmds []string
				for i := range 16 {
					cmds = append(cmds, respCmd("GET", fmt.Sprintf("s:%d", i)))
				}
				cmds = append(cmds, respCmd("MGET", "s:1", "nope", "s:2"))
				b.do(t, 16*bulkLen(100)+4+bulkLen(100)+5+bulkLen(100), cmds...)
			}
			tick.Stop()
			close(stopWatch)
			total := a.read + b.read
			counter := `hotsniff_reply_bytes_total{proto="redis"}`
			if kernel {
				counter = `hotsniff_kernel_reply_bytes_total{what="seen"}`
			}
			_, m := d.waitMetric(t, counter, float64(total))
			if kernel {
				// A retransmitted reply segment is seen twice and counted
				// once (duplicate): wait for the bytes counted once.
				for deadline := time.Now().Add(10 * time.Second); m[counter]-m[`hotsniff_kernel_reply_bytes_total{what="duplicate"}`] < float64(total) && time.Now().Before(deadline); {
					time.Sleep(100 * time.Millisecond)
					_, m = d.scrape(t)
				}
			}
			for k, v := range m {
				if strings.HasPrefix(k, "hotsniff_capture_dropped_total") && v != 0 {
					t.Errorf("%s = %v: the capture lost records, the comparison below cannot hold", k, v)
				}
			}
			if kernel {
				// Seen, less what was seen twice (a retransmitted reply
				// segment), is what the clients read; seen = attributed
				// + duplicate + unattributed; of the
				// unattributed, only the writes' replies (+OK, 17 of 5
				// bytes: 16 read no key) and the first big GET's: the
				// 200 kB SET is too large to parse in the kernel, so the
				// programs know where a command starts again only after
				// the next request, which user space decodes; the kernel
				// pairs from the one after.
				seen := m[counter]
				attr, dup := m[`hotsniff_kernel_reply_bytes_total{what="attributed"}`], m[`hotsniff_kernel_reply_bytes_total{what="duplicate"}`]
				var unattr float64
				for k, v := range m {
					if strings.HasPrefix(k, "hotsniff_kernel_reply_unattributed_bytes_total{") {
						unattr += v
						if r := strings.TrimSuffix(strings.TrimPrefix(k, `hotsniff_kernel_reply_unattributed_bytes_total{reason="`), `"}`); v != 0 && r != "nokey" && r != "unpaired" && r != "unsynced" {
							t.Errorf("%s = %v", k, v)
						}
					}
				}
				if want := float64(17*5 + bigReply); seen-dup != float64(total) || attr+dup+unattr != seen || unattr != want {
					t.Errorf("kernel reply bytes: seen %v (clients read %d), attributed %v, duplicate %v, unattributed %v (want %v)\n%s", seen, total, attr, dup, unattr, want, d.log())
				}
			} else if got := m[counter]; got != float64(total) {
				t.Errorf("reply bytes %v, the clients read %d\n%s", got, total, d.log())
			}
			// Unpaired bytes and resets follow lost bytes: say which.
			why := fmt.Sprintf("stream gaps %v, lost bytes %v, sampled out %v, kernel sampling steps %v, late reads %v",
				m[`hotsniff_stream_gaps_total{proto="redis"}`], m["hotsniff_stream_lost_bytes_total"], m["hotsniff_capture_sampled_out_total"],
				m["hotsniff_capture_sample_kernel_steps_total"], m["hotsniff_detect_late_reads_total"])
			if got := m[`hotsniff_reply_unpaired_bytes_total{proto="redis"}`]; got != 0 && !kernel {
				t.Errorf("%v reply bytes unpaired; %s", got, why)
			}
			if got := m["hotsniff_reply_pairing_resets_total"]; got != 0 {
				t.Errorf("%v pairing resets; %s", got, why)
			}
			select {
			case e := <-hot:
				if e.Reason != event.ReasonBytes || e.ValueBytes != float64(bigReply) || e.BytesPS < 1e6 || e.QPS >= 5000 {
					t.Errorf("big: reason %q value_bytes %v bytes_ps %v qps %v, want bytes, %d, > 1e6, < 5000", e.Reason, e.ValueBytes, e.BytesPS, e.QPS, bigReply)
				}
			default:
				t.Errorf("big never hot\n%s", d.log())
			}
			for _, e := range hotKeys(d) {
				if string(e.Key) != "big" {
					t.Errorf("unexpected hot key %q", e.Key)
				}
			}
			a.c.Close()
			b.c.Close()
			if err := d.stop(t, syscall.SIGTERM); err != nil {
				t.Errorf("daemon exit: %v\n%s", err, d.log())
			}
			assertNothingAttached(t, p)
		})
	}
}

func respCmd(args ...string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&sb, "$%d\r\n%s\r\n", len(a), a)
	}
	return sb.String()
}

// hotKeys reads the daemon's /hotkeys.
func hotKeys(d *daemonProc) []event.Event {
	resp, err := http.Get(d.http + "/hotkeys")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var doc struct{ Keys []event.Event }
	if json.NewDecoder(resp.Body).Decode(&doc) != nil {
		return nil
	}
	return doc.Keys
}

// TestRunReplyBytesMemcache is TestRunReplyBytes for memcached (text gets
// and multi-gets with misses, meta mg): the daemon's reply bytes equal what
// the client read, in eBPF reply-heads mode and with whole replies.
func TestRunReplyBytesMemcache(t *testing.T) {
	netnstest.RequireRoot(t)
	p := netnstest.NewPair(t)
	mc := p.StartMemcached(t, 11211)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"tc-heads", []string{"--capture", "tc"}},
		{"tc-whole", []string{"--capture", "tc", "--capture-replies"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Rings large enough that copying whole 100 KB replies loses
			// nothing on a loaded machine.
			d := startDaemon(t, p, append(c.args, "--port", "memcache=11211", "--hot-qps", "5000", "--ring-size", "33554432")...)
			cl := dialRaw(t, mc.String())
			big, small := strings.Repeat("m", 100000), strings.Repeat("s", 300)
			cl.do(t, 8, "set big 0 0 100000\r\n"+big+"\r\n")
			cl.do(t, 8, "set small 0 0 300\r\n"+small+"\r\n")
			value := func(k string, n int) int { return len(fmt.Sprintf("VALUE %s 0 %d\r\n", k, n)) + n + 2 }
			for range 100 {
				time.Sleep(2 * time.Millisecond)
				cl.do(t, value("big", 100000)+5, "get big\r\n")
				cl.do(t, value("small", 300)+value("big", 100000)+5, "get small nope big\r\n")
				cl.do(t, len("VA 300\r\n")+300+2+len("EN\r\n"), "mg small v\r\nmg nope v\r\n")
			}
			_, m := d.waitMetric(t, `hotsniff_reply_bytes_total{proto="memcache"}`, float64(cl.read))
			for k, v := range m {
				if strings.HasPrefix(k, "hotsniff_capture_dropped_total") && v != 0 {
					t.Errorf("%s = %v: the capture lost records, the comparison below cannot hold", k, v)
				}
			}
			if got := m[`hotsniff_reply_bytes_total{proto="memcache"}`]; got != float64(cl.read) {
				t.Errorf("reply bytes %v, the client read %d\n%s", got, cl.read, d.log())
			}
			if got := m[`hotsniff_reply_unpaired_bytes_total{proto="memcache"}`]; got != 0 {
				t.Errorf("%v reply bytes unpaired", got)
			}
			cl.c.Close()
			if err := d.stop(t, syscall.SIGTERM); err != nil {
				t.Errorf("daemon exit: %v\n%s", err, d.log())
			}
			assertNothingAttached(t, p)
		})
	}
}
