package ebpfsrc

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// smallRing loads the programs detached with a ring of one page, so a few
// dozen records fill it and every test run wraps it many times.
func smallRing(t *testing.T) (*Source, *bpf.Attachment) {
	return loadDetached(t, os.Getpagesize())
}

// A flow whose packets are handled on one CPU, then another, then the
// first again has its records in two rings; the Source hands them out in
// the order they were written. Every batch is written before anything is
// read, so the first round's windows hold all three.
func TestRingsMergeInOrder(t *testing.T) {
	netnstest.RequireCPUs(t, 2)
	src, a := loadDetached(t, 1<<20)
	const n = 100
	cpus := []int{1, 0, 1, 0}
	for batch, cpu := range cpus {
		pkt := getPacket()
		binary.BigEndian.PutUint32(pkt[14+20+4:], uint32(batch*1000))
		if _, err := runOn(a, cpu, pkt, n); err != nil {
			t.Fatal(err)
		}
	}
	src.SetDeadline(time.Now().Add(10 * time.Second))
	var seg capture.Segment
	counts := make([]int, len(cpus))
	last := 0
	for total := 0; total < n*len(cpus); total++ {
		if err := src.Next(&seg); err != nil {
			t.Fatalf("after %d records: %v", total, err)
		}
		batch := int(seg.Seq / 1000)
		if batch < last || batch >= len(cpus) {
			t.Fatalf("record %d is from batch %d after batch %d", total, batch, last)
		}
		last = batch
		counts[batch]++
	}
	// BPF_PROG_TEST_RUN may rerun an interrupted batch: at least n each.
	for batch, c := range counts {
		if c < n {
			t.Errorf("batch %d: %d records, want %d", batch, c, n)
		}
	}
}

// Records written in bursts that fill the ring, read in between, come out
// whole and in order across many laps of the ring, and the consumer
// position the reader publishes lets the programs reuse the space: no
// record is lost.
func TestRingWrapsWithoutLoss(t *testing.T) {
	src, a := smallRing(t)
	pkt := getPacket()
	want := pkt[14+20+20:]
	// Records that fit, less the one record and the 64 bytes (a sixty-fourth
	// of this ring) the reader may hold back before it publishes its
	// position.
	const rec = 8 + bpf.RecHdrSize + 40
	per := (os.Getpagesize() - 64 - rec) / rec
	src.SetDeadline(time.Now().Add(30 * time.Second)) // fail, do not hang
	var seg capture.Segment
	total := 0
	// Half a ring per burst: cilium/ebpf reruns a test run that a signal
	// interrupted (EINTR), so a burst may write up to twice its records.
	for lap := range 400 {
		n := per/2 - lap%3 // vary the phase of the wrap
		if _, err := a.Program(bpf.HookXDP).Run(&ebpf.RunOptions{Data: pkt, Repeat: uint32(n)}); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := src.Next(&seg); err != nil {
				t.Fatalf("lap %d record %d: %v", lap, i, err)
			}
			if string(seg.Payload) != string(want) {
				t.Fatalf("lap %d record %d: payload %q, want %q", lap, i, seg.Payload, want)
			}
			total++
		}
		for src.Pending() > 0 { // the records of an interrupted run
			if err := src.Next(&seg); err != nil {
				t.Fatalf("lap %d: %v", lap, err)
			}
			total++
		}
	}
	cnt, err := a.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if cnt.RingbufFull != 0 || int(cnt.Records) != total {
		t.Fatalf("programs wrote %d records with %d ring-full drops; reader got %d", cnt.Records, cnt.RingbufFull, total)
	}
	if st := src.Stats(); int(st.Segments) != total || st.Malformed != 0 {
		t.Fatalf("stats %+v, want %d segments", st, total)
	}
}

// A ring filling past three quarters makes the programs shed connections
// (counted as sampled out; this one repeated connection is shed whole once
// the rate falls far enough), and a full ring drops (and counts) what does
// not fit; what was written before still reads back intact.
func TestRingFullCountsDrops(t *testing.T) {
	src, a := smallRing(t)
	pkt := getPacket()
	const n = 1000
	if _, err := a.Program(bpf.HookTCIngress).Run(&ebpf.RunOptions{Data: pkt, Repeat: n}); err != nil {
		t.Fatal(err)
	}
	cnt, err := a.Counters()
	if err != nil {
		t.Fatal(err)
	}
	smp, err := src.Capture().Sampling()
	if err != nil {
		t.Fatal(err)
	}
	// At least n: a run interrupted by a signal is rerun whole.
	if cnt.RingbufFull+smp.SampledOut == 0 || cnt.Records+cnt.RingbufFull+smp.SampledOut < n {
		t.Fatalf("counters %+v, %d sampled out: want records + ring-full + sampled out >= %d with some ring-full or sampled out", cnt, smp.SampledOut, n)
	}
	src.SetDeadline(time.Now().Add(200 * time.Millisecond))
	var seg capture.Segment
	got := 0
	for {
		err := src.Next(&seg)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got++
	}
	if uint64(got) != cnt.Records {
		t.Fatalf("read %d records, programs wrote %d", got, cnt.Records)
	}
}

// Next returns os.ErrDeadlineExceeded on an empty ring once the deadline
// passes, and io.EOF once Close is called from another goroutine while it
// waits.
func TestNextDeadlineAndClose(t *testing.T) {
	src, _ := smallRing(t)
	var seg capture.Segment
	src.SetDeadline(time.Now().Add(30 * time.Millisecond))
	if err := src.Next(&seg); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Next on an empty ring past its deadline = %v", err)
	}
	src.SetDeadline(time.Time{})
	var returned atomic.Bool
	done := make(chan error, 1)
	go func() {
		err := src.Next(&seg)
		returned.Store(true)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if returned.Load() {
		t.Fatal("Next returned on an empty ring without a deadline")
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("Next after Close = %v, want io.EOF", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a waiting Next")
	}
	if err := src.Next(&seg); !errors.Is(err, io.EOF) {
		t.Fatalf("Next on a closed source = %v, want io.EOF", err)
	}
}
