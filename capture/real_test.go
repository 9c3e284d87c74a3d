package capture

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// realCaptures are tcpdump/dumpcap captures of redis traffic on loopback,
// made by testdata/mkcaptures.sh, each with tshark's view of it beside it.
var realCaptures = []string{
	"redis-eth.pcap",
	"redis-sll.pcap",
	"redis-sll2-nano.pcap",
	"redis-lo-any.pcapng",
	"redis-eth-gzipped.pcapng",
}

// tsharkRow is one line of a .tshark.tsv golden file (see mkcaptures.sh).
type tsharkRow struct {
	ts       int64
	src, dst netip.AddrPort
	seq, ack uint32
	flags    uint8
	payload  []byte
}

func readTshark(t *testing.T, path string) []tsharkRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []tsharkRow
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		c := strings.Split(sc.Text(), "\t")
		if len(c) != 12 {
			t.Fatalf("%s: %d columns in %q", path, len(c), sc.Text())
		}
		// time_epoch ip.src ipv6.src srcport ip.dst ipv6.dst dstport seq ack flags len payload
		var r tsharkRow
		sec, frac, _ := strings.Cut(c[0], ".")
		frac = (frac + "000000000")[:9]
		s, err1 := strconv.ParseInt(sec, 10, 64)
		ns, err2 := strconv.ParseInt(frac, 10, 64)
		r.ts = s*1e9 + ns
		r.src = netip.MustParseAddrPort(addrPort(c[1]+c[2], c[3]))
		r.dst = netip.MustParseAddrPort(addrPort(c[4]+c[5], c[6]))
		seq, err3 := strconv.ParseUint(c[7], 10, 32)
		ack, err4 := strconv.ParseUint(c[8], 10, 32)
		flags, err5 := strconv.ParseUint(strings.TrimPrefix(c[9], "0x"), 16, 16)
		n, err6 := strconv.Atoi(c[10])
		payload, err7 := hex.DecodeString(c[11])
		for _, err := range []error{err1, err2, err3, err4, err5, err6, err7} {
			if err != nil {
				t.Fatalf("%s: %q: %v", path, sc.Text(), err)
			}
		}
		if len(payload) != n {
			t.Fatalf("%s: tcp.len %d but %d payload bytes", path, n, len(payload))
		}
		r.seq, r.ack, r.flags, r.payload = uint32(seq), uint32(ack), uint8(flags), payload
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

func addrPort(ip, port string) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]:" + port
	}
	return ip + ":" + port
}

// TestRealCaptures checks every TCP packet of real captures against tshark:
// flow, sequence numbers, flags, payload bytes and time, one to one.
func TestRealCaptures(t *testing.T) {
	for _, name := range realCaptures {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", name)
			rows := readTshark(t, path+".tshark.tsv")
			f, err := OpenFile(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var seg Segment
			i := 0
			withPayload := 0
			for ; f.Next(&seg) == nil; i++ {
				if i >= len(rows) {
					t.Fatalf("more segments than tshark's %d", len(rows))
				}
				r := rows[i]
				if seg.TS != r.ts || seg.Src != r.src || seg.Dst != r.dst || seg.Seq != r.seq ||
					seg.Ack != r.ack || seg.Flags != r.flags || !bytes.Equal(seg.Payload, r.payload) || seg.Missing != 0 {
					t.Errorf("segment %d:\n got %d %v>%v seq %d ack %d flags %#x %q missing %d\nwant %d %v>%v seq %d ack %d flags %#x %q",
						i, seg.TS, seg.Src, seg.Dst, seg.Seq, seg.Ack, seg.Flags, seg.Payload, seg.Missing,
						r.ts, r.src, r.dst, r.seq, r.ack, r.flags, r.payload)
				}
				if len(seg.Payload) > 0 {
					withPayload++
				}
			}
			st := f.Stats()
			if i != len(rows) || st.Packets != uint64(len(rows)) || st.Skipped != 0 || st.Malformed != 0 {
				t.Errorf("%d segments, stats %+v; tshark saw %d TCP packets", i, st, len(rows))
			}
			fi, _ := os.Stat(path)
			if st.Bytes != uint64(fi.Size()) || f.Size() != fi.Size() {
				t.Errorf("Bytes %d Size %d, file is %d bytes", st.Bytes, f.Size(), fi.Size())
			}
			t.Logf("%d segments, %d with payload", i, withPayload)
		})
	}
}

// TestRealCapturesRequests counts the GET requests redis-cli and
// redis-benchmark sent (1 + 64, partly pipelined 16 to a segment) in what
// the client sent, per interface of the capture.
func TestRealCapturesRequests(t *testing.T) {
	get := []byte("*2\r\n$3\r\nGET\r\n")
	for _, name := range realCaptures {
		f, err := OpenFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		var seg Segment
		gets, server := 0, uint16(0)
		for f.Next(&seg) == nil {
			if seg.Flags&FlagSYN != 0 && seg.Flags&FlagACK == 0 {
				server = seg.Dst.Port()
			}
			if seg.Dst.Port() == server {
				gets += bytes.Count(seg.Payload, get)
			}
		}
		f.Close()
		want := 65
		if name == "redis-lo-any.pcapng" {
			want = 130 // every packet seen on lo and on any
		}
		if gets != want {
			t.Errorf("%s: %d GET requests, want %d", name, gets, want)
		}
	}
}

// TestTsharkGoldens re-derives the golden files with tshark, when it is
// installed, so a stale golden cannot hide a bug.
func TestTsharkGoldens(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark not installed")
	}
	for _, name := range realCaptures {
		path := filepath.Join("testdata", name)
		out, err := exec.Command("tshark", "-r", path, "-Y", "tcp", "-T", "fields", "-E", "separator=/t",
			"-e", "frame.time_epoch", "-e", "ip.src", "-e", "ipv6.src", "-e", "tcp.srcport",
			"-e", "ip.dst", "-e", "ipv6.dst", "-e", "tcp.dstport", "-e", "tcp.seq_raw", "-e", "tcp.ack_raw",
			"-e", "tcp.flags", "-e", "tcp.len", "-e", "tcp.payload").Output()
		if err != nil {
			t.Fatalf("tshark %s: %v", name, err)
		}
		golden, err := os.ReadFile(path + ".tshark.tsv")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, golden) {
			t.Errorf("%s: tshark output differs from %s.tshark.tsv (%s)", name, name,
				fmt.Sprintf("%d vs %d bytes", len(out), len(golden)))
		}
	}
}
