package detect

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/event"
)

// kernelSim plays the capture programs with in-kernel counting: every read
// is added to the bucket counts of its kernel sub-window, and only reads in
// a located bucket reach the detector (flagged as counted in the kernel).
type kernelSim struct {
	d        *Detector
	buckets  int
	sub      int64 // kernel sub-window (ns)
	phase    int64 // kernel sub-windows start at phase mod sub
	ep       int64 // current kernel sub-window
	counts   []uint32
	located  []uint64
	copied   int
	reads    int
	feedKern bool // call KernelCounts at each kernel sub-window
	complete func(ep int64) bool
	// lose, when set, says the copy of a read of key is lost on its way
	// (a connection shed, a record dropped) after the kernel counted it,
	// and nothing reports the loss.
	lose func(key string) bool
	tick bool // Tick the detector after each kernel sub-window, as the pipeline does
	// size, when set, is the reply size of a read of key (0: none): the
	// programs count it in units of KernelByteUnit, rounded up, into
	// bcounts, and copy the reply with its read when the read is copied.
	size    func(key string) uint64
	bcounts []uint32
	bidx    []uint32
}

func newKernelSim(d *Detector) *kernelSim {
	return newKernelSimBuckets(d, d.Config().Buckets)
}

// newKernelSimBuckets counts b buckets in the kernel (at least the
// detector's), as the programs do (bpf.KernelBuckets).
func newKernelSimBuckets(d *Detector, b int) *kernelSim {
	return &kernelSim{d: d, buckets: b, sub: d.sub, phase: int64(37 * time.Millisecond), counts: make([]uint32, b),
		located: make([]uint64, (b+63)/64), feedKern: true, complete: func(int64) bool { return true }}
}

func (k *kernelSim) read(ts int64, key string) {
	ep := floorDiv(ts-k.phase, k.sub)
	if k.ep == 0 {
		k.ep = ep
	}
	for k.ep < ep {
		// The pipeline reads the sub-window that ended.
		start := k.ep*k.sub + k.phase
		if k.feedKern {
			if k.bcounts != nil {
				k.bidx = k.bidx[:0]
				for b, v := range k.bcounts {
					if v != 0 {
						k.bidx = append(k.bidx, uint32(b))
					}
				}
				k.d.KernelByteCountsAt(start, start+k.sub, k.bcounts, k.bidx, KernelByteUnit, k.complete(k.ep))
			}
			copy(k.located, k.d.KernelCounts(start, start+k.sub, k.counts, k.complete(k.ep)))
		}
		clear(k.counts)
		clear(k.bcounts)
		k.ep++
		if k.tick {
			k.d.Tick(start + k.sub)
		}
	}
	k.reads++
	f := decode.Flow{Server: srvA, Proto: decode.ProtoRedis, TS: ts, KernelCounted: true}
	h := Identity(srvA, decode.ProtoRedis, 0, []byte(key))
	b := Bucket(h, k.buckets)
	k.counts[b]++
	var size uint64
	if k.size != nil {
		if k.bcounts == nil {
			k.bcounts = make([]uint32, k.buckets)
		}
		size = k.size(key)
		k.bcounts[b] += uint32((size + KernelByteUnit - 1) / KernelByteUnit)
	}
	if k.located[b/64]&(1<<(b%64)) == 0 {
		return // counted in the kernel only
	}
	if k.lose != nil && k.lose(key) {
		return
	}
	k.copied++
	dk := decode.Key{Bytes: []byte(key), Weight: 1}
	k.d.Key(&f, &decode.Request{Op: "GET"}, dk)
	if size > 0 {
		f.TS += 50_000 // the reply 50 µs later
		k.d.ReplyKey(&f, 0, dk, size)
	}
}

// run reads a hot key at hotQPS and nCold keys at coldQPS each, evenly,
// from t0 to t1.
func (k *kernelSim) run(t0, t1 time.Duration, hotQPS float64, nCold int, coldQPS float64) {
	total := hotQPS + float64(nCold)*coldQPS
	step := int64(1e9 / total)
	hotEvery := int(total / hotQPS)
	i := 0
	for ts := int64(t0); ts < int64(t1); ts += step {
		if hotQPS > 0 && i%hotEvery == 0 {
			k.read(base+ts, "hot")
		} else {
			k.read(base+ts, fmt.Sprintf("cold:%d", i%nCold))
		}
		i++
	}
}

