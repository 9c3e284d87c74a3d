package detect

import (
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/event"
)

// last returns the last event of type typ for key.
func (r *recorder) last(key, typ string) (event.Event, bool) {
	for i := len(r.ev) - 1; i >= 0; i-- {
		if string(r.ev[i].Key) == key && r.ev[i].Type == typ {
			return r.ev[i], true
		}
	}
	return event.Event{}, false
}

// TestWriteHot: the case, a key read 12k/s and written 4k/s, is
// published cacheable:false within milliseconds and then costs no
// invalidates; a key written slowly stays cacheable with one invalidate per
// write; a burst of writes to it is coalesced to one invalidate per gap
// plus the trailing one; when the write-hot key's writes stop it becomes
// cacheable again.
func TestWriteHot(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T})
	cfg := d.Config()
	if cfg.InvalidateGap != 10*time.Millisecond || cfg.LocalTTL != 50*time.Millisecond || cfg.UncacheableWrites != 1 {
		t.Fatalf("defaults: gap %v, local ttl %v, uncacheable writes %v", cfg.InvalidateGap, cfg.LocalTTL, cfg.UncacheableWrites)
	}
	// Both keys become hot on reads alone first.
	play(d, 0, time.Second, stream{key: "wh", qps: 12000}, stream{key: "warm", qps: 2000})
	if rec.count("wh", "hot") != 1 || rec.count("warm", "hot") != 1 {
		t.Fatalf("not hot: %v %v", rec.of("wh"), rec.of("warm"))
	}
	// 5 s of 4k writes/s to wh, 5 writes/s to warm.
	play(d, time.Second, 6*time.Second,
		stream{key: "wh", qps: 12000}, stream{key: "wh", qps: 4000, write: true},
		stream{key: "warm", qps: 2000}, stream{key: "warm", qps: 5, write: true})
	inv := rec.count("wh", "invalidate")
	// Before the verdict: W/2 = 400ms × 20/s = 8 writes, at most one
	// invalidate per 10ms gap, so 1 or 2. After it: none.
	if inv < 1 || inv > 2 {
		t.Fatalf("write-hot key: %d invalidates in 5s, want 1-2 (the cap before the verdict, none after)", inv)
	}
	var verdictAt time.Time
	for _, e := range rec.ev {
		if string(e.Key) == "wh" && e.Type == event.TypeHot && e.Uncacheable {
			verdictAt = e.TS
			break
		}
	}
	if verdictAt.IsZero() {
		t.Fatalf("write-hot key never published cacheable:false: %v", rec.of("wh"))
	}
	if lat := verdictAt.Sub(time.Unix(0, base+int64(time.Second))); lat > 5*time.Millisecond {
		t.Fatalf("verdict %v after the writes started", lat)
	}
	hs := d.HotSet()
	for _, e := range hs {
		switch string(e.Key) {
		case "wh":
			if !e.Uncacheable || e.WriteQPS < 3600 || e.WriteQPS > 4400 {
				t.Errorf("wh in hot set: cacheable %v write_qps %v, want false and ~4000", !e.Uncacheable, e.WriteQPS)
			}
		case "warm":
			if e.Uncacheable || e.WriteQPS < 3 || e.WriteQPS > 7 {
				t.Errorf("warm in hot set: cacheable %v write_qps %v, want true and ~5", !e.Uncacheable, e.WriteQPS)
			}
		}
	}
	if n := rec.count("warm", "invalidate"); n < 24 || n > 26 {
		t.Fatalf("slow-written key: %d invalidates for 25 writes", n)
	}
	// A burst: 10 writes 1.5ms apart (15ms). Coalesced to the first, the
	// one after the 10ms gap (at 10.5ms), and the trailing one for the
	// writes merged after it, sent at the first read after its gap.
	n0 := rec.count("warm", "invalidate")
	at := 6 * time.Second
	play(d, at, at+15*time.Millisecond, stream{key: "warm", qps: 1e3 / 1.5, write: true}, stream{key: "warm", qps: 2000})
	play(d, at+15*time.Millisecond, at+40*time.Millisecond, stream{key: "warm", qps: 2000})
	got := rec.count("warm", "invalidate") - n0
	if got != 3 {
		t.Fatalf("burst of 10 writes in 15ms: %d invalidates, want 3 (one per 10ms gap plus the trailing one)", got)
	}
	last, _ := rec.last("warm", "invalidate")
	if lastW := time.Unix(0, base+int64(at+13500*time.Microsecond)); last.TS.Before(lastW) || last.TS.Sub(lastW) > 10*time.Millisecond {
		t.Fatalf("trailing invalidate at %v, last write at %v", last.TS, lastW)
	}
	if e, _ := rec.last("warm", "hot"); e.Uncacheable {
		t.Fatal("a 10ms burst made warm uncacheable")
	}
	// Writes stop: wh turns cacheable again within a window.
	play(d, at, 8*time.Second, stream{key: "wh", qps: 12000})
	if e, _ := rec.last("wh", "hot"); e.Uncacheable {
		t.Fatalf("wh still uncacheable a second after its writes stopped (write_qps %v)", e.WriteQPS)
	}
	// A write now is invalidated again.
	n1 := rec.count("wh", "invalidate")
	play(d, 8*time.Second, 8*time.Second+time.Millisecond, stream{key: "wh", qps: 1000, write: true})
	if rec.count("wh", "invalidate") != n1+1 {
		t.Fatal("write to a cacheable-again key not invalidated")
	}
}

// TestFlushSendsPending: the end of a replay sends a merged invalidate.
func TestFlushSendsPending(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T})
	play(d, 0, time.Second, stream{key: "k", qps: 2000})
	play(d, time.Second, time.Second+2*time.Millisecond, stream{key: "k", qps: 1000, write: true})
	if n := rec.count("k", "invalidate"); n != 1 {
		t.Fatalf("%d invalidates for two writes 1ms apart, want 1 before the gap", n)
	}
	d.Flush()
	if n := rec.count("k", "invalidate"); n != 2 {
		t.Fatalf("%d invalidates after Flush, want 2", n)
	}
}

// BenchmarkWriteHotKey: reads and writes of a hot key, 3:1, at 16 000/s of
// packet time. Once the key is uncacheable a write is a window increment,
// and reads and writes allocate nothing; "cacheable" turns the verdict off,
// so every write past the 10 ms interval emits an invalidate (to a
// discarding emitter: the event itself is the only allocation).
func BenchmarkWriteHotKey(b *testing.B) {
	for _, c := range []struct {
		name string
		uw   float64
	}{{"uncacheable", 0}, {"cacheable", -1}} {
		b.Run(c.name, func(b *testing.B) {
			d, err := New(Config{HotQPS: 1000, UncacheableWrites: c.uw}, nil)
			if err != nil {
				b.Fatal(err)
			}
			f := decode.Flow{Server: srvA, Proto: decode.ProtoRedis, TS: base}
			rd, wr := decode.Request{Op: "GET"}, decode.Request{Op: "SET", Write: true}
			k := decode.Key{Bytes: []byte("bench:hot"), Weight: 1}
			step := func(i int) {
				f.TS += 62_500 // 16 000 ops/s
				if i%4 == 3 {
					d.Key(&f, &wr, k)
				} else {
					d.Key(&f, &rd, k)
				}
			}
			for i := range 1 << 16 { // warm up: hot, verdict given
				step(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				step(i)
			}
			b.StopTimer()
			d.Flush()
			st := d.Stats()
			b.ReportMetric(float64(st.Verdicts), "verdicts")
			b.ReportMetric(float64(st.Invalidates), "invalidates")
		})
	}
}
