package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/decode"
)

// countKeys feeds n distinct keys ("key:%08d", 12 bytes) to s, each read
// twice, in namespace 0 of redis.
func countKeys(s decode.Sink, n int) {
	f := &decode.Flow{Proto: decode.ProtoRedis}
	r := &decode.Request{}
	var kb []byte
	for pass := 0; pass < 2; pass++ {
		for i := range n {
			kb = fmt.Appendf(kb[:0], "key:%08d", i)
			s.Key(f, r, decode.Key{Bytes: kb, Weight: 1})
		}
	}
}

// mapCount is the --count table as it was: a Go map of strings per (proto,
// ns), turned into a slice of rows to sort for output. Kept here to measure
// the compact table against it side by side.
type mapCount struct {
	decode.Discard
	m map[nsKey]map[string]*[2]uint64
}

type nsKey struct {
	proto decode.Proto
	ns    int32
}

type countRow struct {
	proto, ns, key string
	count, weight  uint64
}

func (c *mapCount) Request(*decode.Flow, *decode.Request) {}
func (c *mapCount) Error(*decode.Flow, string)            {}
func (c *mapCount) Key(f *decode.Flow, r *decode.Request, k decode.Key) {
	nk := nsKey{f.Proto, r.NS}
	m := c.m[nk]
	if m == nil {
		m = map[string]*[2]uint64{}
		c.m[nk] = m
	}
	v := m[string(k.Bytes)]
	if v == nil {
		v = new([2]uint64)
		m[string(k.Bytes)] = v
	}
	v[0]++
	v[1] += uint64(k.Weight)
}

