package detect

import (
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/event"
)

// A restarted detector that adopts its predecessor's hot set keeps a key
// hot whose readers are served locally: it takes their reports at once and
// the key is never cold while it is read.
func TestAdoptKeepsLocallyServedKeyHot(t *testing.T) {
	d1, _ := newDet(t, Config{HotQPS: T, RefreshEvery: 2 * time.Second})
	fl := &fleet{d: d1, key: "k", procs: 3, demand: 3 * T, localTTL: 50 * time.Millisecond, report: true}
	fl.run(0, 10*time.Second)
	prev := d1.HotSet()
	if len(prev) != 1 {
		t.Fatalf("before the restart: hot set %v", prev)
	}
	evs := []*event.Event{&prev[0]}

	d2, rec := newDet(t, Config{HotQPS: T, RefreshEvery: 2 * time.Second})
	if n := d2.Adopt(evs, base+int64(10*time.Second)); n != 1 {
		t.Fatalf("adopted %d keys, want 1", n)
	}
	if rec.count("k", "hot") != 1 {
		t.Fatalf("no hot event on adoption: %v", rec.of("k"))
	}
	// The readers keep serving locally, only refresh reads and reports.
	fl2 := &fleet{d: d2, key: "k", procs: 3, demand: 3 * T, localTTL: 50 * time.Millisecond, report: true}
	fl2.run(10*time.Second, 40*time.Second)
	st := d2.Stats()
	if c := rec.count("k", "cold"); c != 0 {
		t.Fatalf("adopted key went cold %d times while read: %v", c, rec.of("k"))
	}
	if st.AbsorbedNotHot != 0 || st.AbsorbedReports == 0 || st.Adopted != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Adopting again what is already hot is a no-op.
	if n := d2.Adopt(evs, base+int64(40*time.Second)); n != 0 {
		t.Fatalf("re-adopted %d", n)
	}
}

// An adopted key nobody reads goes cold on evidence: not before a full
// window of measurement from the adoption, and soon after.
func TestAdoptColdOnlyAfterAWindow(t *testing.T) {
	d, rec := newDet(t, Config{HotQPS: T})
	ev := &event.Event{V: 1, Type: event.TypeHot, Proto: "redis", Server: srvA.String(), Key: []byte("k"), QPS: 5 * T}
	bad := []*event.Event{
		{Type: event.TypeHot, Proto: "nope", Server: srvA.String(), Key: []byte("x")},
		{Type: event.TypeHot, Proto: "redis", Server: "not an address", Key: []byte("x")},
		{Type: event.TypeHot, Proto: "redis", Server: srvA.String(), NS: "-3", Key: []byte("x")},
		{Type: event.TypeCold, Proto: "redis", Server: srvA.String(), Key: []byte("x")},
		nil,
	}
	start := base + int64(time.Second)
	if n := d.Adopt(append(bad, ev), start); n != 1 {
		t.Fatalf("adopted %d, want 1", n)
	}
	if hs := d.HotSet(); len(hs) != 1 || hs[0].QPS != 5*T {
		t.Fatalf("hot set after adoption %+v", hs)
	}
	w := int64(d.Config().Window)
	var coldAt int64
	for now := start; now < start+4*w; now += int64(10 * time.Millisecond) {
		d.Tick(now)
		if rec.count("k", "cold") > 0 {
			coldAt = now
			break
		}
	}
	if coldAt == 0 || coldAt-start < w || coldAt-start > w+w/4 {
		t.Fatalf("cold %v after adoption, want between %v and %v", time.Duration(coldAt-start), time.Duration(w), time.Duration(w+w/4))
	}
}
