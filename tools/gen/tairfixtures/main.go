// Command tairfixtures writes the Tair fixture captures in testdata/tair:
// Ethernet/IPv4/TCP pcaps of classic Tair traffic to port 5191, made with the
// tairwire encoder (from the spec; no Tair server or client can run here),
// and beside each NAME.pcap the ground truth NAME.count.golden in the
// `hotsniff decode --count` format, computed from this generator's own
// bookkeeping of what it sent, never from the decoder.
//
//	go run ./tools/gen/tairfixtures -out testdata/tair
//
// Output is deterministic (fixed seeds, fixed clock).
package main

import (
	"cmp"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/hotsniff/hotsniff/decode"
	w "github.com/hotsniff/hotsniff/internal/testing/tairwire"
)

const (
	serverPort = 5191
	mss        = 1448
)

var epoch = time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)

func main() {
	out := flag.String("out", filepath.Join("testdata", "tair"), "directory to write the fixtures to")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "tairfixtures")
	for _, g := range []struct {
		name string
		fn   func(*fixture)
	}{
		{"tair_prefix_hot", genPrefixHot},
		{"tair_mget_hot", genMGetHot},
		{"tair_mixed", genMixed},
		{"tair_midstream", genMidStream},
		{"tair_bytes", genBytes},
	} {
		if err := write(*out, g.name, g.fn); err != nil {
			log.Error("write fixture", "name", g.name, "err", err)
			os.Exit(1)
		}
		log.Info("wrote fixture", "name", g.name)
	}
}

// fixture is one pcap being written plus the ground truth of its reads.
type fixture struct {
	pw    *pcapgo.Writer
	rng   *rand.Rand
	err   error
	lines map[line]*[2]uint64 // (ns, key) -> count, weight
	bytes map[line]*[2]uint64 // (ns, key) -> reply bytes, reads
	chid  uint32
	now   time.Duration // time of the last packet, kept monotonic
}

type line struct {
	ns  uint16
	key string
}

func write(dir, name string, gen func(*fixture)) error {
	f, err := os.Create(filepath.Join(dir, name+".pcap"))
	if err != nil {
		return fmt.Errorf("create pcap: %w", err)
	}
	defer f.Close()
	fx := &fixture{pw: pcapgo.NewWriter(f), rng: rand.New(rand.NewPCG(uint64(len(name)), 5191)),
		lines: map[line]*[2]uint64{}, chid: 100}
	if err := fx.pw.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		return fmt.Errorf("write pcap header: %w", err)
	}
	gen(fx)
	if fx.err != nil {
		return fmt.Errorf("write packets: %w", fx.err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close pcap: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".count.golden"), fx.golden(), 0o644); err != nil {
		return fmt.Errorf("write golden: %w", err)
	}
	if fx.bytes != nil {
		if err := os.WriteFile(filepath.Join(dir, name+".bytes.golden"), fx.bytesGolden(), 0o644); err != nil {
			return fmt.Errorf("write bytes golden: %w", err)
		}
	}
	return nil
}

// req is one encoded request and the reads it stands for.
type req struct {
	b     []byte
	reads []line
	w     []uint64
}

func (fx *fixture) nextChid() uint32 { fx.chid++; return fx.chid }

// read returns a request whose reads are the pick-keys of its entries,
// following the pick-key rules: a mixed key counts on its pkey, one line per
// run of entries sharing it, weighted by the run's length; a plain key is
// one line of weight 1.
func read(b []byte, ns uint16, keys ...w.Entry) req {
	r := req{b: b}
	run := false // the last line is a pkey run
	for _, k := range keys {
		pk := string(k.PickKey())
		if k.Prefix > 0 && run && r.reads[len(r.reads)-1].key == pk {
			r.w[len(r.w)-1]++
			continue
		}
		r.reads = append(r.reads, line{ns, pk})
		r.w = append(r.w, 1)
		run = k.Prefix > 0
	}
	return r
}

func writeReq(b []byte) req { return req{b: b} }

func (fx *fixture) golden() []byte {
	type row struct {
		count, weight uint64
		ns, key       string
	}
	var rows []row
	for l, cw := range fx.lines {
		rows = append(rows, row{cw[0], cw[1], strconv.Itoa(int(l.ns)), l.key})
	}
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(b.weight, a.weight), cmp.Compare(b.count, a.count),
			strings.Compare(a.ns, b.ns), strings.Compare(a.key, b.key))
	})
	var sb strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&sb, "%d\t%d\ttair\t%s\t%s\n", r.count, r.weight, r.ns, decode.CountKey(r.key))
	}
	return []byte(sb.String())
}

// conn is one client connection to the server, with both byte streams.
type conn struct {
	fx         *fixture
	cli, srv   netip.AddrPort
	cmac, smac net.HardwareAddr
	cisn, sisn uint32
	// cpos / spos are the stream offsets generated so far; bytes below
	// chide / shide were sent before the capture started (mid-stream join).
	cpos, spos   int
	chide, shide int
}

