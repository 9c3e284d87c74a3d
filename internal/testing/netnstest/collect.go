package netnstest

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/capture"
)

// FlowKey is one direction of a TCP connection.
type FlowKey struct{ Src, Dst netip.AddrPort }

type piece struct {
	seq     uint32
	payload []byte
	missing uint32
}

// Collector reads a capture.Source in the background and keeps every
// segment, so a test can rebuild each byte stream and compare it with what
// the client sent. It is a test aid, not a reassembler: it holds everything.
type Collector struct {
	src  capture.Source
	done chan struct{}

	mu       sync.Mutex
	flows    map[FlowKey][]piece
	isn      map[FlowKey]uint32 // SYN seq + 1, when a SYN was seen
	segments int
	bytes    int
	missing  int
	err      error
}

// Collect starts reading src. Stop (or test cleanup) closes src.
func Collect(t testing.TB, src capture.Source) *Collector {
	c := &Collector{src: src, done: make(chan struct{}), flows: map[FlowKey][]piece{}, isn: map[FlowKey]uint32{}}
	go c.loop()
	t.Cleanup(func() { c.Stop() })
	return c
}

func (c *Collector) loop() {
	defer close(c.done)
	var seg capture.Segment
	for {
		err := c.src.Next(&seg)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.mu.Lock()
				c.err = err
				c.mu.Unlock()
			}
			return
		}
		k := FlowKey{seg.Src, seg.Dst}
		c.mu.Lock()
		c.segments++
		c.bytes += len(seg.Payload)
		c.missing += int(seg.Missing)
		seq := seg.Seq
		if seg.Flags&capture.FlagSYN != 0 {
			c.isn[k] = seg.Seq + 1
			seq++
		}
		if len(seg.Payload) > 0 || seg.Missing > 0 {
			c.flows[k] = append(c.flows[k], piece{seq, bytes.Clone(seg.Payload), seg.Missing})
		}
		c.mu.Unlock()
	}
}

// Stop closes the source and waits for the reader to finish.
func (c *Collector) Stop() error {
	err := c.src.Close()
	<-c.done
	return err
}

// Totals returns segments, payload bytes and Missing bytes read so far.
func (c *Collector) Totals() (segments, payload, missing int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.segments, c.bytes, c.missing
}

// Err is the error that ended the reader, other than io.EOF.
func (c *Collector) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Stream rebuilds one direction by sequence number. Bytes reported missing
// or never seen become gaps: gap counts them and they are absent from data.
// Retransmitted or duplicate bytes are kept once.
func (c *Collector) Stream(k FlowKey) (data []byte, gap int) {
	data, holes, missing := c.StreamGaps(k)
	return data, holes + missing
}

// StreamGaps is Stream with the gap split in two: holes are bytes no
// segment covered (lost), missing those a segment reported as not copied
// (truncated), each counted once however often it was retransmitted.
func (c *Collector) StreamGaps(k FlowKey) (data []byte, holes, missing int) {
	c.mu.Lock()
	ps := append([]piece(nil), c.flows[k]...)
	base, haveISN := c.isn[k]
	c.mu.Unlock()
	if len(ps) == 0 {
		return nil, 0, 0
	}
	if !haveISN {
		base = ps[0].seq
		for _, p := range ps {
			if int32(p.seq-base) < 0 {
				base = p.seq
			}
		}
	}
	sort.SliceStable(ps, func(i, j int) bool { return int32(ps[i].seq-base) < int32(ps[j].seq-base) })
	next := base
	for _, p := range ps {
		d := int32(p.seq - next)
		if d > 0 {
			holes += int(d)
			next = p.seq
		}
		skip := int(next - p.seq)
		if skip < len(p.payload) {
			data = append(data, p.payload[skip:]...)
			next += uint32(len(p.payload) - skip)
		}
		if end := p.seq + uint32(len(p.payload)) + p.missing; int32(end-next) > 0 {
			missing += int(end - next)
			next = end
		}
	}
	return data, holes, missing
}

// Flows lists the directions seen.
func (c *Collector) Flows() []FlowKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []FlowKey
	for k := range c.flows {
		out = append(out, k)
	}
	return out
}

// ToServer concatenates the streams of every flow sent to server, with the
// total gap; flows are ordered by client port so the result is stable.
func (c *Collector) ToServer(server netip.AddrPort) (data []byte, gap int) {
	ks := c.Flows()
	sort.Slice(ks, func(i, j int) bool { return ks[i].Src.Port() < ks[j].Src.Port() })
	for _, k := range ks {
		if k.Dst == server {
			d, g := c.Stream(k)
			data = append(data, d...)
			gap += g
		}
	}
	return data, gap
}

// WaitBytes waits until at least n payload bytes were read, or fails t.
func (c *Collector) WaitBytes(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, b, m := c.Totals()
		if b+m >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("captured %d payload bytes (+%d missing), want %d", b, m, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitStream waits until the direction k holds at least n bytes (rebuilt
// or reported missing). Prefer it to WaitBytes when replies flow too: the
// totals count both directions and reach n early.
func (c *Collector) WaitStream(t testing.TB, k FlowKey, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		data, gap := c.Stream(k)
		if len(data)+gap >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("flow %v: captured %d bytes (+%d gap), want %d", k, len(data), gap, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitIdle waits until no segment arrived for quiet, at most timeout.
func (c *Collector) WaitIdle(quiet, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	last, _, _ := c.Totals()
	lastChange := time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(quiet / 5)
		n, _, _ := c.Totals()
		if n != last {
			last, lastChange = n, time.Now()
		} else if time.Since(lastChange) >= quiet {
			return
		}
	}
}