// TestKernelStage1: with the bucket counts coming from the kernel and only
// located buckets' reads copied, a key at 2× the threshold is found with
// its true rate, keys at a tenth of it are not, and most reads never reach
// user space.
func TestKernelStage1(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T})
	k := newKernelSim(d)
	k.run(0, 3*time.Second, 2*T, 2000, 5)
	if rec.count("hot", "hot") == 0 {
		t.Fatalf("hot key not found; events %v", rec.ev)
	}
	for _, e := range rec.ev {
		if string(e.Key) != "hot" {
			t.Fatalf("cold key reported: %+v", e)
		}
	}
	hs := d.HotSet()
	if len(hs) != 1 || hs[0].QPS < 1.9*T || hs[0].QPS > 2.1*T {
		t.Fatalf("hot set %+v, want the key at 2×", hs)
	}
	if frac := float64(k.copied) / float64(k.reads); frac > 0.35 {
		t.Errorf("%d of %d reads copied (%.0f%%), want most left in the kernel", k.copied, k.reads, 100*frac)
	}
	t.Logf("%d of %d reads reached user space", k.copied, k.reads)
	if hh := d.HotHashes(nil); len(hh) != 1 || hh[0] != Identity(srvA, decode.ProtoRedis, 0, []byte("hot")) {
		t.Fatalf("HotHashes %x", hh)
	}
	// The key stops: cold within a window and a sub-window of evidence.
	k.run(3*time.Second, 5*time.Second, 0, 2000, 5)
	if got := rec.of("hot"); got[len(got)-1] != "cold" {
		t.Fatalf("events %v, want cold after the key stopped", got)
	}
}

// TestKernelStage1FineBuckets: random reads whose total rate puts every
// detector bucket over the locate trigger locate none of the kernel's finer
// buckets, so they stay in the kernel, and a hot key among them is still
// found at its true rate. (With the kernel counting the detector's 64
// buckets, every read was copied.)
func TestKernelStage1FineBuckets(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T, Buckets: 64})
	k := newKernelSimBuckets(d, 65536)
	// 3000 keys at 10/s: 470/s per detector bucket, about twice the
	// trigger; 0.5/s per kernel bucket.
	k.run(0, 3*time.Second, 2*T, 3000, 10)
	for _, e := range rec.ev {
		if string(e.Key) != "hot" {
			t.Fatalf("cold key reported: %+v", e)
		}
	}
	hs := d.HotSet()
	if len(hs) != 1 || hs[0].QPS < 1.9*T || hs[0].QPS > 2.1*T {
		t.Fatalf("hot set %+v, want the key at 2×", hs)
	}
	// The hot key's reads (2000 of 32 000 a second) and little else.
	if frac := float64(k.copied) / float64(k.reads); frac > 0.08 {
		t.Errorf("%d of %d reads copied (%.1f%%), want only the hot key's", k.copied, k.reads, 100*frac)
	}
	t.Logf("%d of %d reads reached user space", k.copied, k.reads)
}

// TestKernelStage1Needed: without the kernel's counts the detector sees
// only what is copied, and never locates the key: the counts are what
// stage 1 runs on.
func TestKernelStage1Needed(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T})
	k := newKernelSim(d)
	k.feedKern = false
	k.run(0, 3*time.Second, 2*T, 2000, 5)
	if rec.count("hot", "hot") != 0 || k.copied != 0 {
		t.Fatalf("found without kernel counts (%d copied): the simulation is wrong", k.copied)
	}
}

