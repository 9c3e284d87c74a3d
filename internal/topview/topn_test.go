package topview

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gdamore/tcell/v2"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/stream"
)

type nopSink struct{ decode.Discard }

// TestTopCounter: exact counts while the keys fit; beyond the capacity a
// key carrying a large share of the reads is still listed first.
func TestTopCounter(t *testing.T) {
	f := &decode.Flow{Proto: decode.ProtoRedis, Server: netip.MustParseAddrPort("10.0.0.5:6379")}
	r := &decode.Request{}
	tc := newTopCounter(nopSink{}, 3) // capacity 256
	for i := range 100 {
		for range i + 1 {
			tc.Key(f, r, decode.Key{Bytes: fmt.Appendf(nil, "k%d", i), Weight: 1})
		}
	}
	tc.Key(f, &decode.Request{Write: true}, decode.Key{Bytes: []byte("k99"), Weight: 50}) // writes do not count
	got := tc.take(3, time.Second, time.Time{})
	if len(got) != 3 || string(got[0].Key) != "k99" || got[0].QPS != 100 || string(got[2].Key) != "k97" || got[2].QPS != 98 ||
		got[0].Server != "10.0.0.5:6379" || got[0].NS != "0" || got[0].Proto != "redis" {
		t.Fatalf("top 3 = %+v", got)
	}
	if again := tc.take(3, time.Second, time.Time{}); len(again) != 0 {
		t.Fatalf("take does not start a new interval: %v", again)
	}
	// 10 000 distinct keys read once each, and one key read 2000 times.
	for i := range 10_000 {
		tc.Key(f, r, decode.Key{Bytes: fmt.Appendf(nil, "cold%d", i), Weight: 1})
		if i%5 == 0 {
			tc.Key(f, r, decode.Key{Bytes: []byte("heavy"), Weight: 1})
		}
	}
	if len(tc.byID) > tc.capacity {
		t.Fatalf("%d keys held, capacity %d", len(tc.byID), tc.capacity)
	}
	got = tc.take(1, time.Second, time.Time{})
	if len(got) != 1 || string(got[0].Key) != "heavy" || got[0].QPS < 2000 {
		t.Fatalf("heavy hitter lost: %+v", got)
	}
}

// TestReplayTopN: with a top N, every frame of the replay lists N keys,
// hot or below the threshold, from the first frame on.
func TestReplayTopN(t *testing.T) {
	rs, err := NewReplaySource(ReplayConfig{
		Paths: []string{hotkeyFixture}, Ports: stream.DefaultPorts(), Stream: stream.DefaultConfig(),
		Detect: detect.Config{HotQPS: 1000}, Interval: 250 * time.Millisecond, TopN: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	m := NewModel("replay", Options{TopN: 5, ColdFor: time.Hour})
	frames := 0
	for {
		s, err := rs.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		frames++
		// The 5 hottest of the interval, less those that are hot; a hot
		// key may be listed by the detector without being among them.
		if len(s.Keys)+len(s.Warm) < 5 || len(s.Warm) > 5 {
			t.Errorf("frame %d: %d hot + %d warm, want at least 5 in all", frames, len(s.Keys), len(s.Warm))
		}
		for _, e := range s.Warm {
			if e.QPS <= 0 || string(e.Key) == "item:hot" && len(s.Keys) > 0 {
				t.Errorf("frame %d: warm %s at %v", frames, e.Key, e.QPS)
			}
		}
		m.Apply(s)
		var b strings.Builder
		m.WritePlain(&b)
		listed, rows := 0, 0
		for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n")[2:] {
			f := strings.Fields(l)
			if len(f) <= 7 {
				continue
			}
			rows++
			if f[6] == "hot" || f[6] == "-" {
				listed++
			}
			// A key below the threshold was counted, not detected.
			if f[6] == "-" && f[7] != "-" {
				t.Errorf("frame %d: key below the threshold shows source %q: %s", frames, f[7], l)
			}
			if f[6] == "hot" && f[7] != "detected" {
				t.Errorf("frame %d: hot key shows source %q: %s", frames, f[7], l)
			}
		}
		if listed != 5 || rows != 5 {
			t.Errorf("frame %d shows %d rows (%d hot or below the threshold), want 5 (--top 5):\n%s", frames, rows, listed, b.String())
		}
	}
	if frames < 10 {
		t.Fatalf("%d frames", frames)
	}
}

// countingSource counts the frames a source computed.
type countingSource struct {
	Source
	n atomic.Int64
}

func (c *countingSource) Next(ctx context.Context) (Snapshot, error) {
	s, err := c.Source.Next(ctx)
	c.n.Add(1)
	return s, err
}

// TestViewPauseReplay: p stops the replay itself, not only the drawing:
// while paused no more packets are read.
func TestViewPauseReplay(t *testing.T) {
	rs, err := NewReplaySource(ReplayConfig{
		Paths: []string{hotkeyFixture}, Ports: stream.DefaultPorts(), Stream: stream.DefaultConfig(),
		Detect: detect.Config{HotQPS: 1000}, Interval: 50 * time.Millisecond, FrameDelay: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	src := &countingSource{Source: rs}
	h := startHarness(t, 80, 24, src, NewModel("replay", Options{}))
	h.waitText("item:hot")
	h.key(tcell.KeyRune, 'p')
	h.waitText("PAUSED")
	at := src.n.Load()
	time.Sleep(500 * time.Millisecond) // 25 frames' worth at the replay's pace
	if n := src.n.Load(); n > at+1 {
		t.Fatalf("the replay went on while paused: %d frames computed after pausing", n-at)
	}
	h.key(tcell.KeyRune, 'p')
	deadline := time.Now().Add(10 * time.Second)
	for src.n.Load() < at+5 {
		if time.Now().After(deadline) {
			t.Fatal("the replay did not resume")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
