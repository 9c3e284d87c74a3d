package main

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUserErrors checks the contract's exit codes and that every failure is
// one clear line on stderr, never a stack trace.
func TestUserErrors(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile("../../testdata/redis/get-p16.pcap")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(good)
	zw.Close()
	// A pcap header announcing link type 105 (IEEE 802.11).
	wifi := append([]byte(nil), good[:24]...)
	wifi[20], wifi[21], wifi[22], wifi[23] = 105, 0, 0, 0

	cases := []struct {
		name string
		args []string
		code int
		want string // substring of the one stderr line
	}{
		{"no files", []string{"decode"}, 2, "requires at least 1 arg"},
		{"bad port", []string{"decode", "--port", "redis=notaport", "x.pcap"}, 2, "redis=notaport"},
		{"unknown proto", []string{"decode", "--port", "mongo=27017", "x.pcap"}, 2, "mongo"},
		{"unknown flag", []string{"decode", "--nope", "x.pcap"}, 2, "unknown flag"},
		{"missing file", []string{"decode", filepath.Join(dir, "absent.pcap")}, 1, "absent.pcap"},
		{"empty file", []string{"decode", write("empty.pcap", nil)}, 1, "empty.pcap"},
		{"garbage", []string{"decode", write("garbage.pcap", bytes.Repeat([]byte("not a capture "), 100))}, 1, "not a pcap or pcapng file"},
		{"truncated", []string{"decode", "--count", write("trunc.pcap", good[:len(good)-37])}, 1, "truncated"},
		{"unknown link type", []string{"decode", write("wifi.pcap", wifi)}, 1, "105"},
		{"gzip ok", []string{"decode", "--count", write("ok.pcap.gz", gz.Bytes())}, 0, ""},
		{"nice out of range", []string{"run", "--nice", "40", "--config-check"}, 2, "--nice 40"},
		{"gzip truncated", []string{"decode", write("trunc.pcap.gz", gz.Bytes()[:gz.Len()/2])}, 1, "trunc.pcap.gz"},
		{"hotkeys add without key", []string{"hotkeys", "add"}, 2, "hotkeys add needs the key: hotsniff hotkeys add KEY"},
		{"hotkeys remove without key", []string{"hotkeys", "remove"}, 2, "hotkeys remove needs the key: hotsniff hotkeys remove KEY"},
		{"hotkeys add two keys", []string{"hotkeys", "add", "my", "key"}, 2, "quote a key that contains spaces"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, c.code, errOut)
			}
			var errLines []string
			for _, l := range strings.Split(strings.TrimSpace(errOut), "\n") {
				if strings.HasPrefix(l, "hotsniff: ") && !strings.Contains(l, " packets (") {
					errLines = append(errLines, l)
				}
			}
			if c.code == 0 {
				if len(errLines) != 0 {
					t.Fatalf("unexpected error output: %s", errOut)
				}
				if c.name == "gzip ok" && out != "8000\t8000\tredis\t0\tkey:__rand_int__\n" {
					t.Fatalf("gzip decode: %q", out)
				}
				return
			}
			if len(errLines) != 1 || !strings.Contains(errLines[0], c.want) {
				t.Fatalf("want one error line containing %q, got: %q", c.want, errOut)
			}
			if strings.Contains(errOut, "goroutine ") || strings.Contains(errOut, "panic") {
				t.Fatalf("stack trace on stderr: %s", errOut)
			}
		})
	}
}

// TestTruncatedKeepsWhatCameBefore: a capture cut short still yields the
// requests before the cut, and says where it was cut.
func TestTruncatedKeepsWhatCameBefore(t *testing.T) {
	good, _ := os.ReadFile("../../testdata/redis/get-p1.pcap")
	p := filepath.Join(t.TempDir(), "cut.pcap")
	os.WriteFile(p, good[:len(good)/2], 0o644)
	out, errOut, code := runCLI(t, "decode", "--count", p)
	if code != 1 || !strings.Contains(errOut, "truncated") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.HasSuffix(strings.TrimSpace(out), "redis\t0\tkey:__rand_int__") {
		t.Fatalf("no counts before the cut: %q", out)
	}
}
