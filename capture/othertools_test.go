package capture_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

type seg struct {
	ts      int64
	src     string
	dst     string
	seq     uint32
	payload string
}

func readSegs(t *testing.T, path string) []seg {
	t.Helper()
	f, err := capture.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []seg
	var s capture.Segment
	for {
		err := f.Next(&s)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("%s: %v", path, err)
			}
			return out
		}
		out = append(out, seg{s.TS, s.Src.String(), s.Dst.String(), s.Seq, string(s.Payload)})
	}
}

// TestOtherWriters rewrites real tcpdump captures with other tools' writers
// (every pcap flavour editcap writes, pcapng, mergecap, tcpdump's own
// writer) and checks each reads as the original, which TestRealCaptures
// checks against tshark.
func TestOtherWriters(t *testing.T) {
	editcap := netnstest.Need(t, "editcap")
	mergecap := netnstest.Need(t, "mergecap")
	tcpdump := netnstest.Need(t, "tcpdump")
	tshark := netnstest.Need(t, "tshark")
	dir := t.TempDir()
	for _, src := range []string{"redis-eth.pcap", "redis-sll2-nano.pcap"} {
		in := filepath.Join("testdata", src)
		want := readSegs(t, in)
		type conv struct {
			name string
			args []string
			usec bool // the writer keeps microseconds only
		}
		var convs []conv
		for _, format := range []string{"pcap", "nsecpcap", "modpcap", "rh6_1pcap", "suse6_3pcap", "nokiapcap", "pcapng"} {
			convs = append(convs, conv{"editcap -F " + format, []string{editcap, "-F", format, in}, format != "nsecpcap" && format != "pcapng"})
		}
		convs = append(convs,
			conv{"mergecap -F pcap", []string{mergecap, "-F", "pcap", "-w", "OUT", in}, true},
			conv{"mergecap (pcapng)", []string{mergecap, "-w", "OUT", in}, false},
			conv{"tcpdump -r -w", []string{tcpdump, "-r", in, "-w", "OUT"}, true},
		)
		for i, c := range convs {
			t.Run(src+"/"+c.name, func(t *testing.T) {
				out := filepath.Join(dir, src+strconv.Itoa(i))
				args := c.args
				if !slices.Contains(args, "OUT") {
					args = append(args[:len(args):len(args)], out)
				} else {
					args = replace(args, "OUT", out)
				}
				if b, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
					t.Fatalf("%v: %v\n%s", args, err, b)
				}
				// The other reader agrees the file is whole.
				if b, err := exec.Command(tshark, "-r", out, "-T", "fields", "-e", "frame.number").Output(); err != nil ||
					bytes.Count(b, []byte("\n")) != len(want) {
					t.Fatalf("tshark reads %d packets of %s (%v), want %d", bytes.Count(b, []byte("\n")), c.name, err, len(want))
				}
				got := readSegs(t, out)
				if len(got) != len(want) {
					t.Fatalf("%d segments, want %d", len(got), len(want))
				}
				for j := range want {
					w := want[j]
					if c.usec {
						w.ts -= w.ts % 1000
					}
					if got[j] != w {
						t.Fatalf("segment %d: got %+v\nwant %+v", j, got[j], w)
					}
				}
			})
		}
	}
}

// TestSwappedVersionFixture: the committed memcached capture whose header
// carries its version in the other byte order than its magic (as a writer
// in the wild did) reads like any other: tshark reads it, and its counts are
// checked against the clients' truth by TestFixtureCounts.
func TestSwappedVersionFixture(t *testing.T) {
	path := filepath.Join("..", "testdata", "memcache", "libmemcached-swapped-version.pcap")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[:8], []byte{0xd4, 0xc3, 0xb2, 0xa1, 0x00, 0x02, 0x00, 0x04}) {
		t.Fatalf("fixture header % x: not the byte-swapped version", b[:8])
	}
	segs := readSegs(t, path)
	tshark := netnstest.Need(t, "tshark")
	out, err := exec.Command(tshark, "-r", path, "-Y", "tcp", "-T", "fields", "-e", "tcp.seq_raw").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != len(segs) {
		t.Fatalf("tshark sees %d TCP packets, hotsniff %d", len(lines), len(segs))
	}
	for i, l := range lines {
		if l != strconv.FormatUint(uint64(segs[i].seq), 10) {
			t.Fatalf("packet %d: tshark seq %s, hotsniff %d", i+1, l, segs[i].seq)
		}
	}
}

func replace(s []string, old, new string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		if x == old {
			x = new
		}
		out[i] = x
	}
	return out
}
