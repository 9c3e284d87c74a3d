package ebpfsrc

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// env is a server namespace running redis with the capture attached on its
// veth end, read by a Collector in the test.
type env struct {
	pair *netnstest.Pair
	srv  netip.AddrPort
	src  *Source
	col  *netnstest.Collector
	att  *bpf.Attachment
}

func newEnv(t *testing.T) (*netnstest.Pair, netip.AddrPort) {
	t.Helper()
	p := netnstest.NewPair(t)
	return p, p.StartRedis(t, 6379)
}

func attach(t *testing.T, p *netnstest.Pair, srv netip.AddrPort, mode bpf.Mode, maxCopy uint32) *env {
	t.Helper()
	c, err := bpf.Open(bpf.Config{Ports: []uint16{srv.Port()}, RingSize: 64 << 20, MaxCopy: maxCopy})
	if err != nil {
		t.Fatalf("open bpf capture as root: %v", err)
	}
	var att *bpf.Attachment
	err = p.Do(func() error {
		var err error
		att, err = c.Attach(p.NSIface, mode)
		return err
	})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	src, err := New(c)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	e := &env{pair: p, srv: srv, src: src, att: att}
	e.col = netnstest.Collect(t, src)
	return e
}

// check asserts what every live test wants: the segments the collector read
// match the kernel's counters, nothing was dropped and nothing truncated.
func (e *env) check(t *testing.T, wantTruncated bool) bpf.Counters {
	t.Helper()
	// Wait until the reader has caught up with what the programs wrote,
	// not for a quiet spell: records left after the last wakeup wait for
	// the reader's poll timer, and on a loaded machine the reader can be
	// off the CPU longer than any quiet spell. The deadline only bounds a
	// reader that really lost records.
	var cnt bpf.Counters
	var segs, payload, missing int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if cnt, err = e.att.Counters(); err != nil {
			t.Fatal(err)
		}
		segs, payload, missing = e.col.Totals()
		if int(cnt.Records) == segs && int(cnt.Bytes) == payload && int(cnt.Truncated) == missing || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("%s: %+v; read %d segments, %d bytes, %d missing", e.att.Mode, cnt, segs, payload, missing)
	if cnt.RingbufFull != 0 || cnt.LoadErrors != 0 || cnt.Nonlinear != 0 {
		t.Errorf("drops: ringbuf_full %d, load errors %d, nonlinear %d", cnt.RingbufFull, cnt.LoadErrors, cnt.Nonlinear)
	}
	if !wantTruncated && cnt.Truncated != 0 {
		t.Errorf("truncated %d bytes", cnt.Truncated)
	}
	if int(cnt.Records) != segs || int(cnt.Bytes) != payload || int(cnt.Truncated) != missing {
		t.Errorf("counters say %d records, %d bytes, %d truncated; reader got %d, %d, %d",
			cnt.Records, cnt.Bytes, cnt.Truncated, segs, payload, missing)
	}
	if err := e.col.Err(); err != nil {
		t.Errorf("reader: %v", err)
	}
	return cnt
}

var modes = []bpf.Mode{bpf.ModeXDP, bpf.ModeTC}

func TestLiveRedisBenchmark(t *testing.T) {
	p, srv := newEnv(t)
	const n, keyspace = 20000, 1000
	for _, mode := range modes {
		for _, pipe := range []int{1, 16} {
			t.Run(fmt.Sprintf("%s/P%d", mode, pipe), func(t *testing.T) {
				e := attach(t, p, srv, mode, 0)
				out := netnstest.RedisBenchmark(t, srv, n, pipe, keyspace)
				t.Log(strings.TrimSpace(out))
				e.check(t, false)
				data, gap := e.col.ToServer(srv)
				if got := netnstest.CountGets(data); got != n || gap != 0 {
					t.Errorf("reassembled %d GETs with %d gap bytes, want %d and 0", got, gap, n)
				}
			})
		}
	}
}

