package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/capture"
)

// TestNoMatchHint: a port map that matches nothing in the files says so and
// names the ports the traffic was on, for decode and replay alike.
func TestNoMatchHint(t *testing.T) {
	for _, cmd := range []string{"decode", "replay"} {
		out, errOut, code := runCLI(t, cmd, "--port", "redis=6380", "../../testdata/redis/get-p1.pcap")
		if code != 0 || out != "" {
			t.Fatalf("%s: exit %d, stdout %q", cmd, code, out)
		}
		want := "hotsniff: no packet matched the port map; busiest TCP ports seen: 6379 (3066 segments), "
		if !strings.Contains(errOut, want) || !strings.Contains(errOut, "--port redis=6379\n") {
			t.Errorf("%s: stderr lacks the hint %q:\n%s", cmd, want, errOut)
		}
	}
	// A port map that matches says nothing of the kind.
	_, errOut, _ := runCLI(t, "decode", "--count", "../../testdata/redis/get-p1.pcap")
	if strings.Contains(errOut, "no packet matched") {
		t.Errorf("hint on a matching run: %s", errOut)
	}
	// Not even TCP.
	p := filepath.Join(t.TempDir(), "empty.pcap")
	good, _ := os.ReadFile("../../testdata/redis/get-p1.pcap")
	os.WriteFile(p, good[:24], 0o644)
	if _, errOut, code := runCLI(t, "decode", p); code != 0 || strings.Contains(errOut, "matched") {
		t.Errorf("header-only file: exit %d: %s", code, errOut)
	}
}

// TestFileErrorsOneLine: a file that cannot be read gives its error alone,
// not an all-zero summary first.
func TestFileErrorsOneLine(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pcap")
	os.WriteFile(garbage, bytes.Repeat([]byte("not a capture "), 10), 0o644)
	for _, args := range [][]string{
		{"decode", filepath.Join(dir, "absent.pcap")},
		{"decode", "--count", garbage},
		{"replay", filepath.Join(dir, "absent.pcap")},
		{"replay", "--output", "text", garbage},
	} {
		_, errOut, code := runCLI(t, args...)
		lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
		if code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], "hotsniff: ") {
			t.Errorf("%v: exit %d, stderr %q: want one line", args, code, errOut)
		}
	}
}

// screenLines is a minimal terminal: it applies \r, \n and ESC[K (erase to end of
// line) to a screen of lines, which is all the progress bar uses.
func screenLines(b []byte) []string {
	lines := []string{""}
	col := 0
	for i := 0; i < len(b); i++ {
		cur := &lines[len(lines)-1]
		switch {
		case b[i] == '\r':
			col = 0
		case b[i] == '\n':
			lines = append(lines, "")
			col = 0
		case b[i] == 0x1b && bytes.HasPrefix(b[i:], []byte("\x1b[K")):
			*cur = (*cur)[:col]
			i += 2
		default:
			if col < len(*cur) {
				*cur = (*cur)[:col] + string(b[i]) + (*cur)[col+1:]
			} else {
				*cur += string(b[i])
			}
			col++
		}
	}
	return lines
}

// TestProgressSharesTerminal: with stdout and stderr on one terminal, event
// lines never land on the progress bar's line; the bar is redrawn below.
func TestProgressSharesTerminal(t *testing.T) {
	var screen bytes.Buffer
	p := newProgress(&screen, "always")
	p.startFile("big.pcap", 1<<20)
	p.last = time.Now().Add(-time.Second)
	p.update(capture.Stats{Packets: 10, Bytes: 1 << 18})
	w := p.writer(&screen)
	out := bufio.NewWriterSize(w, 16) // flushes mid-line, as bufio does
	io.WriteString(out, `{"type":"hot","key":"item:1"}`+"\n"+`{"type":"cold","key":"item:2"}`+"\n"+`{"type":"ho`)
	out.Flush()
	lines := screenLines(screen.Bytes())
	want := []string{`{"type":"hot","key":"item:1"}`, `{"type":"cold","key":"item:2"}`}
	if len(lines) != 3 || lines[0] != want[0] || lines[1] != want[1] || !strings.HasPrefix(lines[2], "big.pcap [") {
		t.Fatalf("screen:\n%s", strings.Join(lines, "\n"))
	}
	io.WriteString(out, `t","key":"item:3"}`+"\n")
	out.Flush()
	p.finishFile(capture.Stats{})
	lines = screenLines(screen.Bytes())
	if len(lines) != 4 || lines[2] != `{"type":"hot","key":"item:3"}` || lines[3] != "" {
		t.Fatalf("screen after the end:\n%q", lines)
	}
}

// TestDecodeStdinStreams: decode - prints keys while its input pipe is
// still open (tcpdump -w - | hotsniff decode -), not only at its end.
func TestDecodeStdinStreams(t *testing.T) {
	capBytes, err := os.ReadFile("../../testdata/redis/get-p1.pcap")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "decode", "-")
	cmd.Env = append(os.Environ(), "HOTSNIFF_TEST_MAIN=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// The first 40 KB: a few hundred packets, then the pipe stays open.
	if _, err := stdin.Write(capBytes[:40<<10]); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	lines := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		n := 0
		for sc.Scan() {
			if n++; n == 1 {
				got <- sc.Text()
			}
		}
		lines <- n
	}()
	select {
	case line := <-got:
		if !strings.Contains(line, `"key":"key:__rand_int__"`) {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no output within 10 s while the input pipe stays open")
	}
	stdin.Write(capBytes[40<<10:])
	stdin.Close()
	if n := <-lines; n != 1500 { // every GET of the capture
		t.Errorf("%d lines in all", n)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("decode -: %v", err)
	}
}