// TestKernelStage1Incomplete: a hot key whose kernel counts could not be
// read whole for a second stays hot (the reader fell behind past the
// kernel's slots), and the detector counts the gap.
func TestKernelStage1Incomplete(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T})
	k := newKernelSim(d)
	k.run(0, 2*time.Second, 2*T, 200, 5)
	if rec.count("hot", "hot") == 0 {
		t.Fatal("not hot")
	}
	// 2s-3s: the reader is late; the kernel counts are lost and, with
	// them, the located set: the programs stop copying the key.
	from := floorDiv(int64(2*time.Second)-k.phase, k.sub) + floorDiv(base, k.sub)
	to := floorDiv(int64(3*time.Second)-k.phase, k.sub) + floorDiv(base, k.sub)
	k.complete = func(ep int64) bool { return ep < from || ep >= to }
	lost := make([]uint64, len(k.located))
	k.feedKern = false
	copy(lost, k.located)
	clear(k.located)
	k.run(2*time.Second, 3*time.Second, 2*T, 200, 5)
	for ep := from; ep < to; ep++ {
		start := ep*k.sub + k.phase
		d.KernelCounts(start, start+k.sub, make([]uint32, k.buckets), false)
	}
	k.feedKern = true
	k.run(3*time.Second, 5*time.Second, 2*T, 200, 5)
	if n := rec.count("hot", "cold"); n != 0 {
		t.Fatalf("cold while the counts were unknown: %v", rec.of("hot"))
	}
	if st := d.Stats(); st.IncompleteSpans == 0 || st.ColdHeld == 0 {
		t.Fatalf("stats %+v: want incomplete spans and held verdicts", st)
	}
}

// TestKernelStage1UnseenNotCold: a hot key whose copies stop reaching
// user space while the kernel still counts its reads (its connections'
// handshakes were shed, and the stream layer cannot confirm them: no loss
// is reported) stays hot: the kernel's count of its bucket is evidence of
// demand, and user space's silence is not evidence of none. When the
// kernel's count falls too, it turns cold; and when another key of the
// same kernel bucket is what keeps the bucket's count up, user space saw
// that key's reads, and the hot key turns cold on its own.
func TestKernelStage1UnseenNotCold(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T})
	k := newKernelSimBuckets(d, 65536)
	k.tick = true
	k.run(0, 2*time.Second, 2*T, 200, 5)
	if rec.count("hot", "hot") == 0 {
		t.Fatal("not hot")
	}
	held := d.Stats().ColdHeld
	k.lose = func(key string) bool { return key == "hot" }
	k.run(2*time.Second, 4*time.Second, 2*T, 200, 5)
	if n := rec.count("hot", "cold"); n != 0 {
		t.Fatalf("cold while the kernel counted the key at 2× and only its copies were lost: %v", rec.of("hot"))
	}
	if d.Stats().ColdHeld == held {
		t.Fatal("no cold verdict held: the test does not exercise the kernel's evidence")
	}
	// The key stops: the kernel's count falls, and the verdict comes.
	k.run(4*time.Second, 6*time.Second, 0, 200, 5)
	if got := rec.of("hot"); len(got) == 0 || got[len(got)-1] != "cold" {
		t.Fatalf("events %v, want cold once the kernel counts no reads either", got)
	}
}

func TestKernelStage1UnseenOtherKey(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T})
	k := newKernelSimBuckets(d, 65536)
	hb := Bucket(Identity(srvA, decode.ProtoRedis, 0, []byte("hot")), k.buckets)
	other := ""
	for i := 0; other == ""; i++ {
		if c := fmt.Sprintf("twin:%d", i); Bucket(Identity(srvA, decode.ProtoRedis, 0, []byte(c)), k.buckets) == hb {
			other = c
		}
	}
	k.tick = true
	k.run(0, 2*time.Second, 2*T, 200, 5)
	if rec.count("hot", "hot") == 0 {
		t.Fatal("not hot")
	}
	// The hot key stops; a key of its kernel bucket is read at 0.85× the
	// threshold (above the cold line, 0.7×), and user space sees all of it.
	rate := 0.85 * T
	step := int64(1e9 / rate)
	for ts := int64(2 * time.Second); ts < int64(4*time.Second); ts += step {
		k.read(base+ts, other)
		k.read(base+ts+step/2, fmt.Sprintf("cold:%d", ts/step%200))
	}
	if got := rec.of("hot"); len(got) == 0 || got[len(got)-1] != "cold" {
		t.Fatalf("events %v, want cold: the bucket's other reads were seen, the key's own demand is gone", got)
	}
	if n := rec.count(other, "hot"); n != 0 {
		t.Fatalf("%s reported hot at 0.85× the threshold", other)
	}
}