func (c *mapCount) rows() []countRow {
	var rows []countRow
	for nk, m := range c.m {
		p, ns := nk.proto.String(), decode.NSString(nk.ns)
		for k, v := range m {
			rows = append(rows, countRow{p, ns, k, v[0], v[1]})
		}
	}
	return rows
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestCountMemory measures, per distinct key, what --count holds while
// counting (the table) and at its peak (the table plus what sorting the
// output adds), for the compact table and, side by side, for the Go map of
// strings it replaced. It fails if the compact table holds more than 64
// bytes per 12-byte key or its peak is not at least 3x below the map's.
// HOTSNIFF_COUNT_KEYS sets the number of keys (default 500000).
func TestCountMemory(t *testing.T) {
	n := 500_000
	if v, err := strconv.Atoi(os.Getenv("HOTSNIFF_COUNT_KEYS")); err == nil && v > 0 {
		n = v
	}
	per := func(b uint64) float64 { return float64(b) / float64(n) }

	base := heapInUse()
	c := newCountSink(0)
	countKeys(c, n)
	table := heapInUse() - base
	order := c.order()
	peak := heapInUse() - base
	runtime.KeepAlive(order)
	runtime.KeepAlive(c)
	order, c = nil, nil

	base = heapInUse()
	m := &mapCount{m: map[nsKey]map[string]*[2]uint64{}}
	countKeys(m, n)
	mTable := heapInUse() - base
	rows := m.rows()
	mPeak := heapInUse() - base
	runtime.KeepAlive(rows)
	runtime.KeepAlive(m)

	t.Logf("%d distinct 12-byte keys, bytes per key: compact table %.1f (peak with output order %.1f); Go map of strings %.1f (peak with output rows %.1f); peak ratio %.1fx",
		n, per(table), per(peak), per(mTable), per(mPeak), float64(mPeak)/float64(peak))
	if per(table) > 64 || float64(mPeak)/float64(peak) < 2 {
		t.Errorf("compact table %.1f B/key (peak %.1f), map %.1f (peak %.1f)", per(table), per(peak), per(mTable), per(mPeak))
	}
}

// TestCountTableOrder checks the compact table against a straightforward
// count: same totals, and the documented order (weight, count descending;
// proto, ns, key ascending as printed).
func TestCountTableOrder(t *testing.T) {
	c := newCountSink(0)
	type k struct {
		proto decode.Proto
		ns    int32
		key   string
	}
	want := map[k][2]uint64{}
	rng := rand.New(rand.NewPCG(1, 2))
	protos := []decode.Proto{decode.ProtoRedis, decode.ProtoMemcache, decode.ProtoTair}
	for range 200_000 {
		kk := k{protos[rng.IntN(3)], int32(rng.IntN(12)), "k" + strconv.Itoa(rng.IntN(5000))}
		if kk.proto == decode.ProtoMemcache {
			kk.ns = -1
		}
		if rng.IntN(50) == 0 {
			kk.key = "bin\x00\xff" + kk.key
		}
		w := uint32(1 + rng.IntN(3))
		write := rng.IntN(10) == 0
		c.Key(&decode.Flow{Proto: kk.proto}, &decode.Request{NS: kk.ns, Write: write}, decode.Key{Bytes: []byte(kk.key), Weight: w})
		if !write {
			v := want[kk]
			v[0]++
			v[1] += uint64(w)
			want[kk] = v
		}
	}
	var out bytes.Buffer
	bw := bufio.NewWriter(&out)
	c.write(bw)
	bw.Flush()
	lines := bytes.Split(bytes.TrimSuffix(out.Bytes(), []byte("\n")), []byte("\n"))
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d", len(lines), len(want))
	}
	var prev [][]byte
	for _, l := range lines {
		f := bytes.SplitN(l, []byte("\t"), 5)
		if prev != nil {
			pw, _ := strconv.ParseUint(string(prev[1]), 10, 64)
			cw, _ := strconv.ParseUint(string(f[1]), 10, 64)
			pc, _ := strconv.ParseUint(string(prev[0]), 10, 64)
			cc, _ := strconv.ParseUint(string(f[0]), 10, 64)
			ok := pw > cw || pw == cw && (pc > cc || pc == cc &&
				string(bytes.Join(prev[2:], []byte{0})) < string(bytes.Join(f[2:], []byte{0})))
			if !ok {
				t.Fatalf("out of order:\n%s\n%s", bytes.Join(prev, []byte("\t")), l)
			}
		}
		prev = f
	}
	// Every key's totals.
	got := map[string]bool{}
	for _, l := range lines {
		got[string(l)] = true
	}
	for kk, v := range want {
		line := fmt.Sprintf("%d\t%d\t%s\t%s\t%s", v[0], v[1], kk.proto, decode.NSString(kk.ns), decode.CountKey(kk.key))
		if !got[line] {
			t.Fatalf("missing %q", line)
		}
	}
}

// BenchmarkCountSink counts reads of keys already in the table (the common
// case) and of new keys.
func BenchmarkCountSink(b *testing.B) {
	f := &decode.Flow{Proto: decode.ProtoRedis}
	r := &decode.Request{}
	keys := make([][]byte, 1<<16)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "item:%d", i)
	}
	b.Run("seen", func(b *testing.B) {
		c := newCountSink(0)
		for _, k := range keys {
			c.Key(f, r, decode.Key{Bytes: k, Weight: 1})
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			c.Key(f, r, decode.Key{Bytes: keys[i&(len(keys)-1)], Weight: 1})
		}
	})
	b.Run("map-seen", func(b *testing.B) {
		c := &mapCount{m: map[nsKey]map[string]*[2]uint64{}}
		for _, k := range keys {
			c.Key(f, r, decode.Key{Bytes: k, Weight: 1})
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			c.Key(f, r, decode.Key{Bytes: keys[i&(len(keys)-1)], Weight: 1})
		}
	})
	b.Run("new", func(b *testing.B) {
		c := newCountSink(0)
		var kb []byte
		b.ReportAllocs()
		for i := range b.N {
			kb = strconv.AppendInt(kb[:0], int64(i), 10)
			c.Key(f, r, decode.Key{Bytes: kb, Weight: 1})
		}
	})
}

