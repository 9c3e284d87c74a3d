package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

// Forged field values: an OSC title change, a screen clear, a cursor move,
// a bell, a carriage return that overwrites the row, a newline that forges
// a whole row, a C1 CSI and a bidi override.
var forged = []string{
	"\x1b]0;pwned\x07",
	"\x1b[2J\x1b[H",
	"10.0.0.5:6379\x1b[1A",
	"redis\rFORGED",
	"0\nFORGED hot redis 1.2.3.4:6379 0 evil 9999",
	"\u009b31m",
	"\u202eevil",
}

// terminalSafe fails unless out has no byte a terminal acts on: no ESC,
// BEL, CR, C1 control or bidi override, and exactly wantLines lines.
func terminalSafe(t *testing.T, out string, wantLines int) {
	t.Helper()
	for _, bad := range []string{"\x1b", "\x07", "\r", "\u009b", "\u202e"} {
		if strings.Contains(out, bad) {
			t.Errorf("output contains %q:\n%q", bad, out)
		}
	}
	if n := strings.Count(out, "\n"); n != wantLines {
		t.Errorf("output has %d lines, want %d (a newline in a field forged a row):\n%s", n, wantLines, out)
	}
	if strings.Contains(out, "\nFORGED") {
		t.Errorf("forged row:\n%s", out)
	}
}

// TestSubscribeTextEscapes publishes forged events on a real Redis channel
// (anyone with PUBLISH rights can) and checks `subscribe --output text`
// prints every field escaped, one row per event.
func TestSubscribeTextEscapes(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	url := "redis://" + r.Addr + "/0"
	sub, stop := startSubscribe(t, rdb, "--redis-url", url, "--channel", "hk", "--output", "text")
	for i, f := range forged {
		msg, _ := json.Marshal(map[string]any{
			"v": 1, "seq": i + 1, "type": "hot", "proto": f, "server": f, "ns": f, "key": "k" + f,
			"qps": 100, "ttl_ms": 1000, "ts": "2026-11-29T18:00:00Z", "source": "detected", "node": f,
		})
		if err := rdb.Publish(context.Background(), "hk", msg).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A forged type too.
	msg := fmt.Sprintf(`{"v":1,"seq":%d,"type":"hot\u001b]2;x\u0007","proto":"redis","server":"a:1","ns":"0","key":"k","qps":1,"ttl_ms":1,"ts":"2026-11-29T18:00:00Z"}`, len(forged)+1)
	rdb.Publish(context.Background(), "hk", msg)
	// One clean event last, to know everything before it was printed.
	rdb.Publish(context.Background(), "hk", fmt.Sprintf(`{"v":1,"seq":%d,"type":"hot","proto":"redis","server":"a:1","ns":"0","key":"last","qps":1,"ttl_ms":1,"ts":"2026-11-29T18:00:00Z"}`, len(forged)+2))
	for deadline := 0; !strings.Contains(strings.Join(sub.Lines(), "\n"), " last "); deadline++ {
		if deadline > 300 {
			t.Fatalf("last event never printed: %q", sub.Lines())
		}
		waitLines(t, sub, 1)
		sleepMs(10)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	out := strings.Join(sub.Lines(), "\n") + "\n"
	// Header, the forged events, maybe the forged type, the last one.
	lines := strings.Count(out, "\n")
	if lines < len(forged)+2 {
		t.Fatalf("only %d lines:\n%s", lines, out)
	}
	terminalSafe(t, out, lines)
	if lines > len(forged)+3 {
		t.Errorf("%d lines for %d events:\n%s", lines, len(forged)+2, out)
	}
	if !strings.Contains(out, `"\x1b]0;pwned\a"`) {
		t.Errorf("OSC sequence not shown quoted:\n%s", out)
	}
}

// TestTopEscapes points `top` at a forged /hotkeys (a daemon address an
// attacker answers) and checks the table shows every field escaped.
func TestTopEscapes(t *testing.T) {
	var keys []map[string]any
	for i, f := range forged {
		keys = append(keys, map[string]any{
			"v": 1, "seq": i + 1, "type": "hot", "proto": f, "server": f, "ns": f, "key": fmt.Sprintf("k%d%s", i, f),
			"qps": 1000 + i, "ttl_ms": 1000, "ts": "2026-11-29T18:00:00Z", "source": f, "node": f,
		})
	}
	doc, _ := json.Marshal(map[string]any{"v": 1, "node": "\x1b]0;node\x07\nFORGED", "ts": "2026-11-29T18:00:00Z", "hot_qps": 1000, "keys": keys})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(doc) }))
	defer srv.Close()
	out, errs, code := runTopCLI(t, "--addr", strings.TrimPrefix(srv.URL, "http://"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// The header line, the titles, one row per key.
	terminalSafe(t, out, 2+len(forged))
	if !strings.Contains(out, `node "\x1b]0;node\a\nFORGED"`) {
		t.Errorf("node not quoted:\n%s", out)
	}
}

func sleepMs(n int) { time.Sleep(time.Duration(n) * time.Millisecond) }

// writeRedisPcap writes a pcap of one client connection to 127.0.0.1:6379
// (handshake, then one GET of key per millisecond, n of them), as a
// capture of a client sending hostile keys would hold.
func writeRedisPcap(t *testing.T, path, key string, n int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	cli, srv := net.IPv4(127, 0, 0, 2), net.IPv4(127, 0, 0, 1)
	start := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	cseq, sseq := uint32(1000), uint32(5000)
	write := func(at time.Duration, fromClient bool, syn, ack bool, payload []byte) {
		eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: cli, DstIP: srv}
		tcp := &layers.TCP{SrcPort: 40000, DstPort: 6379, Seq: cseq, Ack: sseq, SYN: syn, ACK: ack, PSH: len(payload) > 0, Window: 65535}
		if !fromClient {
			ip.SrcIP, ip.DstIP = srv, cli
			tcp.SrcPort, tcp.DstPort, tcp.Seq, tcp.Ack = 6379, 40000, sseq, cseq
		}
		tcp.SetNetworkLayerForChecksum(ip)
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp, gopacket.Payload(payload)); err != nil {
			t.Fatal(err)
		}
		b := buf.Bytes()
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: start.Add(at), CaptureLength: len(b), Length: len(b)}, b); err != nil {
			t.Fatal(err)
		}
		adv := uint32(len(payload))
		if syn {
			adv = 1
		}
		if fromClient {
			cseq += adv
		} else {
			sseq += adv
		}
	}
	write(0, true, true, false, nil)
	write(time.Microsecond, false, true, true, nil)
	write(2*time.Microsecond, true, false, true, nil)
	get := fmt.Appendf(nil, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(key), key)
	for i := range n {
		at := time.Duration(i+1) * time.Millisecond
		write(at, true, false, true, get)
		write(at+10*time.Microsecond, false, false, true, []byte("$-1\r\n"))
	}
}

// TestReplayTextEscapes replays a capture whose client sent a key with an
// OSC title sequence and a newline: `replay --output text` prints the key
// quoted, on one row.
func TestReplayTextEscapes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hostile.pcap")
	writeRedisPcap(t, path, "k\x1b]0;pwned\x07\nFORGED", 2000)
	out, errs, code := runCLI(t, "replay", "--output", "text", "--hot-qps", "100", "--progress", "never", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, `"k\x1b]0;pwned\a\nFORGED"`) {
		t.Fatalf("hostile key not printed quoted:\n%s\n%s", out, errs)
	}
	terminalSafe(t, out, strings.Count(out, "\n"))
}
