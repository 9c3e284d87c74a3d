package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

// TestTopRedisURL: two replays publish the write-hot fixture to one Redis
// as two daemons (nodes cache-node-a with v1 messages, cache-node-b with v2
// batches); `top --redis-url --once` lists every node's keys from the
// channel's snapshot, with the node, demand, write rate and cacheable
// columns; the rates are the current ones the publishers keep in the
// snapshot, not those of the first hot message.
func TestTopRedisURL(t *testing.T) {
	r := testutil.StartRedis(t)
	url := "redis://" + r.Addr
	for _, node := range []struct{ name, format string }{{"cache-node-a", "v1"}, {"cache-node-b", "v2"}} {
		_, errOut, code := runCLI(t, "replay", "--redis-url", url, "--node", node.name, "--channel-format", node.format,
			"--hot-qps", "1000", "../../testdata/redis/writehot.pcap.gz")
		if code != 0 {
			t.Fatalf("replay as %s: exit %d: %s", node.name, code, errOut)
		}
	}
	out, errOut, code := runCLI(t, "top", "--redis-url", url, "--once")
	if code != 0 {
		t.Fatalf("top: exit %d: %s", code, errOut)
	}
	t.Logf("\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.Contains(lines[0], "channel hotsniff:hotkeys · 2 nodes") {
		t.Errorf("header %q", lines[0])
	}
	// Columns are found by their titles, so a column added later does not
	// break this test; the TREND cell is two fields (sparkline, arrow).
	titles := strings.Fields(lines[1])
	col := func(name string) int {
		for i, t := range titles {
			if strings.TrimRight(t, "▲▼") == name {
				if i > 1 {
					return i + 1
				}
				return i
			}
		}
		t.Fatalf("no %s column in %q", name, lines[1])
		return -1
	}
	iRate, iNode, iWrite, iCache := col("RATE"), col("NODE"), col("WRITE/S"), col("CACHE")
	seen := map[string]bool{}
	for _, l := range lines[2:] {
		f := strings.Fields(l)
		if len(f) != len(titles)+1 {
			t.Errorf("row %q", l)
			continue
		}
		node, cache, key := f[iNode], f[iCache], f[len(f)-1]
		seen[node+" "+key] = true
		switch key {
		case "bench:hot":
			// The rates measured at the end of the replay (12 000 reads/s,
			// 4 000 writes/s), which the publisher keeps in the snapshot.
			q, _ := strconv.ParseFloat(f[iRate], 64)
			w, _ := strconv.ParseFloat(f[iWrite], 64)
			if cache != "no" || q < 11000 || q > 13000 || w < 3600 || w > 4400 {
				t.Errorf("bench:hot from %s: %q, want ~12000 demand, ~4000 writes/s, CACHE no", node, l)
			}
		case "bench:warm":
			if cache != "yes" {
				t.Errorf("bench:warm from %s: %q, want CACHE yes", node, l)
			}
		}
	}
	for _, want := range []string{"cache-node-a bench:hot", "cache-node-b bench:hot", "cache-node-a bench:warm", "cache-node-b bench:warm"} {
		if !seen[want] {
			t.Errorf("no row %s:\n%s", want, out)
		}
	}
	if _, errOut, code := runCLI(t, "top", "--redis-url", url, "--replay", "x.pcap"); code != 2 || !strings.Contains(errOut, "exclude each other") {
		t.Errorf("--redis-url with --replay: exit %d, %q", code, errOut)
	}
}