// writeKeysPcap writes a capture of one Redis connection sending GETs of n
// distinct 12-byte keys, twice each, 1000 pipelined per segment.
func writeKeysPcap(t *testing.T, path string, n int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	le := func(b []byte, v ...uint32) []byte {
		for _, x := range v {
			b = append(b, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
		}
		return b
	}
	w.Write(le(nil, 0xA1B2C3D4, 0x00040002, 0, 0, 262144, 1))
	seq := uint32(1000)
	var payload, frame []byte
	flush := func(ts uint32) {
		frame = frame[:0]
		frame = append(frame, make([]byte, 12)...) // MACs
		frame = append(frame, 0x08, 0x00)          // IPv4
		ipLen := 20 + 20 + len(payload)
		frame = append(frame, 0x45, 0, byte(ipLen>>8), byte(ipLen), 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2)
		frame = append(frame, 0xC3, 0x50, 0x18, 0xEB) // 50000 -> 6379
		frame = append(frame, byte(seq>>24), byte(seq>>16), byte(seq>>8), byte(seq), 0, 0, 0, 1, 0x50, 0x18, 0xFF, 0xFF, 0, 0, 0, 0)
		frame = append(frame, payload...)
		w.Write(le(nil, 1795000000+ts/1000, (ts%1000)*1000, uint32(len(frame)), uint32(len(frame))))
		w.Write(frame)
		seq += uint32(len(payload))
		payload = payload[:0]
	}
	var ts uint32
	for pass := 0; pass < 2; pass++ {
		for i := range n {
			payload = fmt.Appendf(payload, "*2\r\n$3\r\nGET\r\n$12\r\nkey:%08d\r\n", i)
			if (i+1)%1000 == 0 {
				ts++
				flush(ts)
			}
		}
		if len(payload) > 0 {
			ts++
			flush(ts)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestCountRSS runs the real CLI, `decode --count`, as a child process on
// a capture of HOTSNIFF_COUNT_RSS_KEYS distinct keys and reports its peak
// resident memory per key (the figure docs/cli.md states). It is a
// measurement, not run by default.
func TestCountRSS(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("HOTSNIFF_COUNT_RSS_KEYS"))
	if err != nil || n <= 0 {
		t.Skip("set HOTSNIFF_COUNT_RSS_KEYS=N to measure decode --count's peak RSS with N distinct keys")
	}
	bin := os.Getenv("HOTSNIFF_BIN") // another build to compare, e.g. before a change
	if bin == "" {
		bin = os.Args[0]
	}
	path := filepath.Join(t.TempDir(), "keys.pcap")
	writeKeysPcap(t, path, n)
	cmd := exec.Command(bin, "decode", "--count", "--progress", "never", path)
	cmd.Env = append(os.Environ(), "HOTSNIFF_TEST_MAIN=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	peak := watchPeak(cmd.Process.Pid)
	lines := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines++
	}
	err = cmd.Wait()
	rss := peak()
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.Bytes())
	}
	if lines != n {
		t.Fatalf("%d lines, want %d: %s", lines, n, stderr.Bytes())
	}
	t.Logf("%s decode --count, %d distinct 12-byte keys: peak RSS %.0f MB, %.0f bytes per key", filepath.Base(bin), n, float64(rss)/1e6, float64(rss)/float64(n))
}

// writeBigKeysPcap writes a gzip-compressed pcap of one connection reading
// n distinct keys of keyLen bytes, one GET per packet.
func writeBigKeysPcap(t *testing.T, path string, n, keyLen int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	w := bufio.NewWriterSize(zw, 1<<20)
	le := func(b []byte, v ...uint32) []byte {
		for _, x := range v {
			b = append(b, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
		}
		return b
	}
	w.Write(le(nil, 0xA1B2C3D4, 0x00040002, 0, 0, 262144, 1))
	seq := uint32(1000)
	key := bytes.Repeat([]byte("k"), keyLen)
	var frame []byte
	for i := range n {
		copy(key, fmt.Sprintf("%08d", i))
		payload := fmt.Appendf(nil, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", keyLen, key)
		frame = frame[:0]
		frame = append(frame, make([]byte, 12)...)
		frame = append(frame, 0x08, 0x00)
		ipLen := 20 + 20 + len(payload)
		frame = append(frame, 0x45, 0, byte(ipLen>>8), byte(ipLen), 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2)
		frame = append(frame, 0xC3, 0x50, 0x18, 0xEB)
		frame = append(frame, byte(seq>>24), byte(seq>>16), byte(seq>>8), byte(seq), 0, 0, 0, 1, 0x50, 0x18, 0xFF, 0xFF, 0, 0, 0, 0)
		frame = append(frame, payload...)
		w.Write(le(nil, 1795000000+uint32(i/1000), uint32(i%1000)*1000, uint32(len(frame)), uint32(len(frame))))
		w.Write(frame)
		seq += uint32(len(payload))
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCountBound: decode --count over 6,000 distinct 60 KB keys (360 MB of
// keys: unbounded, the table alone holds that) with --count-max-bytes 32 MiB
// keeps its peak RSS well under the keys' size (the rest is the process and
// the garbage collector's headroom: 64-203 MB measured, depending on load),
// counts the keys that fit exactly, and says in one line on stderr how many
// reads were left out.
func TestCountBound(t *testing.T) {
	const n, keyLen, bound = 6000, 60 << 10, 32 << 20
	path := filepath.Join(t.TempDir(), "big.pcap.gz")
	writeBigKeysPcap(t, path, n, keyLen)
	cmd := exec.Command(os.Args[0], "decode", "--count", "--count-max-bytes", strconv.Itoa(bound), "--progress", "never", path)
	cmd.Env = append(os.Environ(), "HOTSNIFF_TEST_MAIN=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	peak := watchPeak(cmd.Process.Pid)
	err := cmd.Wait()
	rss := peak()
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.Bytes())
	}
	lines := bytes.Count(stdout.Bytes(), []byte("\n"))
	var note string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.HasPrefix(l, "decode --count:") {
			note = l
		}
	}
	t.Logf("peak RSS %.0f MB; %d keys counted; %s", float64(rss)/1e6, lines, note)
	if lines == 0 || lines >= n || lines > bound/keyLen {
		t.Errorf("%d keys counted, want some but at most %d (the bound)", lines, bound/keyLen)
	}
	if want := fmt.Sprintf("%d reads (weight %d) of keys first seen after that", n-lines, n-lines); !strings.Contains(note, want) {
		t.Errorf("stderr note %q, want one saying %q", note, want)
	}
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if !strings.HasPrefix(l, "1\t1\tredis\t0\t") {
			t.Fatalf("line %.40q: want count 1 weight 1", l)
		}
	}
	if rss > 280<<20 {
		t.Errorf("peak RSS %d bytes: the table's bound is %d, the keys %d", rss, bound, n*keyLen)
	}
}

// watchPeak follows the peak resident memory of the running process pid
// until the returned function is called (after Wait), which returns it.
// Not the child's rusage: that of an exec'd child starts from the
// parent's peak (at exec the kernel keeps the high-water mark of the
// memory it replaced, and Go starts children sharing the parent's), so a
// test binary grown by the package's other tests read as a 478 MB child.
func watchPeak(pid int) func() int64 {
	peak := make(chan int64)
	stop := make(chan struct{})
	go func() {
		var hwm int64
		for {
			hwm = max(hwm, vmHWM(pid))
			select {
			case <-stop:
				peak <- hwm
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() int64 {
		close(stop)
		return <-peak
	}
}

// vmHWM is a running process's peak resident memory (VmHWM in
// /proc/PID/status, bytes), 0 once it has exited.
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	return statusKB(b, "VmHWM") << 10
}

// statusKB is a field of a /proc/PID/status file's contents, in kB (as
// "VmRSS:	  1234 kB"), 0 when absent.
func statusKB(status []byte, field string) int64 {
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb
			}
		}
	}
	return 0
}
