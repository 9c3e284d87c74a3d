package topview

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gdamore/tcell/v2"

	"github.com/hotsniff/hotsniff/event"
)

func TestViewOrderSortReverse(t *testing.T) {
	src := newFake()
	h := startHarness(t, 80, 24, src, NewModel("fake", Options{}))
	h.waitText("waiting for data")
	src.send(t, snap(1, hotEv("item:b", 300), hotEv("item:a", 100), hotEv("item:c", 2000.5)))
	f := h.waitText("item:a", "item:b", "item:c")
	if got, want := tableKeys(f), []string{"item:c", "item:b", "item:a"}; !slices.Equal(got, want) {
		t.Fatalf("rows by rate = %v, want %v\n%s", got, want, f)
	}
	if l := f.lines[0]; !strings.Contains(l, "node cache-node-3") || !strings.Contains(l, "3 hot ≥1000 qps") || !strings.Contains(l, "18:00:01Z") || !strings.Contains(l, "fake") {
		t.Errorf("header = %q", l)
	}
	if fs := rowFields(f, "item:c"); len(fs) != 10 || fs[0] != "2000.5" || fs[3] != "redis" || fs[4] != "10.0.0.5:6379" || fs[5] != "0" || fs[6] != "hot" || fs[7] != "detected" {
		t.Errorf("row item:c = %q", fs)
	}
	if l, _ := f.line("RATE▼"); l == "" {
		t.Errorf("no RATE▼ title:\n%s", f)
	}
	if !strings.Contains(f.lines[23], "q quit") {
		t.Errorf("footer = %q", f.lines[23])
	}

	h.key(tcell.KeyRune, 's') // rate → key, ascending
	f = h.waitText("sort key ▲")
	if got, want := tableKeys(f), []string{"item:a", "item:b", "item:c"}; !slices.Equal(got, want) {
		t.Fatalf("rows by key = %v, want %v\n%s", got, want, f)
	}
	if l, _ := f.line("KEY▲"); l == "" {
		t.Errorf("no KEY▲ title:\n%s", f)
	}
	h.key(tcell.KeyRune, 'r')
	f = h.waitText("sort key ▼")
	if got, want := tableKeys(f), []string{"item:c", "item:b", "item:a"}; !slices.Equal(got, want) {
		t.Fatalf("rows by key reversed = %v, want %v\n%s", got, want, f)
	}
	for _, want := range []string{"sort proto ▼", "sort server ▼", "sort state ▲", "sort bytes ▲", "sort rate ▲"} {
		h.key(tcell.KeyRune, 's')
		h.waitText(want)
	}
	h.key(tcell.KeyRune, 'r')
	f = h.waitText("sort rate ▼")
	if got, want := tableKeys(f), []string{"item:c", "item:b", "item:a"}; !slices.Equal(got, want) {
		t.Fatalf("rows by rate = %v, want %v\n%s", got, want, f)
	}
	h.key(tcell.KeyRune, 'q')
	if err := h.ended(); err != nil {
		t.Fatalf("Run after q: %v", err)
	}
}

