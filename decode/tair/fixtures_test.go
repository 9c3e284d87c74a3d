package tair

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/hotsniff/hotsniff/decode"
)

// The fixtures in testdata/tair are made by tools/gen/tairfixtures,
// which writes each golden from its own bookkeeping. There is deliberately
// no -update flag here: the decoder must match the generator, not itself.
var fixtureNames = []string{"tair_prefix_hot", "tair_mget_hot", "tair_mixed", "tair_midstream"}

// TestFixtures reassembles every connection of each fixture pcap by
// sequence number (with gopacket, test-only), feeds each direction segment
// by segment through the consumed/tail/skip contract, and compares the
// `--count` lines of the reads with the golden file byte for byte.
func TestFixtures(t *testing.T) {
	for _, name := range fixtureNames {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("..", "..", "testdata", "tair")
			got := countPcap(t, filepath.Join(dir, name+".pcap"))
			want, err := os.ReadFile(filepath.Join(dir, name+".count.golden"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("count lines differ from %s.count.golden\n got:\n%s\nwant:\n%s", name, head(got), head(want))
			}
		})
	}
}

func head(b []byte) string {
	lines := strings.SplitAfter(string(b), "\n")
	return strings.Join(lines[:min(len(lines), 15)], "")
}

// dirStream is one direction of one connection being reassembled.
type dirStream struct {
	p    decode.Parser
	next uint32
	buf  []byte
	skip int
}

type countKey struct {
	ns  int32
	key string
}

// countSinkFx sums reads per (ns, key) like `hotsniff decode --count`.
type countSinkFx struct {
	decode.Discard
	t      *testing.T
	counts map[countKey]*[2]uint64
	errs   map[string]int
}

func (*countSinkFx) Request(*decode.Flow, *decode.Request) {}
func (c *countSinkFx) Key(_ *decode.Flow, r *decode.Request, k decode.Key) {
	if r.Write {
		return
	}
	ck := countKey{r.NS, string(k.Bytes)}
	cw := c.counts[ck]
	if cw == nil {
		cw = new([2]uint64)
		c.counts[ck] = cw
	}
	cw[0]++
	cw[1] += uint64(k.Weight)
}
func (c *countSinkFx) Error(_ *decode.Flow, reason string) { c.errs[reason]++ }

func countPcap(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	d := New(Config{})
	streams := map[[2]netip.AddrPort]*dirStream{}
	joined := 0 // connections whose first packet is not a SYN
	reqSink := &countSinkFx{t: t, counts: map[countKey]*[2]uint64{}, errs: map[string]int{}}
	respSink := &countSinkFx{t: t, counts: map[countKey]*[2]uint64{}, errs: map[string]int{}}
	for {
		data, ci, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		pkt := gopacket.NewPacket(data, layers.LinkTypeEthernet, gopacket.NoCopy)
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if ip == nil || tcp == nil {
			t.Fatalf("packet without IPv4/TCP")
		}
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip.SrcIP.To4())), uint16(tcp.SrcPort))
		dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip.DstIP.To4())), uint16(tcp.DstPort))
		toServer := dst.Port() == 5191
		k := [2]netip.AddrPort{src, dst}
		st := streams[k]
		if st == nil {
			dir := decode.ToClient
			if toServer {
				dir = decode.ToServer
			}
			mid := !tcp.SYN
			if mid && toServer {
				joined++
			}
			st = &dirStream{p: d.NewParser(dir, mid), next: tcp.Seq}
			if tcp.SYN {
				st.next++
			}
			streams[k] = st
		}
		if len(tcp.Payload) == 0 {
			continue
		}
		if tcp.Seq != st.next {
			t.Fatalf("%v: seq %d, want %d (fixtures have no loss)", k, tcp.Seq, st.next)
		}
		st.next += uint32(len(tcp.Payload))
		f := decode.Flow{Client: src, Server: dst, Proto: decode.ProtoTair, TS: ci.Timestamp.UnixNano()}
		sink := reqSink
		if !toServer {
			f.Client, f.Server = dst, src
			sink = respSink
		}
		c := tcp.Payload
		if st.skip > 0 {
			n := min(st.skip, len(c))
			c, st.skip = c[n:], st.skip-n
		}
		st.buf = append(st.buf, c...)
		used := st.p.Parse(st.buf, &f, sink)
		if used > len(st.buf) {
			st.skip, used = used-len(st.buf), len(st.buf)
		}
		st.buf = append(st.buf[:0], st.buf[used:]...)
	}
	// A connection joined mid-stream drops the bytes before its first whole
	// frame: one resync per direction and per joined connection at most,
	// and nothing else.
	for _, errs := range []map[string]int{reqSink.errs, respSink.errs} {
		for reason, n := range errs {
			if reason != ReasonResync || n > joined {
				t.Errorf("decode errors: requests %v, responses %v (%d connections joined mid-stream)", reqSink.errs, respSink.errs, joined)
			}
		}
	}
	if len(respSink.counts) != 0 {
		t.Errorf("response parser reported keys")
	}
	return formatCounts(reqSink.counts)
}

// formatCounts writes the `hotsniff decode --count` lines (docs/events.md).
func formatCounts(m map[countKey]*[2]uint64) []byte {
	type row struct {
		count, weight uint64
		ns, key       string
	}
	var rows []row
	for k, cw := range m {
		rows = append(rows, row{cw[0], cw[1], decode.NSString(k.ns), k.key})
	}
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(b.weight, a.weight), cmp.Compare(b.count, a.count),
			strings.Compare(a.ns, b.ns), strings.Compare(a.key, b.key))
	})
	var sb strings.Builder
	for _, r := range rows {
		key := r.key
		if !printableString(key) {
			key = strconv.Quote(key)
		}
		fmt.Fprintf(&sb, "%d\t%d\ttair\t%s\t%s\n", r.count, r.weight, r.ns, key)
	}
	return []byte(sb.String())
}

func printableString(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) })
}
