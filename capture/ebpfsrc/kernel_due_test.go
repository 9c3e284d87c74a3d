package ebpfsrc

import (
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// nopStage1 takes the counts and locates nothing.
type nopStage1 struct{ subs int }

func (n *nopStage1) KernelCountsAt(start, end int64, counts, idx []uint32, complete bool) []uint64 {
	n.subs++
	return make([]uint64, bpf.KernelBuckets/64)
}
func (n *nopStage1) KernelByteCountsAt(int64, int64, []uint32, []uint32, uint32, bool) {}
func (n *nopStage1) HotHashes(dst []uint64) []uint64                                   { return dst[:0] }

// TestKernelReaderDue: at the time Due gives, the sub-window has ended by
// the clock the programs count by (the coarse clock, a tick behind the
// fine one), so one Step there reads it. Woken at the fine clock's end,
// the reader found nothing to read and was woken again at once, spinning
// until the coarse clock ticked.
func TestKernelReaderDue(t *testing.T) {
	netnstest.RequireRoot(t)
	c, err := bpf.Open(bpf.Config{Ports: []uint16{6379}, RingSize: 1 << 20,
		KernelCount: &bpf.KernelCountConfig{Commands: testRedisTable(), SubWindow: 20 * time.Millisecond, Buckets: 4096, Protos: map[uint16]uint8{6379: 1}}})
	if err != nil {
		t.Fatalf("open bpf capture as root: %v", err)
	}
	defer c.Close()
	st := &nopStage1{}
	r := NewKernelReader(c, st, 4096)
	for i := range 10 {
		time.Sleep(time.Until(r.Due()))
		before := st.subs
		if err := r.Step(); err != nil {
			t.Fatal(err)
		}
		if st.subs == before {
			t.Fatalf("wake %d at Due: no sub-window to read (coarse clock lag %v)", i, bpf.KernelClockLag)
		}
	}
}
