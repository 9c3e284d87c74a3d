package perf

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/capture/ebpfsrc"
	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/decode/redis"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
	"github.com/hotsniff/hotsniff/pipeline"
	"github.com/hotsniff/hotsniff/stream"
)

// TestFigures prints the tables of docs/performance.md. It takes minutes and
// runs only with HOTSNIFF_FIGURES=1; HOTSNIFF_ROUNDS (default 3) sets the
// rounds per configuration:
//
//	HOTSNIFF_FIGURES=1 go test -count=1 -timeout 30m -run TestFigures -v ./internal/testing/perf/
//
// Part 1: per-packet cost of the BPF programs from the kernel's accounting
// (kernel.bpf_stats_enabled: run_time_ns / run_cnt), with the programs
// loaded by package bpf and drained by ebpfsrc, under redis-benchmark GETs
// (-P 1 and -P 16) and under 16 KiB GET replies (the client side then sends
// mostly pure ACKs). Every record must arrive: ring-buffer drops and
// truncated bytes are failures.
//
// Part 2: redis-benchmark throughput without and with the real `hotsniff run`
// binary, alternating, and hotsniff's CPU per million requests. At --nice 10
// two more arms split the cost: hotsniff attached with its process stopped
// (the kernel side alone) and an empty program on the same hook (the hook
// alone).
func TestFigures(t *testing.T) {
	rounds := measurement(t, "HOTSNIFF_FIGURES", 3)
	t.Logf("machine: %d CPUs, load average %s at start", numCPU(), loadavg())
	p := netnstest.NewPair(t)
	srv := p.StartRedis(t, 6379)
	t.Run("bpf_cost", func(t *testing.T) { bpfCost(t, p, srv, rounds) })
	t.Run("throughput", func(t *testing.T) { throughput(t, p, srv, rounds) })
	t.Logf("load average %s at end", loadavg())
}

// replyConfig sets how the programs treat replies from HOTSNIFF_REPLIES:
// "off" (default: only control flags), "heads" (at most bpf.DefaultReplyCopy
// bytes of each reply segment; nothing registers skips here, so every reply
// segment pays for its first 4 KiB: the worst case) or "all" (whole replies,
// --capture-replies).
func replyConfig(t testing.TB, c bpf.Config) bpf.Config {
	switch v := os.Getenv("HOTSNIFF_REPLIES"); v {
	case "", "off":
	case "heads":
		c.ReplyHeads = true
	case "all":
		c.Replies = true
	default:
		t.Fatalf("HOTSNIFF_REPLIES=%q: want off, heads or all", v)
	}
	return c
}

func numCPU() int {
	var s unix.CPUSet
	if unix.SchedGetaffinity(0, &s) != nil {
		return 0
	}
	return s.Count()
}

// workload is one redis-benchmark shape.
type workload struct {
	name string
	n    int // requests
	pipe int
	big  int // GET one key holding a value of this size: replies are GSO packets, the client sends pure ACKs
}

var workloads = []workload{
	{"GET -P 1", 100000, 1, 0},
	{"GET -P 16", 1000000, 16, 0},
	{"GET 16KiB -P 1", 20000, 1, 16 << 10},
	{"GET 256KiB -P 1", 5000, 1, 256 << 10},
}

func runWorkload(t testing.TB, srv netstestAddr, w workload) float64 {
	t.Helper()
	if w.big == 0 {
		return benchmark(t, srv, w.n, w.pipe)
	}
	// Without -r redis-benchmark GETs the literal key "key:__rand_int__".
	if r := redisCmd(t, srv, "SET", "key:__rand_int__", strings.Repeat("v", w.big)); !strings.HasPrefix(r, "+OK") {
		t.Fatalf("SET: %q", r)
	}
	bin := netnstest.Need(t, "redis-benchmark")
	out, err := execOut(bin, "-h", srv.Addr().String(), "-p", strconv.Itoa(int(srv.Port())),
		"-n", strconv.Itoa(w.n), "-P", strconv.Itoa(w.pipe), "-c", "4", "-t", "get", "-q")
	if err != nil {
		t.Fatalf("redis-benchmark: %v: %s", err, out)
	}
	return parseRPS(t, out)
}