// TestLiveExactBytes checks byte-exact streams: a connection opened before
// the capture started (mid-stream join), and go-redis with known keys.
func TestLiveExactBytes(t *testing.T) {
	p, srv := newEnv(t)
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			pre, err := net.Dial("tcp", srv.String())
			if err != nil {
				t.Fatal(err)
			}
			defer pre.Close()
			rd := bufio.NewReader(pre)
			roundTrip := func(cmd []byte) {
				if _, err := pre.Write(cmd); err != nil {
					t.Fatal(err)
				}
				if _, err := rd.ReadString('\n'); err != nil {
					t.Fatal(err)
				}
			}
			roundTrip(netnstest.RESP("SET", "before", "1"))

			e := attach(t, p, srv, mode, 0)
			var want []byte
			for i := range 50 {
				cmd := netnstest.RESP("GET", "pre:"+strconv.Itoa(i))
				want = append(want, cmd...)
				roundTrip(cmd)
			}
			preKey := netnstest.FlowKey{Src: netip.MustParseAddrPort(pre.LocalAddr().String()), Dst: srv}
			e.col.WaitStream(t, preKey, len(want), 30*time.Second)
			if got, gap := e.col.Stream(preKey); string(got) != string(want) || gap != 0 {
				t.Errorf("pre-attach connection: got %d bytes (gap %d), want %d: %q", len(got), gap, len(want), got)
			}

			rc := redis.NewClient(&redis.Options{Addr: srv.String(), PoolSize: 1, Protocol: 2, DisableIdentity: true})
			defer rc.Close()
			ctx := context.Background()
			for i := range 100 {
				rc.Get(ctx, "item:"+strconv.Itoa(i%10))
			}
			e.check(t, false)
			all, gap := e.col.ToServer(srv)
			if gets := netnstest.CountGets(all); gets != 150 || gap != 0 {
				t.Errorf("got %d GETs with gap %d, want 150 and 0", gets, gap)
			}
			for i := range 10 {
				key := netnstest.RESP("get", "item:"+strconv.Itoa(i)) // go-redis lowercases
				if c := strings.Count(string(all), string(key)); c != 10 {
					t.Errorf("GET item:%d seen %d times, want 10", i, c)
				}
			}
		})
	}
}

// TestLiveGSO sends large values so TC sees GSO super-packets (the veth
// passes the sender's 64 KiB TSO skbs through whole), checks they are copied
// whole, then lowers the copy limit and checks truncation is reported.
func TestLiveGSO(t *testing.T) {
	p, srv := newEnv(t)
	value := strings.Repeat("v", 300_000)
	for _, tc := range []struct {
		name    string
		maxCopy uint32
	}{{"whole", 0}, {"truncated", 8192}} {
		t.Run(tc.name, func(t *testing.T) {
			e := attach(t, p, srv, bpf.ModeTC, tc.maxCopy)
			conn, err := net.Dial("tcp", srv.String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var want []byte
			rd := bufio.NewReader(conn)
			for i := range 5 {
				cmd := netnstest.RESP("SET", "big:"+strconv.Itoa(i), value)
				want = append(want, cmd...)
				if _, err := conn.Write(cmd); err != nil {
					t.Fatal(err)
				}
				if _, err := rd.ReadString('\n'); err != nil {
					t.Fatal(err)
				}
			}
			key := netnstest.FlowKey{Src: netip.MustParseAddrPort(conn.LocalAddr().String()), Dst: srv}
			e.col.WaitStream(t, key, len(want), 30*time.Second)
			cnt := e.check(t, tc.maxCopy != 0)
			got, holes, missing := e.col.StreamGaps(key)
			gap := holes + missing
			if tc.maxCopy == 0 {
				if string(got) != string(want) || gap != 0 {
					t.Errorf("got %d bytes with gap %d, want %d exact", len(got), gap, len(want))
				}
				if cnt.Records*1500 > uint64(len(want))+cnt.Records*200 {
					t.Errorf("%d records for %d bytes: no super-packets seen", cnt.Records, len(want))
				}
				return
			}
			if cnt.Truncated == 0 {
				t.Fatal("nothing truncated with an 8 KiB copy limit")
			}
			// Every byte is either copied or reported missing, none lost.
			// The kernel counts a truncated byte once per transmission, so
			// a retransmitted segment (the server reads slowly on a loaded
			// machine) makes its counter exceed the stream's missing bytes,
			// each counted once.
			if holes != 0 || len(got)+missing != len(want) || missing > int(cnt.Truncated) {
				t.Errorf("got %d bytes + %d reported missing + %d never seen for %d sent; kernel reported %d truncated",
					len(got), missing, holes, len(want), cnt.Truncated)
			}
		})
	}
}

// progIDs lists the IDs of an attachment's programs.
func progIDs(t *testing.T, a *bpf.Attachment) []int {
	var ids []int
	for _, prog := range a.Programs() {
		info, err := prog.Info()
		if err != nil {
			t.Fatal(err)
		}
		id, _ := info.ID()
		ids = append(ids, int(id))
	}
	return ids
}

// assertAttached checks bpftool lists a bpf_link for each program: the
// attachments the kernel removes when their last fd closes.
func assertAttached(t *testing.T, ids []int) {
	t.Helper()
	netnstest.Need(t, "bpftool")
	linked := linkedProgs(t)
	for _, id := range ids {
		if !linked[id] {
			t.Errorf("no bpf_link for prog %d", id)
		}
	}
}

// linkedProgs returns the program IDs bpftool lists bpf_links for.
func linkedProgs(t *testing.T) map[int]bool {
	t.Helper()
	// bpftool walks every link in the system and fails when one vanishes
	// under it, which BPF tests of other packages running in parallel
	// cause: retry before calling it a failure.
	var out []byte
	var err error
	for try := 0; try < 20; try++ {
		if out, err = exec.Command("bpftool", "link", "show").CombinedOutput(); err == nil {
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("bpftool link show: %v: %s", err, out)
	}
	ids := map[int]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "prog" {
				id, _ := strconv.Atoi(f[i+1])
				ids[id] = true
			}
		}
	}
	return ids
}