// TestKernelStage1Fallbacks: reads the programs could not count (a key
// over their length limit, split commands) reach the detector uncounted
// and are counted into stage 1 in user space, beside the kernel's counts:
// such a key is found too, and its rate is its true rate.
func TestKernelStage1Fallbacks(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T})
	k := newKernelSim(d)
	long := string(make([]byte, 300))
	step := int64(1e9 / (2 * T))
	for ts := int64(0); ts < int64(3*time.Second); ts += step {
		// The kernel's sub-windows move on with the other traffic.
		k.read(base+ts, fmt.Sprintf("cold:%d", ts/step%2000))
		f := decode.Flow{Server: srvA, Proto: decode.ProtoRedis, TS: base + ts}
		d.Key(&f, &decode.Request{Op: "GET"}, decode.Key{Bytes: []byte(long), Weight: 1})
	}
	hs := d.HotSet()
	if len(hs) != 1 || string(hs[0].Key) != long || hs[0].QPS < 1.9*T || hs[0].QPS > 2.1*T {
		t.Fatalf("hot set %+v, want the long key at 2×; events %d", hs, len(rec.ev))
	}
}

// BenchmarkKernelCounts: one kernel sub-window of counts into the detector,
// 65536 kernel buckets of which about 6000 have reads (random keys at
// ~50 000 reads/s, a sub-window of 125 ms).
func BenchmarkKernelCounts(b *testing.B) {
	d, err := New(Config{HotQPS: T}, nil)
	if err != nil {
		b.Fatal(err)
	}
	counts := make([]uint32, 65536)
	var idx []uint32
	for i := range 6000 {
		b := (i * 7919) % 65536
		counts[b]++
		idx = append(idx, uint32(b))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		d.KernelCountsAt(base+int64(i)*d.sub, base+int64(i+1)*d.sub, counts, idx, true)
	}
}

// TestKernelBucketNoHysteresis: a kernel bucket is located while its reads
// over the window reach the trigger, and no longer once they fall below
// it (a detector bucket stays located down to half the trigger). Random
// keys meeting in one bucket near the trigger otherwise kept it located
// for good once noise took it over, and every read of theirs was copied.
func TestKernelBucketNoHysteresis(t *testing.T) {
	d, _ := newDet(t, Config{HotQPS: T})
	const n = 65536
	trig := d.def.trig
	counts := make([]uint32, n)
	const b = 12345
	located := func(bits []uint64) bool { return bits[b/64]&(1<<(b%64)) != 0 }
	start := int64(base)
	feed := func(per uint32) []uint64 {
		// numSub sub-windows of per reads each: the whole ring.
		var bits []uint64
		for range numSub {
			clear(counts)
			counts[b] = per
			bits = d.KernelCounts(start, start+d.sub, counts, true)
			start += d.sub
		}
		return bits
	}
	if bits := feed(uint32(trig/numSub) + 1); !located(bits) {
		t.Fatalf("bucket at %d reads over the window (trigger %d) not located", (trig/numSub+1)*numSub, trig)
	}
	// Three quarters of the trigger: above the detector's hysteresis line.
	if bits := feed(uint32(3 * trig / 4 / numSub)); located(bits) {
		t.Fatalf("bucket at %d reads over the window (trigger %d) still located", 3*trig/4/numSub*numSub, trig)
	}
	if bits := feed(uint32(trig/numSub) + 1); !located(bits) {
		t.Fatalf("bucket back at the trigger not located again")
	}
}

// kernelBytesSim reads "hot" (the run's hot key) with 100 kB replies and
// every other key with 200-byte ones.
func kernelBytesSim(d *Detector) *kernelSim {
	k := newKernelSimBuckets(d, 65536)
	k.size = func(key string) uint64 {
		if key == "hot" {
			return 100_000
		}
		return 200
	}
	return k
}