func bpfCost(t *testing.T, p *netnstest.Pair, srv netstestAddr, rounds int) {
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		t.Fatalf("enable bpf stats: %v", err)
	}
	defer stats.Close()
	var rows []string
	for _, w := range workloads[:2] {
		var ns []float64
		var runs uint64
		for range rounds {
			e, err := attachEmpty(p, "tc")
			if err != nil {
				t.Fatal(err)
			}
			runWorkload(t, srv, w)
			v, n, err := e.nsPerRun()
			if err != nil {
				t.Fatal(err)
			}
			ns, runs = append(ns, v), runs+n
			if err := e.close(); err != nil {
				t.Fatal(err)
			}
		}
		rows = append(rows, fmt.Sprintf("| %-4s | %-15s | %-10s | %9d | %-22s |", "none", w.name, "empty", runs/uint64(rounds), span(ns, "%.0f")))
	}
	for _, mode := range []bpf.Mode{bpf.ModeXDP, bpf.ModeTC} {
		for _, w := range workloads {
			ns := map[bpf.Hook][]float64{}
			runs := map[bpf.Hook]uint64{}
			var rps []float64
			var sum bpf.Counters
			for range rounds {
				c, err := bpf.Open(replyConfig(t, bpf.Config{Ports: []uint16{srv.Port()}}))
				if err != nil {
					t.Fatal(err)
				}
				var a *bpf.Attachment
				if err := p.Do(func() error { a, err = c.Attach(p.NSIface, mode); return err }); err != nil {
					c.Close()
					t.Fatal(err)
				}
				src, err := ebpfsrc.New(c)
				if err != nil {
					c.Close()
					t.Fatal(err)
				}
				// Drain like the daemon does, without keeping anything
				// (netnstest.Collect keeps every byte: too slow for 64 KiB replies).
				// With reply heads, decode like the daemon too, so large
				// values are skipped in the kernel once their header is read.
				col := drain(src)
				if c.ReplyHeads() {
					col = drainDecode(src, c, srv.Port())
				}
				rps = append(rps, runWorkload(t, srv, w))
				col.waitIdle(200*time.Millisecond, 5*time.Second)
				cnt, err := a.Counters()
				if err != nil {
					t.Fatal(err)
				}
				for h, prog := range a.Programs() {
					st, err := prog.Stats()
					if err != nil {
						t.Fatal(err)
					}
					if st.RunCount > 0 {
						ns[h] = append(ns[h], float64(st.Runtime.Nanoseconds())/float64(st.RunCount))
					}
					runs[h] += st.RunCount
				}
				segs := int(col.n.Load())
				if cnt.RingbufFull != 0 || cnt.Truncated != 0 || cnt.LoadErrors != 0 || int(cnt.Records) != segs {
					t.Errorf("%s %s: drops %+v, reader got %d records", mode, w.name, cnt, segs)
				}
				sum.Packets += cnt.Packets
				sum.Matched += cnt.Matched
				sum.Records += cnt.Records
				sum.RingbufFull += cnt.RingbufFull
				sum.Truncated += cnt.Truncated
				if err := col.stop(); err != nil {
					t.Fatal(err)
				}
			}
			for _, h := range []bpf.Hook{bpf.HookXDP, bpf.HookTCIngress, bpf.HookTCEgress} {
				if v, ok := ns[h]; ok {
					rows = append(rows, fmt.Sprintf("| %-4s | %-15s | %-10s | %9d | %-22s |", mode, w.name, h, runs[h]/uint64(rounds), span(v, "%.0f")))
				}
			}
			rows = append(rows, fmt.Sprintf("| %-4s | %-15s | rps %-22s | packets %d matched %d records %d ringbuf_full %d truncated %d | load %s |",
				mode, w.name, span(rps, "%.0f"), sum.Packets, sum.Matched, sum.Records, sum.RingbufFull, sum.Truncated, loadavg()))
		}
	}
	t.Logf("\nBPF ns/run (median [min–max] over rounds), runs per round, replies %q\n%s", os.Getenv("HOTSNIFF_REPLIES"), strings.Join(rows, "\n"))
}

func throughput(t *testing.T, p *netnstest.Pair, srv netstestAddr, rounds int) {
	bin := buildHotsniff(t)
	var rows []string
	for _, mode := range []string{"tc", "xdp"} {
		// --nice 10 is run's default; --nice 0 competes with the server
		// and client on equal terms.
		for _, nice := range []string{"10", "0"} {
			for _, w := range workloads[:2] {
				var without, with, ratio, cpuPerM, reqPerCPU, stopped, empty []float64
				for range rounds {
					// Each round brackets its arms between two runs
					// without hotsniff; their mean is the round's
					// baseline, so drift within a round cancels.
					w0 := benchmark(t, srv, w.n, w.pipe)
					resetStats(t, srv)
					s := startSniffer(t, bin, p, srv, mode, "--nice", nice)
					cpu0 := s.cpuSeconds(t)
					r0 := sum(s.scrape(t), "hotsniff_requests_total")
					rps := benchmark(t, srv, w.n, w.pipe)
					sent := serverGets(t, srv)
					m := s.waitRequests(t, float64(sent)+r0)
					cpu := s.cpuSeconds(t) - cpu0
					req := sum(m, "hotsniff_requests_total") - r0
					checkRun(t, m, sent)
					s.stop(t)
					var stop, emp float64
					if nice == "10" {
						stop = readerStopped(t, bin, p, srv, mode, w)
						emp = emptyAttached(t, p, srv, mode, w)
					}
					base := (w0 + benchmark(t, srv, w.n, w.pipe)) / 2
					without = append(without, base)
					with = append(with, rps)
					ratio = append(ratio, rps/base)
					cpuPerM = append(cpuPerM, cpu/float64(sent)*1e6)
					if cpu > 0 {
						reqPerCPU = append(reqPerCPU, req/cpu)
					}
					if nice == "10" {
						stopped = append(stopped, stop/base)
						empty = append(empty, emp/base)
					}
				}
				stoppedCol, emptyCol := "–", "–"
				if len(stopped) > 0 {
					stoppedCol, emptyCol = span(stopped, "%.3f"), span(empty, "%.3f")
				}
				rows = append(rows, fmt.Sprintf("| %-3s | %-2s | %-9s | %-26s | %-26s | %-20s | %-20s | %-20s | %-20s | %-26s | %s |",
					mode, nice, w.name, span(without, "%.0f"), span(with, "%.0f"), span(ratio, "%.3f"), stoppedCol, emptyCol,
					span(cpuPerM, "%.2f"), span(reqPerCPU, "%.0f"), loadavg()))
			}
		}
	}
	t.Log("\nredis-benchmark rps without (mean of the runs before and after each round's arms) / with hotsniff (median [min–max]), with/without per round, reader stopped/without and empty program/without per round, hotsniff CPU-s per 1M requests, requests decoded per CPU-s, load average\n" +
		"| mode | nice | workload | without | with | with/without | reader stopped/without | empty program/without | CPU-s/M | req/CPU-s | load |\n" +
		strings.Join(rows, "\n"))
}