// assertDetached waits until none of ids is loaded and nothing is attached
// to the namespace's veth.
func assertDetached(t *testing.T, p *netnstest.Pair, ids []int) {
	t.Helper()
	netnstest.Need(t, "bpftool")
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []string
		for _, id := range ids {
			if exec.Command("bpftool", "prog", "show", "id", strconv.Itoa(id)).Run() == nil {
				left = append(left, "prog "+strconv.Itoa(id))
			}
		}
		linked := linkedProgs(t)
		for _, id := range ids {
			if linked[id] {
				left = append(left, "bpftool link: prog "+strconv.Itoa(id))
			}
		}
		out, _ := exec.Command("ip", "-n", p.NS, "link", "show", p.NSIface).CombinedOutput()
		if strings.Contains(string(out), "xdp") {
			left = append(left, "ip link: "+string(out))
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still attached: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDetachOnClose(t *testing.T) {
	p, srv := newEnv(t)
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			e := attach(t, p, srv, mode, 0)
			ids := progIDs(t, e.att)
			assertAttached(t, ids)
			if err := e.col.Stop(); err != nil {
				t.Fatal(err)
			}
			assertDetached(t, p, ids)
		})
	}
}

// TestDetachOnSIGKILL re-runs this test binary as a child that attaches and
// waits; the child is SIGKILLed and nothing of it may stay attached.
func TestDetachOnSIGKILL(t *testing.T) {
	if ns := os.Getenv("HOTSNIFF_CHILD_NS"); ns != "" {
		childAttach(ns, os.Getenv("HOTSNIFF_CHILD_IFACE"), bpf.Mode(os.Getenv("HOTSNIFF_CHILD_MODE")))
		return
	}
	p, _ := newEnv(t)
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestDetachOnSIGKILL$", "-test.count=1")
			cmd.Env = append(os.Environ(), "HOTSNIFF_CHILD_NS="+p.NS, "HOTSNIFF_CHILD_IFACE="+p.NSIface,
				"HOTSNIFF_CHILD_MODE="+string(mode))
			cmd.Stderr = os.Stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			var ids []int
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if f, ok := strings.CutPrefix(sc.Text(), "ATTACHED "); ok {
					for _, s := range strings.Fields(f) {
						id, _ := strconv.Atoi(s)
						ids = append(ids, id)
					}
					break
				}
			}
			if len(ids) == 0 {
				t.Fatal("child did not attach")
			}
			assertAttached(t, ids)
			if err := cmd.Process.Signal(os.Kill); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			assertDetached(t, p, ids)
		})
	}
}

func childAttach(ns, iface string, mode bpf.Mode) {
	p := &netnstest.Pair{NS: ns}
	c, err := bpf.Open(bpf.Config{Ports: []uint16{6379}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var a *bpf.Attachment
	if err := p.Do(func() error { a, err = c.Attach(iface, mode); return err }); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var ids []string
	for _, prog := range a.Programs() {
		info, _ := prog.Info()
		id, _ := info.ID()
		ids = append(ids, strconv.Itoa(int(id)))
	}
	fmt.Println("ATTACHED " + strings.Join(ids, " "))
	// Keep the capture reachable: unreachable, the garbage collector may
	// finalize its descriptors and detach it before the parent looks.
	childKeep = []any{c, a}
	select {} // wait for SIGKILL
}

var childKeep []any
