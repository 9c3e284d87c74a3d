package pipeline

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/pcapgo"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/stream"
)

// repeatCapture builds an in-memory pcap holding the fixture's traffic reps
// times over, as one long run of the same connections: each repetition's
// TCP sequence numbers continue where the previous ended and handshakes and
// closes are left out after the first. That is steady state: every flow is
// known, so the benchmark measures the per-packet path, not setup.
func repeatCapture(tb testing.TB, path string, reps int) (pcap []byte, packets int) {
	tb.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			tb.Fatal(err)
		}
		if raw, err = io.ReadAll(zr); err != nil {
			tb.Fatal(err)
		}
	}
	pr, err := pcapgo.NewReader(bytes.NewReader(raw))
	if err != nil {
		tb.Fatal(err)
	}
	type pkt struct {
		ts     int64
		data   []byte
		seqOff int // offset of the TCP sequence number in data, -1 if none
		dir    string
		plen   int
		syn    bool
		fin    bool // FIN or RST
	}
	var pkts []pkt
	var seg capture.Segment
	totals := map[string]uint32{}
	var first, last int64
	for {
		data, ci, err := pr.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
		p := pkt{ts: ci.Timestamp.UnixNano(), data: data, seqOff: -1}
		if err := capture.ParsePacket(capture.LinkType(pr.LinkType()), data, &seg); err == nil {
			ihl := int(data[14]&0x0f) * 4
			p.seqOff = 14 + ihl + 4
			p.dir = seg.Src.String() + ">" + seg.Dst.String()
			p.plen = len(seg.Payload)
			p.syn = seg.Flags&capture.FlagSYN != 0
			p.fin = seg.Flags&(capture.FlagFIN|capture.FlagRST) != 0
			totals[p.dir] += uint32(p.plen)
		}
		if first == 0 {
			first = p.ts
		}
		last = p.ts
		pkts = append(pkts, p)
	}
	span := last - first + 1000
	var out bytes.Buffer
	w := pcapgo.NewWriterNanos(&out)
	if err := w.WriteFileHeader(262144, pr.LinkType()); err != nil {
		tb.Fatal(err)
	}
	buf := make([]byte, 0, 65536+100)
	for rep := 0; rep < reps; rep++ {
		for _, p := range pkts {
			if (rep > 0 && p.syn) || (rep < reps-1 && p.fin) {
				continue
			}
			buf = append(buf[:0], p.data...)
			if p.seqOff >= 0 {
				seq := binary.BigEndian.Uint32(buf[p.seqOff:])
				binary.BigEndian.PutUint32(buf[p.seqOff:], seq+uint32(rep)*totals[p.dir])
			}
			ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, p.ts+int64(rep)*span), CaptureLength: len(buf), Length: len(buf)}
			if err := w.WritePacket(ci, buf); err != nil {
				tb.Fatal(err)
			}
			packets++
		}
	}
	return out.Bytes(), packets
}

// nopSink counts nothing: the benchmark measures capture, stream and decode.
type nopSink struct {
	decode.Discard
	keys int
}

func (n *nopSink) Request(*decode.Flow, *decode.Request)         {}
func (n *nopSink) Key(*decode.Flow, *decode.Request, decode.Key) { n.keys++ }
func (n *nopSink) Error(*decode.Flow, string)                    {}

// ReplyKey and Reply are its own (not Discard's), so benchmarks with reply
// pairing run the whole attribution path.
func (n *nopSink) ReplyKey(*decode.Flow, int32, decode.Key, uint64) {}
func (n *nopSink) Reply(*decode.Flow, uint64, bool)                 {}

func benchFile(b *testing.B, fixture string, reps int) { benchFileCfg(b, fixture, reps, false) }