func TestViewFilter(t *testing.T) {
	src := newFake()
	h := startHarness(t, 80, 24, src, NewModel("fake", Options{}))
	other := hotEv("session:9", 1500)
	other.Proto, other.Server = "memcache", "10.0.0.9:11211"
	other.NS = ""
	src.send(t, snap(1, hotEv("item:1", 1200), hotEv("item:2", 1100), other))
	h.waitText("item:1", "item:2", "session:9")

	h.key(tcell.KeyRune, '/')
	h.typeText("ITEM:1")
	f := h.waitText("filter: ITEM:1█")
	if len(tableKeys(f)) != 3 {
		t.Errorf("the filter applied before Enter:\n%s", f)
	}
	h.key(tcell.KeyEnter, 0)
	f = h.waitText(`filter "ITEM:1"`)
	if got := tableKeys(f); !slices.Equal(got, []string{"item:1"}) {
		t.Fatalf("filtered rows = %v\n%s", got, f)
	}
	// q inside the filter is text, not quit.
	h.key(tcell.KeyRune, '/')
	h.key(tcell.KeyBackspace2, 0)
	h.key(tcell.KeyBackspace2, 0)
	h.key(tcell.KeyBackspace2, 0)
	h.key(tcell.KeyBackspace2, 0)
	h.key(tcell.KeyBackspace2, 0)
	h.key(tcell.KeyBackspace2, 0)
	h.typeText("memc")
	h.key(tcell.KeyEnter, 0)
	f = h.waitText(`filter "memc"`)
	if got := tableKeys(f); !slices.Equal(got, []string{"session:9"}) {
		t.Fatalf("rows filtered on proto = %v\n%s", got, f)
	}
	h.key(tcell.KeyRune, '/')
	h.typeText("x")
	h.key(tcell.KeyEscape, 0) // Esc clears
	f = h.wait("every row again", func(f frame) bool { return len(tableKeys(f)) == 3 })
	if strings.Contains(f.String(), "filter \"") {
		t.Errorf("filter still shown after Esc:\n%s", f)
	}
	h.key(tcell.KeyRune, '/')
	h.typeText("10.0.0.9")
	h.key(tcell.KeyEnter, 0)
	f = h.waitText(`filter "10.0.0.9"`)
	if got := tableKeys(f); !slices.Equal(got, []string{"session:9"}) {
		t.Fatalf("rows filtered on server = %v\n%s", got, f)
	}
	h.key(tcell.KeyCtrlC, 0)
	if err := h.ended(); err != nil {
		t.Fatalf("Run after ctrl-c: %v", err)
	}
}

func TestViewColdAndTrend(t *testing.T) {
	src := newFake()
	h := startHarness(t, 80, 24, src, NewModel("fake", Options{ColdFor: 10e9}))
	src.send(t, snap(1, hotEv("up", 1000), hotEv("down", 2000), hotEv("flat", 1500), hotEv("gone", 1200)))
	f := h.waitText("gone")
	if fs := rowFields(f, "up"); fs[2] != "·" {
		t.Errorf("trend after one sample = %q, want ·", fs[2])
	}
	src.send(t, snap(2, hotEv("up", 1400), hotEv("down", 1300), hotEv("flat", 1510)))
	f = h.waitText("cold")
	for key, arrow := range map[string]string{"up": "↑", "down": "↓", "flat": "→", "gone": "↓"} {
		fs := rowFields(f, key)
		if len(fs) < 7 || fs[2] != arrow {
			t.Errorf("row %s = %q, want trend %s", key, fs, arrow)
		}
	}
	if fs := rowFields(f, "up"); fs[1] != "▆█" {
		t.Errorf("sparkline of up = %q, want ▆█", fs[1])
	}
	fs := rowFields(f, "gone")
	if fs[0] != "-" || fs[6] != "cold" {
		t.Errorf("row gone = %q, want rate - and state cold", fs)
	}
	if got := tableKeys(f); got[len(got)-1] != "gone" {
		t.Errorf("cold row not last by rate: %v", got)
	}
	_, y := f.line("gone")
	if _, _, attr := f.style(2, y).Decompose(); attr&tcell.AttrDim == 0 {
		t.Errorf("cold row is not dimmed")
	}
	_, y = f.line(" up")
	if _, _, attr := f.style(2, y).Decompose(); attr&tcell.AttrDim != 0 {
		t.Errorf("hot row is dimmed")
	}
	if !strings.Contains(f.lines[0], "3 hot") || !strings.Contains(f.lines[1], "4 keys (1 cold)") {
		t.Errorf("header/status = %q / %q", f.lines[0], f.lines[1])
	}
	// Back in the hot set: hot again. Still absent past ColdFor: dropped.
	src.send(t, snap(5, hotEv("gone", 1800)))
	f = h.waitText("18:00:05Z")
	if fs := rowFields(f, "gone"); fs[6] != "hot" || fs[2] != "↑" {
		t.Errorf("row gone back = %q", fs)
	}
	src.send(t, snap(20, hotEv("gone", 1800)))
	f = h.waitText("18:00:20Z")
	if got := tableKeys(f); !slices.Equal(got, []string{"gone"}) {
		t.Errorf("rows after ColdFor = %v", got)
	}
}