// readerStopped measures the kernel side alone: hotsniff attached with
// rings that hold the whole run (128 MiB per CPU), its process stopped (SIGSTOP) for
// the benchmark, so the programs parse and copy every segment while nothing
// in user space runs. After SIGCONT the daemon must still decode every
// request: the ring lost nothing. A large ring costs the programs more cache
// misses than the default 2 MiB, so this is an upper bound of the kernel
// side's share of the with/without ratio.
func readerStopped(t *testing.T, bin string, p *netnstest.Pair, srv netstestAddr, mode string, w workload) float64 {
	t.Helper()
	resetStats(t, srv)
	s := startSniffer(t, bin, p, srv, mode, "--nice", "10", "--ring-size", strconv.Itoa(128<<20))
	defer s.stop(t)
	r0 := sum(s.scrape(t), "hotsniff_requests_total")
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("stop hotsniff: %v", err)
	}
	rps := benchmark(t, srv, w.n, w.pipe)
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("continue hotsniff: %v", err)
	}
	sent := serverGets(t, srv)
	m := s.waitRequests(t, float64(sent)+r0)
	checkRun(t, m, sent)
	return rps
}

// emptyAttached measures the hook alone: an empty program (floor_test.go)
// attached where mode attaches ours, under the same benchmark. On veth, an
// XDP program of any kind also moves the device's receive path to NAPI.
func emptyAttached(t *testing.T, p *netnstest.Pair, srv netstestAddr, mode string, w workload) float64 {
	t.Helper()
	e, err := attachEmpty(p, mode)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	return benchmark(t, srv, w.n, w.pipe)
}

// drainer reads a Source as fast as it can and counts records.
type drainer struct {
	src  *ebpfsrc.Source
	n    atomic.Int64
	done chan error
}

func drain(src *ebpfsrc.Source) *drainer {
	d := &drainer{src: src, done: make(chan error, 1)}
	go func() {
		var seg capture.Segment
		for {
			if err := src.Next(&seg); err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				d.done <- err
				return
			}
			d.n.Add(1)
		}
	}()
	return d
}

// drainDecode is drain that also reassembles and decodes Redis requests and
// replies, registering each large value's skip with the kernel as the
// daemon does in reply-heads mode.
func drainDecode(src *ebpfsrc.Source, c *bpf.Capture, port uint16) *drainer {
	d := &drainer{src: src, done: make(chan error, 1)}
	var reg decode.Registry
	reg.Register(redis.New(redis.Config{}))
	ports := new(stream.Ports)
	ports.Set(port, decode.ProtoRedis)
	cfg := stream.DefaultConfig()
	cfg.Replies = true
	cfg.SkipNotify = 2 * int(c.ReplyCopy())
	cfg.OnSkip = func(f *decode.Flow, start, end uint32) { _ = c.SetReplySkip(f.Server, f.Client, start, end) }
	pl, err := pipeline.New(pipeline.Config{Ports: ports, Stream: cfg, Registry: &reg})
	if err != nil {
		panic(err) // a fixed configuration
	}
	pl.SkipReplyHeads()
	go func() {
		var seg capture.Segment
		for {
			if err := src.Next(&seg); err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				d.done <- err
				return
			}
			pl.Add(&seg)
			d.n.Add(1)
		}
	}()
	return d
}

// waitIdle waits until no record arrived for quiet, at most timeout.
func (d *drainer) waitIdle(quiet, timeout time.Duration) {
	end := time.Now().Add(timeout)
	last, since := d.n.Load(), time.Now()
	for time.Now().Before(end) {
		time.Sleep(quiet / 5)
		if n := d.n.Load(); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= quiet {
			return
		}
	}
}

func (d *drainer) stop() error {
	err := d.src.Close()
	return errors.Join(err, <-d.done)
}
