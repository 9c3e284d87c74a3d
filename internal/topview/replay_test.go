package topview

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gdamore/tcell/v2"

	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/stream"
)

const hotkeyFixture = "../../testdata/redis/hotkey.pcap.gz"

func newTestReplay(t *testing.T, paths ...string) *ReplaySource {
	t.Helper()
	rs, err := NewReplaySource(ReplayConfig{
		Paths: paths, Ports: stream.DefaultPorts(), Stream: stream.DefaultConfig(),
		Detect: detect.Config{HotQPS: 1000}, Interval: 250 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return rs
}

// TestReplaySourceFrames reads the fixture frame by frame: item:hot is the
// only hot key, hot during the first two seconds of packet time.
func TestReplaySourceFrames(t *testing.T) {
	rs := newTestReplay(t, hotkeyFixture)
	var (
		frames, hotFrames int
		first, last       time.Time
	)
	for {
		s, err := rs.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		frames++
		if first.IsZero() {
			first = s.TS
		}
		if s.TS.Before(last) {
			t.Errorf("frame at %v after %v", s.TS, last)
		}
		last = s.TS
		if s.HotQPS != 1000 || s.Node != "" || s.Source != "replay hotkey.pcap.gz" {
			t.Errorf("snapshot header = %q %q %v", s.Source, s.Node, s.HotQPS)
		}
		for _, e := range s.Keys {
			if string(e.Key) != "item:hot" {
				t.Errorf("frame %v: %s is hot (%.0f/s)", s.TS, e.Key, e.QPS)
				continue
			}
			hotFrames++
			if e.QPS < 700 || e.Proto != "redis" || e.NS != "0" {
				t.Errorf("item:hot = %+v", e)
			}
		}
	}
	t.Logf("%d frames over %v, item:hot hot in %d", frames, last.Sub(first), hotFrames)
	if frames < 10 || hotFrames < 4 {
		t.Errorf("%d frames, item:hot hot in %d: want about 12 and 7", frames, hotFrames)
	}
	if _, err := rs.Next(context.Background()); !errors.Is(err, io.EOF) {
		t.Errorf("Next after the end: %v", err)
	}
}

// TestViewReplay is `top --replay testdata/redis/hotkey.pcap.gz --hot-qps
// 1000` in the harness: item:hot shows as hot, no other key ever does, and
// the last frame stays.
func TestViewReplay(t *testing.T) {
	rs := newTestReplay(t, hotkeyFixture)
	h := startHarness(t, 80, 24, rs, NewModel("replay", Options{ColdFor: time.Hour}))
	sawHot := false
	f := h.wait("the end of the replay", func(f frame) bool {
		for _, l := range f.lines[3 : len(f.lines)-1] {
			fs := strings.Fields(l)
			if len(fs) < 9 {
				continue
			}
			key, state := fs[len(fs)-1], fs[6]
			if state == "hot" && key != "item:hot" {
				t.Errorf("%s shown hot:\n%s", key, f)
			}
			if key == "item:hot" && state == "hot" && fs[3] == "redis" {
				sawHot = true
			}
		}
		return strings.Contains(f.lines[1], "· end of data — q quits")
	})
	if !sawHot {
		t.Errorf("item:hot never shown hot")
	}
	if got := tableKeys(f); len(got) != 1 || got[0] != "item:hot" {
		t.Errorf("last frame rows = %v\n%s", got, f)
	}
	// The last frame is held: keys still work on it.
	h.typeText("/")
	h.typeText("nothing")
	h.key(tcell.KeyEnter, 0)
	f = h.waitText(`filter "nothing"`)
	if got := tableKeys(f); len(got) != 0 {
		t.Errorf("filtered rows = %v", got)
	}
}

func TestReplaySourceErrors(t *testing.T) {
	rs := newTestReplay(t, "does-not-exist.pcap")
	_, err := rs.Next(context.Background())
	var fe *FatalError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "does-not-exist.pcap") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := NewReplaySource(ReplayConfig{Paths: []string{"x"}, Stream: stream.DefaultConfig(), Interval: time.Second}); err == nil {
		t.Error("no hot_qps accepted")
	}
}