func (fx *fixture) conn(i int, port uint16) *conn {
	return &conn{
		fx:   fx,
		cli:  netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(10 + i)}), port),
		srv:  netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, 5}), serverPort),
		cmac: net.HardwareAddr{2, 0, 0, 0, 0, byte(10 + i)},
		smac: net.HardwareAddr{2, 0, 0, 0, 0, 5},
		cisn: fx.rng.Uint32(), sisn: fx.rng.Uint32(),
	}
}

// open writes the three-way handshake.
func (c *conn) open(ts time.Duration) {
	c.packet(ts, true, layers.TCP{SYN: true, Seq: c.cisn}, nil)
	c.packet(ts+50*time.Microsecond, false, layers.TCP{SYN: true, ACK: true, Seq: c.sisn, Ack: c.cisn + 1}, nil)
	c.packet(ts+100*time.Microsecond, true, layers.TCP{ACK: true, Seq: c.cisn + 1, Ack: c.sisn + 1}, nil)
}

// close writes FIN, FIN, ACK.
func (c *conn) close(ts time.Duration) {
	cs, ss := c.cisn+1+uint32(c.cpos), c.sisn+1+uint32(c.spos)
	c.packet(ts, true, layers.TCP{FIN: true, ACK: true, Seq: cs, Ack: ss}, nil)
	c.packet(ts+50*time.Microsecond, false, layers.TCP{FIN: true, ACK: true, Seq: ss, Ack: cs + 1}, nil)
	c.packet(ts+100*time.Microsecond, true, layers.TCP{ACK: true, Seq: cs + 1, Ack: ss + 1}, nil)
}

// send writes a pipelined batch of requests from the client, records the
// reads of every request the capture sees from its first byte, and cuts the
// bytes into segments the way real stacks do: one request per segment,
// several per segment, or requests split at arbitrary points.
func (c *conn) send(ts time.Duration, reqs ...req) time.Duration {
	var buf []byte
	for _, r := range reqs {
		if c.cpos+len(buf) >= c.chide {
			for i, l := range r.reads {
				cw := c.fx.lines[l]
				if cw == nil {
					cw = new([2]uint64)
					c.fx.lines[l] = cw
				}
				cw[0]++
				cw[1] += r.w[i]
			}
		}
		buf = append(buf, r.b...)
	}
	var cuts []int
	switch p := c.fx.rng.Float64(); {
	case p < 0.45: // one segment per request
		n := 0
		for _, r := range reqs {
			n += len(r.b)
			cuts = append(cuts, n)
		}
	case p < 0.8: // coalesced
		cuts = []int{len(buf)}
	default: // split at random points
		for n := 0; n < len(buf); {
			n = min(len(buf), n+1+c.fx.rng.IntN(max(len(buf)/2, 1)))
			cuts = append(cuts, n)
		}
	}
	return c.segments(ts, true, buf, cuts)
}

// reply writes server frames as one or more segments.
func (c *conn) reply(ts time.Duration, frames ...[]byte) time.Duration {
	var buf []byte
	for _, f := range frames {
		buf = append(buf, f...)
	}
	return c.segments(ts, false, buf, []int{len(buf)})
}

func (c *conn) segments(ts time.Duration, fromClient bool, buf []byte, cuts []int) time.Duration {
	prev := 0
	for _, cut := range cuts {
		for prev < cut {
			n := min(cut-prev, mss)
			seg := buf[prev : prev+n]
			pos, hide := &c.spos, c.shide
			isn, ack := c.sisn, c.cisn+1+uint32(c.cpos)
			if fromClient {
				pos, hide = &c.cpos, c.chide
				isn, ack = c.cisn, c.sisn+1+uint32(c.spos)
			}
			start := *pos
			if skip := hide - start; skip > 0 {
				seg = seg[min(skip, len(seg)):]
				start += min(skip, n)
			}
			if len(seg) > 0 {
				c.packet(ts, fromClient, layers.TCP{PSH: true, ACK: true, Seq: isn + 1 + uint32(start), Ack: ack}, seg)
				ts += 20 * time.Microsecond
			}
			*pos += n
			prev += n
		}
	}
	return ts
}

func (c *conn) packet(ts time.Duration, fromClient bool, tcp layers.TCP, payload []byte) {
	if c.fx.err != nil {
		return
	}
	ts = max(ts, c.fx.now)
	c.fx.now = ts
	src, dst, smac, dmac := c.cli, c.srv, c.cmac, c.smac
	if !fromClient {
		src, dst, smac, dmac = c.srv, c.cli, c.smac, c.cmac
	}
	eth := &layers.Ethernet{SrcMAC: smac, DstMAC: dmac, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, Flags: layers.IPv4DontFragment,
		SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
	tcp.SrcPort, tcp.DstPort, tcp.Window = layers.TCPPort(src.Port()), layers.TCPPort(dst.Port()), 65535
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		c.fx.err = err
		return
	}
	sb := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(sb, opts, eth, ip, &tcp, gopacket.Payload(payload)); err != nil {
		c.fx.err = fmt.Errorf("serialize packet: %w", err)
		return
	}
	data := sb.Bytes()
	ci := gopacket.CaptureInfo{Timestamp: epoch.Add(ts), CaptureLength: len(data), Length: len(data)}
	if err := c.fx.pw.WritePacket(ci, data); err != nil {
		c.fx.err = fmt.Errorf("write packet: %w", err)
	}
}
