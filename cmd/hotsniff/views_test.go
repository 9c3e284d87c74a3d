package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/pipeline"
	"github.com/hotsniff/hotsniff/publish"
	"github.com/hotsniff/hotsniff/stream"
)

// viewRow is one hot key as a view shows it.
type viewRow struct {
	qps, bytesPS float64
}

// TestViewsAgree runs the same fixtures through every command that reads
// traffic — replay (its published snapshot holds the rates at the end),
// top --replay --once with and without --top N, the live pipeline loop fed
// from the file, decode --count and decode --bytes — and requires the same
// hot keys with the same rates and reply bytes, and the same read and
// reply-byte totals. All of them build the one pipeline, so a stage or a
// side channel dropped by one view (top --top N once lost reply bytes and
// absorbed reports) shows here.
func TestViewsAgree(t *testing.T) {
	rdb := testutil.StartRedis(t)
	for _, tc := range []struct {
		file       string
		args       []string
		wantHot    []string
		wantBytes  bool
		bytesHotBy []string // keys that must be hot by reply bytes
	}{
		{file: "../../testdata/redis/bytes-mix.pcap.gz", args: []string{"--hot-qps", "100000", "--hot-bytes", "1000000"},
			wantHot: []string{"big:0", "hot:both"}, wantBytes: true, bytesHotBy: []string{"big:0", "hot:both"}},
		{file: "../../testdata/redis/hotkey.pcap.gz", args: []string{"--hot-qps", "1000"}, wantHot: []string{}},
		{file: "../../testdata/redis/writehot.pcap.gz", args: []string{"--hot-qps", "1000"}},
		{file: "../../testdata/tair/tair_mget_hot.pcap", args: []string{"--hot-qps", "100"}},
	} {
		t.Run(strings.TrimSuffix(strings.TrimSuffix(tc.file[strings.LastIndex(tc.file, "/")+1:], ".gz"), ".pcap"), func(t *testing.T) {
			channel := fmt.Sprintf("views:%s", t.Name())
			out, errOut, code := runCLI(t, append(append([]string{"replay", "--redis-url", "redis://" + rdb.Addr, "--channel", channel, "--node", "n1"}, tc.args...), tc.file)...)
			if code != 0 {
				t.Fatalf("replay exit %d: %s", code, errOut)
			}
			replay := snapshotRows(t, rdb.Addr, channel)
			if tc.wantHot != nil {
				if got := sortedKeys(replay); strings.Join(got, ",") != strings.Join(tc.wantHot, ",") {
					t.Fatalf("replay hot set %v, want %v\n%s", got, tc.wantHot, out)
				}
			} else if len(replay) == 0 {
				t.Fatalf("replay found no hot key:\n%s%s", out, errOut)
			}
			t.Logf("hot at the end: %v", sortedKeys(replay))
			for _, k := range tc.bytesHotBy {
				if replay[k].bytesPS <= 0 {
					t.Errorf("replay: %s has no reply bytes", k)
				}
			}
			views := map[string]map[string]viewRow{}
			for _, extra := range [][]string{nil, {"--top", "5"}, {"--top", "1"}} {
				args := append(append([]string{"top", "--replay", "--once", "--speed", "0"}, tc.args...), extra...)
				tout, terr, code := runCLI(t, append(args, tc.file)...)
				if code != 0 {
					t.Fatalf("%v: exit %d: %s", args, code, terr)
				}
				views[strings.Join(args[4:], " ")] = topRows(t, tout)
			}
			views["live pipeline"] = livePipelineRows(t, tc.file, tc.args)
			for name, rows := range views {
				if got, want := sortedKeys(rows), sortedKeys(replay); strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("%s: hot set %v, replay's %v", name, got, want)
					continue
				}
				for k, r := range rows {
					w := replay[k]
					if !near(r.qps, w.qps) {
						t.Errorf("%s: %s rate %.1f, replay's %.1f", name, k, r.qps, w.qps)
					}
					if tc.wantBytes && !nearShown(r.bytesPS, w.bytesPS) {
						t.Errorf("%s: %s reply bytes/s %.0f, replay's %.0f", name, k, r.bytesPS, w.bytesPS)
					}
				}
			}
			// decode --count and --bytes read the same traffic through the
			// same pipeline: the same summary (requests, keys, reply bytes,
			// errors, gaps, flows) as replay, and the per-key tables sum to it.
			reads, replyBytes := summaryTotals(t, errOut)
			cout, cerr, code := runCLI(t, "decode", "--count", tc.file)
			if code != 0 {
				t.Fatalf("decode --count: %s", cerr)
			}
			if got := sumColumn(t, cout, 0); got != reads {
				t.Errorf("decode --count: %d reads, replay %d", got, reads)
			}
			bout, berr, code := runCLI(t, "decode", "--bytes", tc.file)
			if code != 0 {
				t.Fatalf("decode --bytes: %s", berr)
			}
			for _, e := range []string{cerr, berr} {
				if summaryLine(e) != summaryLine(errOut) {
					t.Errorf("decode summary\n%s\nreplay's\n%s", summaryLine(e), summaryLine(errOut))
				}
			}
			if got := sumColumn(t, bout, 1); got != reads {
				t.Errorf("decode --bytes: %d reads, replay %d", got, reads)
			}
			if got := sumColumn(t, bout, 0); got > replyBytes || (tc.wantBytes && got == 0) {
				t.Errorf("decode --bytes: %d reply bytes attributed of %d", got, replyBytes)
			}
			for _, k := range tc.bytesHotBy {
				if !strings.Contains(bout, "\t"+k+"\n") {
					t.Errorf("decode --bytes does not list %s", k)
				}
			}
		})
	}
}