func TestViewPause(t *testing.T) {
	src := newFake()
	h := startHarness(t, 80, 24, src, NewModel("fake", Options{}))
	src.send(t, snap(1, hotEv("a", 1000)))
	h.waitText(" a")
	h.key(tcell.KeyRune, 'p')
	h.waitText("PAUSED")
	src.send(t, snap(2, hotEv("b", 1000))) // taken by the pump, held back by the view
	h.key(tcell.KeyRune, 'r')              // any redraw
	f := h.waitText("sort rate ▲")
	if strings.Contains(f.String(), "18:00:02Z") || rowFields(f, "b") != nil {
		t.Fatalf("a paused view took a snapshot:\n%s", f)
	}
	h.key(tcell.KeyRune, 'p')
	f = h.waitText("18:00:02Z")
	if strings.Contains(f.String(), "PAUSED") || rowFields(f, "b") == nil {
		t.Fatalf("after resume:\n%s", f)
	}
}

func TestViewScrollAndResize(t *testing.T) {
	src := newFake()
	h := startHarness(t, 80, 24, src, NewModel("fake", Options{}))
	var evs = make([]event.Event, 0, 50)
	for i := range 50 {
		evs = append(evs, hotEv(fmt.Sprintf("k%02d", i), float64(5000-i)))
	}
	src.send(t, snap(1, evs...))
	f := h.waitText("k00", "1-20/50")
	if got := tableKeys(f); len(got) != 20 || got[0] != "k00" || got[19] != "k19" {
		t.Fatalf("first page = %v", got)
	}
	h.key(tcell.KeyDown, 0)
	f = h.waitText("2-21/50")
	if got := tableKeys(f); got[0] != "k01" {
		t.Errorf("after down: %v", got)
	}
	h.key(tcell.KeyPgDn, 0)
	h.waitText("21-40/50")
	h.key(tcell.KeyPgDn, 0)
	f = h.waitText("31-50/50")
	if got := tableKeys(f); got[19] != "k49" {
		t.Errorf("last page ends with %v", got[19])
	}
	h.key(tcell.KeyPgUp, 0)
	h.key(tcell.KeyUp, 0)
	h.waitText("11-30/50")

	h.scr.SetSize(120, 40)
	h.scr.PostEvent(tcell.NewEventResize(120, 40))
	f = h.waitText("11-46/50")
	if len(f.lines) != 40 || !strings.Contains(f.lines[39], "q quit") {
		t.Errorf("after resize: %d lines, footer %q", len(f.lines), f.lines[len(f.lines)-1])
	}
	if got := tableKeys(f); len(got) != 36 || got[0] != "k10" {
		t.Errorf("after resize: rows %v", got)
	}
	h.scr.SetSize(40, 8)
	h.scr.PostEvent(tcell.NewEventResize(40, 8))
	f = h.wait("a 40x8 frame", func(f frame) bool { return len(f.lines) == 8 })
	if got := tableKeys(f); !slices.Equal(got, []string{"k10", "k11", "k12", "k13"}) {
		t.Errorf("after resize to 40x8: rows %v\n%s", got, f)
	}
}

func TestViewErrorsAndEnd(t *testing.T) {
	src := newFake()
	h := startHarness(t, 80, 24, src, NewModel("fake", Options{}))
	src.fail(t, errors.New("daemon unreachable: GET http://x/hotkeys: connection refused"))
	h.waitText("✖ daemon unreachable", "(retrying)")
	src.send(t, snap(1, hotEv("a", 1000)))
	f := h.waitText(" a")
	if strings.Contains(f.String(), "✖") {
		t.Errorf("error still shown after a snapshot:\n%s", f)
	}
	src.fail(t, errors.New("daemon unreachable: boom"))
	f = h.waitText("✖ daemon unreachable: boom", "rows as of 18:00:01Z")
	if rowFields(f, "a") == nil {
		t.Errorf("rows dropped on error:\n%s", f)
	}
	src.fail(t, &FatalError{errors.New("replay: x.pcap: truncated")})
	f = h.waitText("✖ replay: x.pcap: truncated — q quits")
	if rowFields(f, "a") == nil {
		t.Errorf("rows dropped at the end:\n%s", f)
	}
	h.key(tcell.KeyRune, 'q')
	if err := h.ended(); err != nil {
		t.Fatal(err)
	}
}
