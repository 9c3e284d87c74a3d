package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hotsniff/hotsniff/event"
)

// TestFixtureBytes decodes every capture that has a NAME.bytes.golden and
// compares `decode --bytes` with the reply bytes its generator expected from
// the values it stored and the protocol's reply encoding: exact to the byte
// for every key, pipelined and multi-key reads included.
func TestFixtureBytes(t *testing.T) {
	goldens, _ := filepath.Glob("../../testdata/*/*.bytes.golden")
	if len(goldens) < 3 {
		t.Fatalf("found %d reply-bytes fixtures, want redis, memcache and tair ones", len(goldens))
	}
	for _, golden := range goldens {
		base := strings.TrimSuffix(golden, ".bytes.golden")
		var pcap string
		for _, ext := range []string{".pcap", ".pcapng", ".pcap.gz", ".pcapng.gz"} {
			if _, err := os.Stat(base + ext); err == nil {
				pcap = base + ext
				break
			}
		}
		if pcap == "" {
			t.Fatalf("no capture beside %s", golden)
		}
		t.Run(strings.TrimPrefix(base, "../../testdata/"), func(t *testing.T) {
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			out, errOut, code := runCLI(t, "decode", "--bytes", pcap)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if out != string(want) {
				t.Errorf("reply bytes differ from the generator's truth\n%s\nsummary: %s", diffLines(string(want), out), errOut)
			}
		})
	}
}

// TestReplayHotByBytes: in bytes-mix, "big:0" (50 000-byte value, ~40
// reads/s) is far below --hot-qps 500 but above --hot-bytes 1 MB/s, and
// "hot:both" (2 000 bytes, ~600 reads/s) is above both. Nothing else is hot.
func TestReplayHotByBytes(t *testing.T) {
	out, errOut, code := runCLI(t, "replay", "--hot-qps", "500", "--hot-bytes", "1000000", "../../testdata/redis/bytes-mix.pcap.gz")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := map[string]string{"big:0": event.ReasonBytes, "hot:both": event.ReasonQPSBytes}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e event.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("bad event line %q: %v", line, err)
		}
		k := string(e.Key)
		r, ok := want[k]
		if !ok {
			t.Errorf("unexpected event: %s", line)
			continue
		}
		if e.Type != event.TypeHot {
			continue
		}
		seen[k] = true
		if e.Reason != r {
			t.Errorf("%s: reason %q, want %q: %s", k, e.Reason, r, line)
		}
		if e.BytesPS < 1e6 {
			t.Errorf("%s: bytes_ps %v below --hot-bytes: %s", k, e.BytesPS, line)
		}
		switch k {
		case "big:0":
			// Every reply is "$50000\r\n", the value and CRLF.
			if e.ValueBytes != 50010 {
				t.Errorf("big:0: value_bytes %v, want 50010", e.ValueBytes)
			}
			if e.QPS >= 500 || e.QPS < 20 {
				t.Errorf("big:0: qps %v, want about 40", e.QPS)
			}
		case "hot:both":
			if e.QPS < 500 {
				t.Errorf("hot:both: qps %v below --hot-qps", e.QPS)
			}
			if e.ValueBytes < 1900 || e.ValueBytes > 2100 {
				t.Errorf("hot:both: value_bytes %v, want about 2009", e.ValueBytes)
			}
		}
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("no hot event for %s\n%s", k, out)
		}
	}
	// Without --hot-bytes the same capture makes only hot:both hot, by qps,
	// and events carry no reason.
	out, errOut, code = runCLI(t, "replay", "--hot-qps", "500", "../../testdata/redis/bytes-mix.pcap.gz")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e event.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("bad event line %q: %v", line, err)
		}
		if string(e.Key) != "hot:both" || e.Reason != "" {
			t.Errorf("without --hot-bytes: %s", line)
		}
	}
}
