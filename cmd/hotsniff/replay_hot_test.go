package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/hotsniff/hotsniff/event"
)

// TestReplayFindsPlantedHotKeys replays each protocol's hot-key fixture and
// requires exactly the planted key to turn hot, at the right server and
// namespace, and nothing else: the truth comes from the fixtures'
// generators (testdata/README.md).
func TestReplayFindsPlantedHotKeys(t *testing.T) {
	cases := []struct {
		file, hotQPS           string
		proto, server, ns, key string
		prefix                 bool
	}{
		{"redis/hotkey.pcap.gz", "1000", "redis", "127.0.0.1:6379", "0", "item:hot", false},
		{"memcache/hotkey.pcap", "1000", "memcache", "127.0.0.1:11211", "", "item:hot", false},
		{"tair/tair_prefix_hot.pcap", "1000", "tair", "10.0.0.5:5191", "12", "hot:item", true},
		{"tair/tair_mget_hot.pcap", "500", "tair", "10.0.0.5:5191", "3", "user:hot", false},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			out, errOut, code := runCLI(t, "replay", "--hot-qps", c.hotQPS, "../../testdata/"+c.file)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			hot := 0
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				var e event.Event
				if err := json.Unmarshal([]byte(line), &e); err != nil {
					t.Fatalf("bad event line %q: %v", line, err)
				}
				if string(e.Key) != c.key || e.Proto != c.proto || e.Server != c.server || e.NS != c.ns || e.Prefix != c.prefix {
					t.Errorf("event for something else than the planted key: %s", line)
				}
				if e.Type == "hot" {
					hot++
					if thr, _ := strconv.ParseFloat(c.hotQPS, 64); e.QPS < 0.9*thr {
						t.Errorf("hot at qps %v, below the threshold %s", e.QPS, c.hotQPS)
					}
				}
			}
			if hot == 0 {
				t.Errorf("no hot event for %s\n%s", c.key, errOut)
			}
		})
	}
}