// summaryLine is the summary of a run without its timing.
func summaryLine(stderr string) string {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, " requests, ") {
			return l[:strings.LastIndex(l, " in ")]
		}
	}
	return ""
}

func near(a, b float64) bool { return math.Abs(a-b) <= 0.05+0.002*math.Abs(b) }

// nearShown compares a figure top printed with one decimal and a unit
// (1.2M) to the exact one.
func nearShown(shown, exact float64) bool {
	unit := 1.0
	for _, u := range []float64{1e3, 1e6, 1e9} {
		if exact >= u {
			unit = u
		}
	}
	return math.Abs(shown-exact) <= 0.05*unit+0.5
}

func sortedKeys(m map[string]viewRow) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// snapshotRows reads the hot set replay left in the channel's snapshot.
func snapshotRows(t *testing.T, addr, channel string) map[string]viewRow {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	b, err := c.Get(context.Background(), publish.SnapshotKey(channel)).Bytes()
	if err != nil {
		t.Fatalf("read snapshot: %v", err)
	}
	var doc struct {
		Keys []event.Event `json:"keys"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("parse snapshot: %v", err)
	}
	out := map[string]viewRow{}
	for _, e := range doc.Keys {
		out[string(e.Key)] = viewRow{qps: e.QPS, bytesPS: e.BytesPS}
	}
	return out
}

// topRows reads the hot rows of top's plain table.
func topRows(t *testing.T, out string) map[string]viewRow {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		t.Fatalf("top printed no table:\n%s", out)
	}
	head := strings.Fields(lines[1])
	col := func(name string) int {
		for i, h := range head {
			if h == name {
				return i
			}
		}
		t.Fatalf("top: no %s column in %q", name, lines[1])
		return -1
	}
	rate, state, bytesCol, keyCol := col("RATE"), col("STATE"), col("BYTES/S"), col("KEY")
	rows := map[string]viewRow{}
	for _, l := range lines[2:] {
		f := strings.Fields(l)
		// TREND may be two fields ("████ →"): count from the end for the
		// key and bytes, from the state backwards for the rest.
		if len(f) < len(head) {
			continue
		}
		off := len(f) - len(head)
		if f[state+off] != "hot" {
			continue
		}
		r := viewRow{qps: parseNum(t, f[rate])}
		if b := f[bytesCol+off]; b != "-" {
			r.bytesPS = parseNum(t, b)
		}
		rows[f[keyCol+off]] = r
	}
	return rows
}

// parseNum reads top's numbers: 594.4, 1.2M, 830k, ~1200.0, ≥32000.0.
func parseNum(t *testing.T, s string) float64 {
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "k"):
		mult, s = 1e3, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "M"):
		mult, s = 1e6, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1e9, strings.TrimSuffix(s, "G")
	}
	// "~": scaled up from sampled connections; "≥": a lower bound (a key
	// caught faster than its rate can be timed). The figure is the same.
	v, err := strconv.ParseFloat(strings.TrimPrefix(strings.TrimPrefix(s, "~"), "≥"), 64)
	if err != nil {
		t.Fatalf("top: number %q: %v", s, err)
	}
	return v * mult
}

// livePipelineRows runs the file through the live loop (pipeline.Run, as
// `run` does) and takes the hot set after the last segment.
func livePipelineRows(t *testing.T, file string, args []string) map[string]viewRow {
	t.Helper()
	cfg := detect.Config{}
	for i := 0; i+1 < len(args); i += 2 {
		v, _ := strconv.ParseFloat(args[i+1], 64)
		switch args[i] {
		case "--hot-qps":
			cfg.HotQPS = v
		case "--hot-bytes":
			cfg.HotBytes = v
		}
	}
	scfg := stream.DefaultConfig()
	scfg.Replies = true
	pl, err := pipeline.New(pipeline.Config{Stream: scfg, Detect: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	src := &lastHotSet{Source: pipeline.OpenFiles([]string{file}, pipeline.FileOptions{}), pl: pl}
	if err := pl.Run(src, pipeline.LiveOptions{}); err != nil {
		t.Fatal(err)
	}
	rows := map[string]viewRow{}
	for _, e := range src.hot {
		rows[string(e.Key)] = viewRow{qps: e.QPS, bytesPS: e.BytesPS}
	}
	return rows
}

// lastHotSet takes the pipeline's hot set when its source ends, before the
// live loop's closing tick moves the clock to the wall.
type lastHotSet struct {
	capture.Source
	pl  *pipeline.Pipeline
	hot []event.Event
}

func (l *lastHotSet) Next(seg *capture.Segment) error {
	err := l.Source.Next(seg)
	if errors.Is(err, io.EOF) {
		l.pl.Flush()
		l.hot = l.pl.HotSet()
	}
	return err
}

// summaryTotals reads the reads and reply bytes of a summary line.
func summaryTotals(t *testing.T, stderr string) (reads, replyBytes uint64) {
	t.Helper()
	l := summaryLine(stderr)
	if l == "" {
		t.Fatalf("no summary line in %q", stderr)
	}
	i := strings.Index(l, " keys (")
	fmt.Sscanf(l[i+len(" keys ("):], "%d reads", &reads)
	if j := strings.Index(l, " reply bytes"); j > 0 {
		k := strings.LastIndex(l[:j], ", ")
		fmt.Sscanf(l[k+2:j], "%d", &replyBytes)
	}
	return reads, replyBytes
}

// sumColumn sums column i of tab-separated lines.
func sumColumn(t *testing.T, out string, i int) uint64 {
	t.Helper()
	var n uint64
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(l, "\t")
		if len(f) <= i {
			continue
		}
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			continue // a header line
		}
		n += v
	}
	return n
}
