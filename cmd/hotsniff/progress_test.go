package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/capture"
)

// TestProgressBar: on a terminal (forced here) long replays show bytes,
// rate and ETA on one redrawn line, cleared at the end; otherwise nothing.
func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	if newProgress(&buf, "auto") != nil {
		t.Fatal("progress drawn on a non-terminal")
	}
	if newProgress(&buf, "never") != nil {
		t.Fatal("progress despite --progress never")
	}
	p := newProgress(&buf, "always")
	p.startFile("/data/big.pcap.gz", 4<<20)
	p.start = time.Now().Add(-2 * time.Second)
	p.last = time.Now().Add(-time.Second)
	p.update(capture.Stats{Packets: 200000, Bytes: 1 << 20})
	line := buf.String()
	for _, want := range []string{"\r", "big.pcap.gz", "25%", "1.0MiB/4.0MiB", "pkt/s", "ETA 6s"} {
		if !strings.Contains(line, want) {
			t.Errorf("progress line %q lacks %q", line, want)
		}
	}
	// Redraws are rate-limited.
	n := buf.Len()
	p.update(capture.Stats{Packets: 200001, Bytes: 1<<20 + 1})
	if buf.Len() != n {
		t.Error("redrawn within 200ms")
	}
	p.finishFile(capture.Stats{})
	if !strings.HasSuffix(buf.String(), "\r\033[K") {
		t.Errorf("line not cleared at the end: %q", buf.String())
	}
}
