package detect

import (
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"strconv"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
)

// zipfKeys returns n keys drawn from Zipf(s) over m keys (inverse CDF).
func zipfKeys(n, m int, s float64, seed uint64) [][]byte {
	cdf := make([]float64, m)
	var sum float64
	for k := range cdf {
		sum += math.Pow(float64(k+1), -s)
		cdf[k] = sum
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	keys := make([][]byte, n)
	for i := range keys {
		u := rng.Float64() * sum
		k := sort.SearchFloat64s(cdf, u)
		keys[i] = strconv.AppendInt([]byte("item:"), int64(k), 10)
	}
	return keys
}

// BenchmarkObserve feeds a Zipf(0.99) mix over 1M keys at 1M reads/s of
// packet time (threshold 2000/s: ~30 hot keys, many located buckets).
// default-sampled is the default detector under flow sampling at 0.3 (each
// read scaled by 1/0.3 with stochastic rounding), with the threshold raised
// as much so that the same keys are hot: the cost of scaling alone.
// default-kernel is the default detector with in-kernel counting: once the
// hot set formed, every read comes flagged as counted in the kernel, as the
// copies of located buckets do (stage 1 then takes no count from them, and
// reads in a hot key's kernel bucket are counted on its entry).
func BenchmarkObserve(b *testing.B) {
	keys := zipfKeys(1<<16, 1_000_000, 0.99, 1)
	for _, name := range []string{DetectorDefault, DetectorTair, "default-sampled", "default-kernel", "default-bytes"} {
		b.Run(name, func(b *testing.B) {
			det, rate, hb := name, 1.0, 0.0
			switch name {
			case "default-sampled":
				det, rate = DetectorDefault, 0.3
			case "default-kernel":
				det = DetectorDefault
			case "default-bytes":
				// Every read answered, the bytes stage on: 4 MB/s of
				// replies a few thousand bytes long.
				det, hb = DetectorDefault, 4e6
			}
			d, err := New(Config{HotQPS: 2000 / rate, Detector: det, HotBytes: hb}, nil)
			if err != nil {
				b.Fatal(err)
			}
			d.SetSampleRate(rate)
			f := decode.Flow{Server: srvA, Proto: decode.ProtoRedis, TS: base}
			r := decode.Request{Op: "GET"}
			observe := func(i int) {
				k := decode.Key{Bytes: keys[i&(1<<16-1)], Weight: 1}
				d.Key(&f, &r, k)
				if hb > 0 {
					d.ReplyKey(&f, 0, k, uint64(1000+i&4095))
				}
			}
			for i := range 1 << 20 { // warm up: hot set formed
				f.TS += 1000
				observe(i)
			}
			if name == "default-kernel" {
				d.KernelCounts(f.TS-d.sub, f.TS, make([]uint32, 1<<16), true)
				f.KernelCounted = true
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; b.Loop(); i++ {
				f.TS += 1000
				observe(i)
			}
			// On a shared machine wall time includes waiting for a core;
			// CPU time per op is what one core can sustain.
			cpu := float64(cpuTime()-cpu0) / float64(b.N)
			b.ReportMetric(cpu, "cpu-ns/op")
			b.ReportMetric(1e3/cpu, "Mobs/cpu-s")
		})
	}
}

// TestMemory10M feeds 10M distinct keys and reports the heap the detector
// holds: it must not depend on the number of keys. Run by hand:
//
//	HOTSNIFF_MEMTEST=1 go test -run Memory10M -v ./detect/
func TestMemory10M(t *testing.T) {
	if os.Getenv("HOTSNIFF_MEMTEST") == "" {
		t.Skip("set HOTSNIFF_MEMTEST=1 (takes a few seconds)")
	}
	for _, det := range []string{DetectorDefault, DetectorTair} {
		var m0, m1, m2 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		d, err := New(Config{HotQPS: 2000, Detector: det}, nil)
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		f := decode.Flow{Server: srvA, Proto: decode.ProtoRedis, TS: base}
		r := decode.Request{Op: "GET"}
		buf := make([]byte, 0, 32)
		hot := []byte("hot-key")
		for i := range 10_000_000 {
			f.TS += 100 // 10M reads/s
			buf = strconv.AppendInt(append(buf[:0], "distinct:"...), int64(i), 10)
			d.Key(&f, &r, decode.Key{Bytes: buf, Weight: 1})
			if i%100 == 0 { // 100k/s: one hot key keeps the hot path busy
				d.Key(&f, &r, decode.Key{Bytes: hot, Weight: 1})
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&m2)
		t.Logf("%s: HeapInuse after New %+d KiB, after 10M distinct keys %+d KiB more; hot %d",
			det, (int64(m1.HeapInuse)-int64(m0.HeapInuse))/1024, (int64(m2.HeapInuse)-int64(m1.HeapInuse))/1024, d.Stats().HotKeys)
		runtime.KeepAlive(d)
	}
}

// BenchmarkObserveWarm is the perf harness's live workload (redis-benchmark
// -r 10000 at ~650k GETs/s, --hot-qps 1000): 10,000 keys read uniformly at
// 65/s each, none hot, but every bucket near its locate trigger, so most
// observations go through a located bucket's slots.
func BenchmarkObserveWarm(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 0))
	keys := make([][]byte, 1<<16)
	for i := range keys {
		keys[i] = strconv.AppendInt([]byte("key:"), int64(rng.IntN(10000)), 10)
	}
	d, err := New(Config{HotQPS: 1000}, nil)
	if err != nil {
		b.Fatal(err)
	}
	f := decode.Flow{Server: srvA, Proto: decode.ProtoRedis, TS: base}
	r := decode.Request{Op: "GET"}
	const gap = 1540 // ns between reads: 650k/s
	for i := range 1 << 21 {
		f.TS += gap
		d.Key(&f, &r, decode.Key{Bytes: keys[i&(1<<16-1)], Weight: 1})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		f.TS += gap
		d.Key(&f, &r, decode.Key{Bytes: keys[i&(1<<16-1)], Weight: 1})
	}
	b.ReportMetric(float64(d.Stats().Located)/float64(b.N), "located/op")
}
