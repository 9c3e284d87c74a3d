package memcache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/hotsniff/hotsniff/decode"
)

// event is what a recording sink saw: a request (key == nil), a key, or an
// error (reason != "").
type event struct {
	op     string
	write  bool
	key    string
	isKey  bool
	reason string
}

func (e event) String() string {
	switch {
	case e.reason != "":
		return "error " + e.reason
	case e.isKey:
		return fmt.Sprintf("key %s %q w=%v", e.op, e.key, e.write)
	}
	return fmt.Sprintf("req %s w=%v", e.op, e.write)
}

// recSink records everything, copying keys (they alias the parser's input).
type recSink struct {
	decode.Discard
	ev []event
}

func (s *recSink) Request(_ *decode.Flow, r *decode.Request) {
	if r.NS != decode.NoNS {
		panic("memcache request with a namespace")
	}
	s.ev = append(s.ev, event{op: r.Op, write: r.Write})
}

func (s *recSink) Key(_ *decode.Flow, r *decode.Request, k decode.Key) {
	if k.Weight != 1 || k.Prefix {
		panic("memcache key with weight != 1 or prefix")
	}
	s.ev = append(s.ev, event{op: r.Op, write: r.Write, key: string(k.Bytes), isKey: true})
}

func (s *recSink) Error(_ *decode.Flow, reason string) {
	s.ev = append(s.ev, event{reason: reason})
}

func (s *recSink) keys() []string {
	var ks []string
	for _, e := range s.ev {
		if e.isKey {
			ks = append(ks, e.key)
		}
	}
	return ks
}

func (s *recSink) reads() map[string]int {
	m := map[string]int{}
	for _, e := range s.ev {
		if e.isKey && !e.write {
			m[e.key]++
		}
	}
	return m
}

func (s *recSink) errors() []string {
	var r []string
	for _, e := range s.ev {
		if e.reason != "" {
			r = append(r, e.reason)
		}
	}
	return r
}

// stream drives a parser the way the stream layer does: unconsumed bytes are
// offered again with the next chunk, and a return beyond the buffer skips
// that many bytes of what follows.
type stream struct {
	p    *Parser
	f    decode.Flow
	buf  []byte
	skip int
}

func newStream(midStream bool) *stream {
	return &stream{p: NewParser(midStream), f: decode.Flow{Proto: decode.ProtoMemcache}}
}

func (st *stream) feed(chunk []byte, s decode.Sink) {
	if st.skip > 0 {
		n := min(st.skip, len(chunk))
		st.skip -= n
		chunk = chunk[n:]
		if len(chunk) == 0 {
			return
		}
	}
	st.buf = append(st.buf, chunk...)
	n := st.p.Parse(st.buf, &st.f, s)
	if n < 0 {
		panic("negative consumed")
	}
	if n > len(st.buf) {
		st.skip = n - len(st.buf)
		st.buf = st.buf[:0]
		return
	}
	st.buf = append(st.buf[:0], st.buf[n:]...)
	if len(st.buf) >= maxLine {
		panic(fmt.Sprintf("parser left %d bytes unconsumed: memory is no longer bounded", len(st.buf)))
	}
}

// decodeChunks decodes chunks of one stream and returns what was seen.
func decodeChunks(midStream bool, chunks ...[]byte) *recSink {
	s := &recSink{}
	st := newStream(midStream)
	for _, c := range chunks {
		st.feed(c, s)
	}
	return s
}

// decodeAll decodes b in one call.
func decodeAll(b []byte) *recSink { return decodeChunks(false, b) }

// conn is the client-to-server side of one TCP connection from a pcap.
type conn struct {
	client   netip.AddrPort
	sawSYN   bool
	segments [][]byte // payloads in sequence order, overlaps trimmed
}

// readPcap returns the client-to-server payloads of every connection to
// port 11211 in file, in order of first appearance. It is a test-only
// reassembler: segments are ordered by sequence number and retransmitted
// bytes dropped; loopback captures have no losses.
func readPcap(t testing.TB, file string) []*conn {
	t.Helper()
	fh, err := os.Open(file)
	if err != nil {
		t.Fatalf("open pcap: %v", err)
	}
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	if err != nil {
		t.Fatalf("read pcap header: %v", err)
	}
	type seg struct {
		seq  uint32
		data []byte
	}
	type flow struct {
		c    *conn
		isn  uint32
		have bool
		segs []seg
	}
	flows := map[netip.AddrPort]*flow{}
	var order []*flow
	var eth layers.Ethernet
	var ip4 layers.IPv4
	var tcp layers.TCP
	var payload gopacket.Payload
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &tcp, &payload)
	parser.IgnoreUnsupported = true
	var decoded []gopacket.LayerType
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read packet: %v", err)
		}
		if err := parser.DecodeLayers(data, &decoded); err != nil {
			t.Fatalf("decode packet: %v", err)
		}
		if tcp.DstPort != 11211 {
			continue
		}
		src, _ := netip.AddrFromSlice(ip4.SrcIP)
		key := netip.AddrPortFrom(src, uint16(tcp.SrcPort))
		fl := flows[key]
		if fl == nil {
			fl = &flow{c: &conn{client: key}}
			flows[key] = fl
			order = append(order, fl)
		}
		if tcp.SYN {
			fl.c.sawSYN = true
			fl.isn, fl.have = tcp.Seq+1, true
			continue
		}
		if len(tcp.Payload) == 0 {
			continue
		}
		if !fl.have {
			fl.isn, fl.have = tcp.Seq, true
		}
		fl.segs = append(fl.segs, seg{tcp.Seq - fl.isn, bytes.Clone(tcp.Payload)})
	}
	var conns []*conn
	for _, fl := range order {
		sort.SliceStable(fl.segs, func(i, j int) bool { return fl.segs[i].seq < fl.segs[j].seq })
		next := uint32(0)
		for _, s := range fl.segs {
			if s.seq > next {
				t.Fatalf("%s: hole in capture at %d", fl.c.client, next)
			}
			if end := s.seq + uint32(len(s.data)); end > next {
				fl.c.segments = append(fl.c.segments, s.data[next-s.seq:])
				next = end
			}
		}
		conns = append(conns, fl.c)
	}
	return conns
}

// readGolden parses a --count golden file into key -> count, checking that
// WEIGHT equals COUNT (every memcache key has weight 1) and the columns.
func readGolden(t testing.TB, file string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("read golden: %v", err)
	}
	m := map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 || f[0] != f[1] || f[2] != "memcache" || f[3] != "" {
			t.Fatalf("bad golden line %q", line)
		}
		n, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatalf("bad golden count %q", line)
		}
		k := f[4]
		if strings.HasPrefix(k, `"`) {
			if k, err = strconv.Unquote(k); err != nil {
				t.Fatalf("bad golden key %q", line)
			}
		}
		m[k] = n
	}
	return m
}
