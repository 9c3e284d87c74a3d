package shimtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client"
)

// TestMemoryBounded: the cache is bounded in bytes as well as in keys: a
// value over MaxValueBytes is never kept (its reads go to Redis), values
// past MaxBytes are not kept, and keys over MaxKeyBytes are not even held
// as hot.
func TestMemoryBounded(t *testing.T) {
	e := newShimEnv(t, client.ShimOptions{LocalTTL: time.Minute, DisableTracking: true,
		MaxValueBytes: 100 << 10, MaxBytes: 300 << 10, MaxKeyBytes: 64})
	ctx := context.Background()
	big := strings.Repeat("x", 200<<10)
	mid := strings.Repeat("y", 90<<10)
	e.plain.Set(ctx, "big", big, 0)
	keys := []string{"m1", "m2", "m3", "m4", "m5"}
	for _, k := range keys {
		e.plain.Set(ctx, k, mid, 0)
	}
	long := strings.Repeat("k", 65)
	e.plain.Set(ctx, long, "v", 0)
	e.makeHot(t, append(keys, "big")...)
	e.emit("hot", long)
	time.Sleep(100 * time.Millisecond)
	if n := e.shim.Stats().HotKeys; n != 6 {
		t.Errorf("%d hot keys, want 6 (the long key is not held)", n)
	}
	read := func(k string, n int) int {
		resetStats(t, e.plain)
		for range n {
			e.app.Get(ctx, k)
		}
		return calls(t, e.plain, "get")
	}
	if n := read("big", 10); n != 10 {
		t.Errorf("a value over MaxValueBytes: %d of 10 GETs reached Redis, want all", n)
	}
	if n := read(long, 10); n != 10 {
		t.Errorf("a key over MaxKeyBytes: %d of 10 GETs reached Redis, want all", n)
	}
	for _, k := range keys {
		read(k, 3)
	}
	st := e.shim.Stats()
	if st.Bytes > 300<<10 || st.Bytes < 2*(90<<10) {
		t.Errorf("cached %d bytes, want between two values and MaxBytes (300 KiB)", st.Bytes)
	}
	if st.TooBig == 0 || st.Evictions["bytes"] == 0 {
		t.Errorf("too big %d, not kept for bytes %d; want both counted", st.TooBig, st.Evictions["bytes"])
	}
	e.app.Del(ctx, keys...)
	time.Sleep(50 * time.Millisecond)
	if b := e.shim.Stats().Bytes; b != 0 {
		t.Errorf("%d bytes counted after every value was dropped", b)
	}
}
