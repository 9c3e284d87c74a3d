package topview

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestKeyText(t *testing.T) {
	for in, want := range map[string]string{
		"item:42":    "item:42",
		"émoji 🔥":    "émoji 🔥",
		"a\r\nb":     `"a\r\nb"`,
		"nul\x00":    `"nul\x00"`,
		"\xff\x00a":  "b64:/wBh",
		"":           "",
		"tab\tinkey": `"tab\tinkey"`,
	} {
		if got := KeyText([]byte(in)); got != want {
			t.Errorf("KeyText(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestElideAndPad(t *testing.T) {
	for _, c := range []struct {
		in   string
		w    int
		want string
	}{
		{"item:42", 10, "item:42"},
		{"user:session:0123456789abcdef", 15, "user:se…9abcdef"},
		{"abcdef", 1, "…"},
		{"abcdef", 2, "a…"},
		{"火火火火火火", 7, "火…火火"},
	} {
		got := elide(c.in, c.w)
		if got != c.want || width(got) > c.w {
			t.Errorf("elide(%q, %d) = %q (width %d), want %q", c.in, c.w, got, width(got), c.want)
		}
	}
	if got := pad("12.5", 8, true); got != "    12.5" {
		t.Errorf("pad right = %q", got)
	}
	if got := pad("火", 4, false); got != "火  " {
		t.Errorf("pad wide = %q", got)
	}
}

func TestFmtRate(t *testing.T) {
	for q, want := range map[float64]string{0: "-", 0.25: "0.2", 1843.5: "1843.5", 99999.94: "99999.9", 123456.7: "123457", 2.5e7: "25.0M"} {
		if got := fmtRate(q); got != want || len(got) > 7 {
			t.Errorf("fmtRate(%v) = %q, want %q", q, got, want)
		}
	}
}

func TestParseSort(t *testing.T) {
	for i, n := range sortNames {
		if c, err := ParseSort(n); err != nil || c != SortCol(i) || c.String() != n {
			t.Errorf("ParseSort(%q) = %v, %v", n, c, err)
		}
	}
	if _, err := ParseSort("qps"); err == nil {
		t.Error("ParseSort(qps) accepted")
	}
}

func TestWritePlain(t *testing.T) {
	m := NewModel("127.0.0.1:9464", Options{})
	mc := hotEv("\xff\x00a", 1200)
	mc.Proto, mc.Server, mc.NS = "memcache", "10.0.0.6:11211", ""
	m.Apply(snap(0, hotEv("item:42", 1843.5), mc, hotEv("gone", 1100)))
	served := hotEv("item:42", 2000)
	served.AbsorbedQPS = 1500 // shims served three quarters locally
	served.BytesPS = 2.5e6
	m.Apply(snap(1, served, mc))
	var b strings.Builder
	if err := m.WritePlain(&b); err != nil {
		t.Fatal(err)
	}
	want := `hotsniff top · fake · node cache-node-3 · 2026-11-29T18:00:01.000000Z · 2 hot ≥1000 qps
  RATE  TREND  PROTO     SERVER          NS  STATE  SOURCE    LOCAL  BYTES/S  KEY
2000.0  ▇█ ↑   redis     10.0.0.5:6379   0   hot    detected  75%       2.5M  item:42
1200.0  ██ →   memcache  10.0.0.6:11211      hot    detected  -            -  b64:/wBh
     -  █▁ ↓   redis     10.0.0.5:6379   0   cold   detected  -            -  gone
`
	if b.String() != want {
		t.Errorf("plain table:\n%s\nwant:\n%s", b.String(), want)
	}
	m.SetError(errDemo("daemon unreachable: GET x: refused"))
	b.Reset()
	m.WritePlain(&b)
	if !strings.Contains(b.String(), "\n✖ daemon unreachable: GET x: refused (retrying; rows as of 18:00:01Z)\n") {
		t.Errorf("plain table with error:\n%s", b.String())
	}
}

type errDemo string

func (e errDemo) Error() string { return string(e) }

func TestModelDuplicateAndNonHot(t *testing.T) {
	m := NewModel("x", Options{ColdFor: -1})
	inv := hotEv("inv", 0)
	inv.Type = "invalidate"
	m.Apply(snap(0, hotEv("a", 100), hotEv("a", 300), inv, hotEv("b", 5)))
	a := hotEv("a", 0)
	if len(m.rows) != 2 || m.rows[rowID(&a)] == nil {
		t.Fatalf("rows = %v", m.rows)
	}
	for _, r := range m.rows {
		if string(r.ev.Key) == "a" && (r.ev.QPS != 300 || len(r.hist) != 1) {
			t.Errorf("duplicate a: qps %v hist %v", r.ev.QPS, r.hist)
		}
	}
	m.Apply(snap(1, hotEv("a", 100)))
	if len(m.rows) != 1 {
		t.Errorf("negative ColdFor kept %d rows", len(m.rows))
	}
}

func TestFmtSample(t *testing.T) {
	for r, want := range map[float64]string{
		0.25: "25%", 0.1367: "13.7%", 0.0625: "6.25%", 0.5: "50%", 0.01: "1%",
		1.0 / 256: "1/256", 1.0 / 65536: "1/65536", 1e-300: "<1/1M", 0.9999: ">99.9%", 1: "100%", 0: "100%",
	} {
		if got := fmtSample(r); got != want || width(got) > wSample+1 {
			t.Errorf("fmtSample(%v) = %q, want %q", r, got, want)
		}
	}
}

// TestWritePlainSampled: when the events carry the capture's sampling
// rate, the header says so and which rate, and each estimated rate is
// marked ~; when rows differ (a daemon whose rate moved, or nodes that
// sample differently), a SAMPLE column shows each row's. Events without
// sampling show the table as before.
func TestWritePlainSampled(t *testing.T) {
	m := NewModel("127.0.0.1:9464", Options{})
	a, b := hotEv("item:42", 2000), hotEv("item:7", 1200)
	a.Sample, b.Sample = 0.25, 0.25
	m.Apply(snap(0, a, b))
	var out strings.Builder
	m.WritePlain(&out)
	want := `hotsniff top · fake · node cache-node-3 · 2026-11-29T18:00:00.000000Z · 2 hot ≥1000 qps · sampling 25% of connections: ~ rates are estimates
   RATE  TREND  PROTO  SERVER         NS  STATE  SOURCE    LOCAL  BYTES/S  KEY
~2000.0  █ ·    redis  10.0.0.5:6379  0   hot    detected  -            -  item:42
~1200.0  █ ·    redis  10.0.0.5:6379  0   hot    detected  -            -  item:7
`
	if out.String() != want {
		t.Errorf("uniform sampling:\n%s\nwant:\n%s", out.String(), want)
	}
	// The terminal header keeps saying so however narrow: a short form,
	// then the time and the node give way.
	for w, want := range map[int]string{
		160: "· node cache-node-3 · 18:00:00Z · 2 hot ≥1000 qps · sampling 25% of connections: ~ rates are estimates",
		100: "· node cache-node-3 · 18:00:00Z · 2 hot ≥1000 qps · ~ sampled 25%",
		80:  "· node cache-node-3 · 2 hot ≥1000 qps · ~ sampled 25%",
		60:  "· 2 hot ≥1000 qps · ~ sampled 25%",
	} {
		if h := strings.TrimRight(m.Frame(w, 6)[0].String(), " "); !strings.HasSuffix(h, want) {
			t.Errorf("header at width %d: %q, want it to end %q", w, h, want)
		}
	}

	a.Sample, b.Sample = 0.1367, 0 // b's event was made before sampling began
	m.Apply(snap(1, a, b))
	out.Reset()
	m.WritePlain(&out)
	want = `hotsniff top · fake · node cache-node-3 · 2026-11-29T18:00:01.000000Z · 2 hot ≥1000 qps · sampling 13.7%–100% of connections: ~ rates are estimates
   RATE  SAMPLE  TREND  PROTO  SERVER         NS  STATE  SOURCE    LOCAL  BYTES/S  KEY
~2000.0  13.7%   ██ →   redis  10.0.0.5:6379  0   hot    detected  -            -  item:42
 1200.0  100%    ██ →   redis  10.0.0.5:6379  0   hot    detected  -            -  item:7
`
	if out.String() != want {
		t.Errorf("mixed sampling:\n%s\nwant:\n%s", out.String(), want)
	}
	// The terminal frame has the column too, and the sort arrow stays on
	// RATE.
	f := m.Frame(120, 8)
	if l := f[2].String(); !strings.Contains(l, "RATE▼ SAMPLE") || !strings.Contains(f[3].String(), "~2000.0 13.7%") {
		t.Errorf("frame:\n%s\n%s", l, f[3].String())
	}

	a.Sample = 0
	m.Apply(snap(2, a, b))
	out.Reset()
	m.WritePlain(&out)
	if s := out.String(); strings.Contains(s, "sampling") || strings.Contains(s, "SAMPLE") || strings.Contains(s, "~") {
		t.Errorf("no sampling any more:\n%s", s)
	}
}

// TestCountsSingular: one key is "1 key", one node "1 node".
func TestCountsSingular(t *testing.T) {
	m := NewModel("127.0.0.1:9464", Options{})
	m.Apply(snap(0, hotEv("item:42", 1843.5)))
	f := m.Frame(100, 8)
	if st := f[1].String(); !strings.Contains(st, " 1 key (0 cold)") {
		t.Errorf("status line %q, want 1 key", st)
	}
	m.Apply(snap(1, hotEv("item:42", 1843.5), hotEv("item:7", 1200)))
	if st := m.Frame(100, 8)[1].String(); !strings.Contains(st, " 2 keys (0 cold)") {
		t.Errorf("status line %q, want 2 keys", st)
	}
}

// TestLowerBoundRate: a hot key whose rate is a floor (the daemon caught it
// faster than it can time it) shows "≥" before the rate; once measured, the
// plain figure.
func TestLowerBoundRate(t *testing.T) {
	m := NewModel("x", Options{})
	e := hotEv("blazing", 32000)
	e.QPSLowerBound = true
	m.Apply(snap(0, e))
	var b strings.Builder
	m.WritePlain(&b)
	if !strings.Contains(b.String(), "≥32000.0") {
		t.Errorf("lower bound not marked:\n%s", b.String())
	}
	m.Apply(snap(1, hotEv("blazing", 200000)))
	b.Reset()
	m.WritePlain(&b)
	if row := strings.Split(strings.TrimSpace(b.String()), "\n")[2]; strings.Contains(row, "≥") || !strings.Contains(row, "200000") {
		t.Errorf("measured rate still marked:\n%s", b.String())
	}
}

// TestTopRowsBound: --top N shows N rows: every hot key first (all of them
// when more than N are hot), then the keys below the threshold by rate,
// then keys that left the hot set while there is room.
func TestTopRowsBound(t *testing.T) {
	var rows []*row
	add := func(id string, hot, warm bool, qps float64, coldSec int) {
		r := &row{id: id, hot: hot, warm: warm}
		r.ev.QPS = qps
		if coldSec > 0 {
			r.coldSince = t0.Add(time.Duration(coldSec) * time.Second)
		}
		rows = append(rows, r)
	}
	add("hot-a", true, false, 5000, 0)
	add("hot-bytes", true, false, 10, 0) // hot by reply bytes, low rate
	add("hot-b", true, false, 2000, 0)
	for i, q := range []float64{900, 800, 700, 600, 500} {
		add(fmt.Sprintf("warm-%d", i), false, true, q, 0)
	}
	add("cold-old", false, false, 0, 1)
	add("cold-new", false, false, 0, 9)
	ids := func(n int) string {
		var s []string
		for _, r := range topRows(slices.Clone(rows), n) {
			s = append(s, r.id)
		}
		return strings.Join(s, " ")
	}
	for n, want := range map[int]string{
		2:  "hot-a hot-b hot-bytes",
		5:  "hot-a hot-b hot-bytes warm-0 warm-1",
		9:  "hot-a hot-b hot-bytes warm-0 warm-1 warm-2 warm-3 warm-4 cold-new",
		20: "hot-a hot-b hot-bytes warm-0 warm-1 warm-2 warm-3 warm-4 cold-new cold-old",
	} {
		if got := ids(n); got != want {
			t.Errorf("top %d: %s, want %s", n, got, want)
		}
	}
}