func benchFileCfg(b *testing.B, fixture string, reps int, replies bool) {
	data, packets := repeatCapture(b, fixture, reps)
	cfg := stream.DefaultConfig()
	cfg.Replies = replies
	var requests uint64
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, err := capture.OpenReader("bench", bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		p, err := New(Config{Stream: cfg, Tap: func(decode.Sink) decode.Sink { return &nopSink{} }})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Feed(context.Background(), f, 0); err != nil {
			b.Fatal(err)
		}
		p.Flush()
		counter, asm := p.Counter(), p.asm
		requests, _, _, _, _ = counter.Totals()
		if replies && counter.ReplyBytes[decode.ProtoRedis]+counter.ReplyBytes[decode.ProtoMemcache] == 0 {
			b.Fatal("no reply bytes decoded")
		}
		if st := asm.Stats(); st.TotalGaps() != 0 {
			b.Fatalf("stream gaps in steady-state replay: %+v", st)
		}
	}
	el := b.Elapsed().Seconds()
	b.ReportMetric(float64(requests)*float64(b.N)/el, "requests/s")
	b.ReportMetric(float64(packets)*float64(b.N)/el, "packets/s")
	b.ReportMetric(float64(packets), "packets/op")
}

// BenchmarkFilePipelined is the whole file path on redis-benchmark -P 16 GET
// traffic: pcap bytes -> segments -> reassembly -> RESP -> keys.
func BenchmarkFilePipelined(b *testing.B) { benchFile(b, "../testdata/redis/get-p16.pcap", 50) }

// BenchmarkFileUnpipelined is the same on redis-benchmark -P 1 GET traffic.
func BenchmarkFileUnpipelined(b *testing.B) { benchFile(b, "../testdata/redis/get-p1.pcap", 50) }

// BenchmarkFileReplies* are the whole file path on redis-benchmark -P 16
// SET/GET traffic with 1000-byte values (testdata/redis/bytes-bench), with
// replies dropped (Off: how hot keys by requests cost) and with every reply
// paired with its request and its bytes attributed to the key (On).
func BenchmarkFileRepliesOff(b *testing.B) {
	benchFileCfg(b, "../testdata/redis/bytes-bench.pcap.gz", 10, false)
}

func BenchmarkFileRepliesOn(b *testing.B) {
	benchFileCfg(b, "../testdata/redis/bytes-bench.pcap.gz", 10, true)
}

// BenchmarkFileRepliesMemcache is the same with pairing on over the
// memcached fixture of gomemcache gets, meta and binary batches.
func BenchmarkFileRepliesMemcacheOff(b *testing.B) {
	benchFileCfg(b, "../testdata/memcache/bytes.pcap.gz", 10, false)
}

func BenchmarkFileRepliesMemcacheOn(b *testing.B) {
	benchFileCfg(b, "../testdata/memcache/bytes.pcap.gz", 10, true)
}

// TestSteadyStateAllocs holds the per-packet path to zero allocations, with
// and without reply pairing: replaying the capture repeated 20 and 40 times
// must allocate exactly as much (opening the reader and the assembler,
// each connection's parsers and its warmed-up queue), whatever the number
// of packets.
func TestSteadyStateAllocs(t *testing.T) {
	for _, replies := range []bool{false, true} {
		t.Run(fmt.Sprintf("replies=%v", replies), func(t *testing.T) {
			cfg := stream.DefaultConfig()
			cfg.Replies = replies
			var got [2]float64
			var packets [2]int
			for i, reps := range []int{20, 40} {
				var data []byte
				data, packets[i] = repeatCapture(t, "../testdata/redis/get-p16.pcap", reps)
				got[i] = testing.AllocsPerRun(3, func() {
					f, err := capture.OpenReader("bench", bytes.NewReader(data))
					if err != nil {
						t.Fatal(err)
					}
					p, err := New(Config{Stream: cfg, Tap: func(decode.Sink) decode.Sink { return &nopSink{} }})
					if err != nil {
						t.Fatal(err)
					}
					if err := p.Feed(context.Background(), f, 0); err != nil {
						t.Fatal(err)
					}
					p.Flush()
				})
			}
			if got[1] != got[0] || got[0] > 200 {
				t.Errorf("%.0f allocations for %d packets, %.0f for %d: the per-packet path allocates", got[0], packets[0], got[1], packets[1])
			} else {
				t.Logf("%.0f allocations for %d packets and for %d", got[0], packets[0], packets[1])
			}
		})
	}
}