// TestKernelStage1Bytes: with the reply bytes counted in the kernel too, a
// key hot by bandwidth only (50 reads/s of 100 kB, at 5× a 1 MB/s
// threshold and a twentieth of the reads threshold) is located on its
// bytes, its reads and replies copied, and found at its true rates; the
// 2000 keys beside it at 5 reads/s of 200 bytes stay in the kernel.
// Without the byte counts it is never found: its reads locate nothing.
func TestKernelStage1Bytes(t *testing.T) {
	for _, bytes := range []bool{true, false} {
		t.Run(fmt.Sprint("bytes=", bytes), func(t *testing.T) {
			d, rec := newDet(t, Config{HotQPS: T, HotBytes: 1e6, RefreshEvery: 250 * time.Millisecond})
			k := kernelBytesSim(d)
			k.tick = true
			if !bytes {
				k.size = nil
			}
			k.run(0, 3*time.Second, 50, 2000, 5)
			e, ok := lastHot(rec, "hot")
			if !bytes {
				if ok {
					t.Fatalf("found without the kernel's byte counts: %+v", e)
				}
				return
			}
			if !ok {
				t.Fatalf("not found; events %v", rec.ev)
			}
			if e.Reason != event.ReasonBytes || math.Abs(e.BytesPS-5e6)/5e6 > 0.1 || math.Abs(e.QPS-50)/50 > 0.1 {
				t.Errorf("event %+v, want reason bytes at ~5e6 B/s and ~50/s", e)
			}
			for _, ev := range rec.ev {
				if string(ev.Key) != "hot" {
					t.Errorf("another key reported: %+v", ev)
				}
			}
			if frac := float64(k.copied) / float64(k.reads); frac > 0.1 {
				t.Errorf("%d of %d reads copied, want most left in the kernel", k.copied, k.reads)
			}
			t.Logf("%d of %d reads reached user space", k.copied, k.reads)
			k.run(3*time.Second, 5*time.Second, 0, 2000, 5)
			if got := rec.of("hot"); got[len(got)-1] != "cold" {
				t.Fatalf("events %v, want cold after the key stopped", got)
			}
		})
	}
}

// TestKernelStage1BytesUnseenNotCold: a key hot by bandwidth whose copies
// are lost (while the kernel still counts its reads and reply bytes) is
// not turned cold: the kernel's byte count is evidence of its demand. Once
// its reads stop, the verdict comes.
func TestKernelStage1BytesUnseenNotCold(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T, HotBytes: 1e6})
	k := kernelBytesSim(d)
	k.tick = true
	k.run(0, 2*time.Second, 50, 200, 5)
	if _, ok := lastHot(rec, "hot"); !ok {
		t.Fatal("not hot")
	}
	held := d.Stats().ColdHeldKernel
	k.lose = func(key string) bool { return key == "hot" }
	k.run(2*time.Second, 4*time.Second, 50, 200, 5)
	if n := rec.count("hot", "cold"); n != 0 {
		t.Fatalf("cold while the kernel counted its bytes at 5× and only the copies were lost: %v", rec.of("hot"))
	}
	if d.Stats().ColdHeldKernel == held {
		t.Fatal("no verdict held on the kernel's counts: the test does not exercise them")
	}
	k.run(4*time.Second, 6*time.Second, 0, 200, 5)
	if got := rec.of("hot"); len(got) == 0 || got[len(got)-1] != "cold" {
		t.Fatalf("events %v, want cold once the kernel counts no bytes either", got)
	}
}

// TestKernelStage1BytesOtherKey: a bytes-hot key stops while a key of its
// kernel bucket goes on at 0.8× the bytes threshold (above the cold line),
// all of it seen by user space: the bucket's bytes are the other key's, so
// the hot key turns cold, and the other key is not reported.
func TestKernelStage1BytesOtherKey(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T, HotBytes: 1e6})
	k := kernelBytesSim(d)
	hb := Bucket(Identity(srvA, decode.ProtoRedis, 0, []byte("hot")), k.buckets)
	other := ""
	for i := 0; other == ""; i++ {
		if c := fmt.Sprintf("twin:%d", i); Bucket(Identity(srvA, decode.ProtoRedis, 0, []byte(c)), k.buckets) == hb {
			other = c
		}
	}
	size := k.size
	k.size = func(key string) uint64 {
		if key == other {
			return 20_000
		}
		return size(key)
	}
	k.tick = true
	k.run(0, 2*time.Second, 50, 200, 5)
	if _, ok := lastHot(rec, "hot"); !ok {
		t.Fatal("not hot")
	}
	step := int64(1e9 / 40) // 40 reads/s of 20 kB: 0.8 MB/s
	for ts := int64(2 * time.Second); ts < int64(4*time.Second); ts += step {
		k.read(base+ts, other)
		k.read(base+ts+step/2, fmt.Sprintf("cold:%d", ts/step%200))
	}
	if got := rec.of("hot"); len(got) == 0 || got[len(got)-1] != "cold" {
		t.Fatalf("events %v, want cold: the bucket's other bytes were seen, the key's own are gone", got)
	}
	if n := rec.count(other, "hot"); n != 0 {
		t.Fatalf("%s reported hot at 0.8× the bytes threshold", other)
	}
}
