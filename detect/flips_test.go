package detect

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/event"
)

// A writer that times its bursts against the verdict (a burst right after
// each turn back to cacheable, silence right after each turn to
// uncacheable) cannot make a key's cacheable verdict change more than
// maxVerdictFlips (3) times in any 10 s: each change is a hot event to
// every subscriber, each turn to cacheable:false makes every shim drop the
// key, and subscribers hold a key that flips 4 times in 10 s. Before, it
// changed about 25 times every 10 s.
func TestVerdictFlipsBounded(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T})
	play(d, 0, time.Second, stream{key: "k", qps: 2 * T})
	w := verdictFlipWindow
	f := decode.Flow{Server: srvA, Proto: decode.ProtoRedis}
	rd := decode.Request{Op: "GET"}
	wr := decode.Request{Op: "SET", Write: true}
	rng := rand.New(rand.NewPCG(1, 2))
	for ms := int64(1000); ms < 60000; ms++ {
		f.TS = base + ms*1e6
		d.Key(&f, &rd, decode.Key{Bytes: []byte("k"), Weight: 1})
		d.Key(&f, &rd, decode.Key{Bytes: []byte("k"), Weight: 1})
		if len(d.hot.e) == 1 && !d.hot.e[0].wr.uncacheable {
			// Cacheable: write hard to flip it.
			for range 1 + rng.IntN(40) {
				d.Key(&f, &wr, decode.Key{Bytes: []byte("k"), Weight: 1})
			}
		}
	}
	var changes []int64
	uncacheable := false
	for _, e := range rec.events("k") {
		if e.Type == event.TypeHot && e.Uncacheable != uncacheable {
			uncacheable = e.Uncacheable
			changes = append(changes, e.TS.UnixNano())
		}
	}
	most := 0
	for i := range changes {
		n := 0
		for j := i; j < len(changes) && changes[j]-changes[i] < w; j++ {
			n++
		}
		most = max(most, n)
	}
	t.Logf("%d verdict changes in 59 s, at most %d within 10 s; held %d", len(changes), most, d.Stats().VerdictsHeld)
	if len(changes) < 4 {
		t.Fatalf("only %d verdict changes: the writer did not flip it", len(changes))
	}
	if most > maxVerdictFlips {
		t.Fatalf("%d verdict changes within 10 s, at most %d allowed", most, maxVerdictFlips)
	}
}
