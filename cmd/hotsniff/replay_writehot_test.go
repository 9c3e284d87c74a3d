package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/event"
)

// TestReplayWriteHot replays the write-hot fixture (testdata/README.md):
// bench:hot read 12 000/s and written 4 000/s for 2.5 s, bench:warm read
// 2 000/s and written 4/s. The write-hot key is published cacheable:false
// within milliseconds of becoming hot, with its write rate, and its 10 000
// writes cost at most the coalescing cap before the verdict and no
// invalidate after it; the rarely written key stays cacheable and every
// one of its writes is invalidated.
func TestReplayWriteHot(t *testing.T) {
	out, errOut, code := runCLI(t, "replay", "--hot-qps", "1000", "../../testdata/redis/writehot.pcap.gz")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	inv := map[string]int{}
	var hotAt, verdictAt time.Time
	var afterVerdict int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e event.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("bad event line %q: %v", line, err)
		}
		k := string(e.Key)
		switch {
		case e.Type == event.TypeInvalidate:
			inv[k]++
			if k == "bench:hot" && !verdictAt.IsZero() {
				afterVerdict++
			}
		case e.Type == event.TypeHot && k == "bench:hot":
			if hotAt.IsZero() {
				hotAt = e.TS
			}
			if e.Uncacheable && verdictAt.IsZero() {
				verdictAt = e.TS
				if !strings.Contains(line, `"cacheable":false`) || e.WriteQPS <= 0 {
					t.Errorf("verdict event %s: want cacheable:false and write_qps", line)
				}
			}
		case e.Type == event.TypeHot && k == "bench:warm":
			if e.Uncacheable {
				t.Errorf("bench:warm (4 writes/s) published uncacheable: %s", line)
			}
		}
	}
	if verdictAt.IsZero() {
		t.Fatalf("bench:hot never published cacheable:false\n%s", out)
	}
	t.Logf("bench:hot: hot at %s, cacheable:false %v later; %d invalidates (%d after the verdict); bench:warm: %d invalidates",
		hotAt.Format(event.TSFormat), verdictAt.Sub(hotAt), inv["bench:hot"], afterVerdict, inv["bench:warm"])
	if d := verdictAt.Sub(hotAt); d > 10*time.Millisecond {
		t.Errorf("verdict %v after the key became hot", d)
	}
	// The cap: one invalidate per 10ms interval until the verdict.
	if limit := 1 + int(verdictAt.Sub(hotAt)/(10*time.Millisecond)) + 1; inv["bench:hot"] > limit || afterVerdict != 0 {
		t.Errorf("bench:hot: %d invalidates (%d after the verdict), cap %d before it and none after", inv["bench:hot"], afterVerdict, limit)
	}
	// bench:warm: 10 writes 250ms apart, each its own invalidate (it may
	// turn hot after the first).
	if n := inv["bench:warm"]; n < 9 || n > 10 {
		t.Errorf("bench:warm: %d invalidates for 10 writes", n)
	}
}
