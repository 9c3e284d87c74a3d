package topview

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gdamore/tcell/v2"

	"github.com/hotsniff/hotsniff/event"
)

// fakeSource hands out what the test sends, one answer per Next.
type fakeSource struct{ ch chan result }

func newFake() *fakeSource { return &fakeSource{ch: make(chan result)} }

func (f *fakeSource) Next(ctx context.Context) (Snapshot, error) {
	select {
	case r := <-f.ch:
		return r.snap, r.err
	case <-ctx.Done():
		return Snapshot{}, ctx.Err()
	}
}

// send blocks until the view's pump has taken s.
func (f *fakeSource) send(t *testing.T, s Snapshot) {
	t.Helper()
	select {
	case f.ch <- result{snap: s}:
	case <-time.After(10 * time.Second):
		t.Fatal("the view did not ask for a snapshot")
	}
}

func (f *fakeSource) fail(t *testing.T, err error) {
	t.Helper()
	select {
	case f.ch <- result{err: err}:
	case <-time.After(10 * time.Second):
		t.Fatal("the view did not ask for a snapshot")
	}
}

// frame is one drawn screen: its text lines and its cells.
type frame struct {
	lines []string
	cells []tcell.SimCell
	w     int
}

func (f frame) String() string { return strings.Join(f.lines, "\n") }

// line returns the first line containing s, and its index.
func (f frame) line(s string) (string, int) {
	for i, l := range f.lines {
		if strings.Contains(l, s) {
			return l, i
		}
	}
	return "", -1
}

// style returns the style of the cell at x, y.
func (f frame) style(x, y int) tcell.Style { return f.cells[y*f.w+x].Style }

// harness runs Run on a simulation screen and records every frame drawn.
type harness struct {
	t      *testing.T
	scr    tcell.SimulationScreen
	m      *Model
	mu     sync.Mutex
	frames []frame
	notify chan struct{}
	seen   int // frames already examined by wait
	done   chan error
	cancel context.CancelFunc
}

func startHarness(t *testing.T, w, h int, src Source, m *Model) *harness {
	t.Helper()
	scr := tcell.NewSimulationScreen("UTF-8")
	if err := scr.Init(); err != nil {
		t.Fatal(err)
	}
	scr.SetSize(w, h)
	hs := &harness{t: t, scr: scr, m: m, notify: make(chan struct{}, 1), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	hs.cancel = cancel
	go func() {
		hs.done <- Run(ctx, scr, src, m, RunOptions{AfterDraw: hs.record})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-hs.done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
		scr.Fini()
	})
	return hs
}

func (h *harness) record(s tcell.Screen) {
	cells, w, ht := h.scr.GetContents()
	f := frame{cells: append([]tcell.SimCell(nil), cells...), w: w}
	for y := 0; y < ht; y++ {
		var b strings.Builder
		for x := 0; x < w; x++ {
			c := cells[y*w+x]
			if len(c.Runes) == 0 {
				continue // the second cell of a wide rune
			}
			b.WriteString(string(c.Runes))
		}
		f.lines = append(f.lines, strings.TrimRight(b.String(), " "))
	}
	h.mu.Lock()
	h.frames = append(h.frames, f)
	h.mu.Unlock()
	select {
	case h.notify <- struct{}{}:
	default:
	}
}

// wait returns the first frame, after those already examined, for which ok
// holds. The deadline only guards against a hang; nothing is timed.
func (h *harness) wait(what string, ok func(frame) bool) frame {
	h.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		h.mu.Lock()
		fs := h.frames[h.seen:]
		h.mu.Unlock()
		for i, f := range fs {
			if ok(f) {
				h.seen += i + 1
				return f
			}
		}
		h.seen += len(fs)
		select {
		case <-h.notify:
		case <-deadline:
			h.mu.Lock()
			last := "(no frame drawn)"
			if len(h.frames) > 0 {
				last = h.frames[len(h.frames)-1].String()
			}
			h.mu.Unlock()
			h.t.Fatalf("no frame shows %s; last frame:\n%s", what, last)
		}
	}
}

// waitText waits for a frame containing every s.
func (h *harness) waitText(s ...string) frame {
	h.t.Helper()
	return h.wait(strings.Join(s, ", "), func(f frame) bool {
		all := f.String()
		for _, x := range s {
			if !strings.Contains(all, x) {
				return false
			}
		}
		return true
	})
}

func (h *harness) key(k tcell.Key, r rune) { h.scr.InjectKey(k, r, tcell.ModNone) }

func (h *harness) typeText(s string) {
	for _, r := range s {
		h.key(tcell.KeyRune, r)
	}
}

// ended waits for Run to return.
func (h *harness) ended() error {
	h.t.Helper()
	select {
	case err := <-h.done:
		h.done <- err // for Cleanup
		return err
	case <-time.After(10 * time.Second):
		h.t.Fatal("Run did not return")
		return nil
	}
}

// hotEv builds a hot event.
func hotEv(key string, qps float64) event.Event {
	return event.Event{V: 1, Type: "hot", Proto: "redis", Server: "10.0.0.5:6379", NS: "0",
		Key: []byte(key), QPS: qps, TTLms: 60000, Source: "detected", Node: "cache-node-3"}
}

var t0 = time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)

func snap(sec int, evs ...event.Event) Snapshot {
	return Snapshot{Source: "fake", Node: "cache-node-3", TS: t0.Add(time.Duration(sec) * time.Second), HotQPS: 1000, Keys: evs}
}

// tableKeys returns the keys of the table rows of f, top to bottom (the key
// is the last column).
func tableKeys(f frame) []string {
	var keys []string
	for _, l := range f.lines[3 : len(f.lines)-1] {
		fs := strings.Fields(l)
		if len(fs) == 0 {
			continue
		}
		keys = append(keys, fs[len(fs)-1])
	}
	return keys
}

// rowState returns the STATE cell of the row of key.
func rowFields(f frame, key string) []string {
	for _, l := range f.lines[3 : len(f.lines)-1] {
		fs := strings.Fields(l)
		if len(fs) > 0 && fs[len(fs)-1] == key {
			return fs
		}
	}
	return nil
}
