// Command memcachefixtures records the memcached fixtures under
// testdata/memcache: it starts memcached on 127.0.0.1:11211 and tcpdump on
// the loopback interface, drives real clients (gomemcache, libmemcached's
// memccp/memccat, and small meta and binary clients of its own), and writes
// for each scenario NAME.pcap and NAME.count.golden.
//
// The golden files come from the generator's own bookkeeping of what it told
// the clients to read, never from decoding the capture, so they are an
// independent truth for the decoder tests.
//
// Run from the repository root: go run ./internal/gen/memcachefixtures
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/hotsniff/hotsniff/decode"
)

// addr is memcached's default port, so `hotsniff decode` reads the fixtures
// with default flags.
const addr = "127.0.0.1:11211"

func main() {
	out := flag.String("out", "testdata/memcache", "directory for the fixtures")
	only := flag.String("only", "", "record only this fixture")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "memcachefixtures")
	if err := run(log, *out, *only); err != nil {
		log.Error("record fixtures", "err", err)
		os.Exit(1)
	}
}

// fixture is one recorded scenario. warm runs before the capture starts (its
// traffic is not in the pcap); drive runs while capturing and adds every
// read it makes to t.
type fixture struct {
	name  string
	warm  func(s *session) error
	drive func(s *session, t truth) error
	// fromCapture, when set, fills the truth from the finished capture
	// instead: for clients whose keys we cannot know in advance.
	fromCapture func(pcap string, t truth) error
}

// session carries what warm hands to drive: connections opened before the
// capture that must be reused inside it.
type session struct {
	state map[string]any
}

// truth counts the reads a fixture made, per key.
type truth map[string]int

func (t truth) add(keys ...string) {
	for _, k := range keys {
		t[k]++
	}
}

var fixtures = []fixture{
	{name: "gomemcache", drive: driveGomemcache},
	{name: "libmemcached", drive: driveLibmemcached},
	{name: "memcslap", drive: driveMemcslap, fromCapture: tsharkTruth},
	{name: "meta", drive: driveMeta},
	{name: "binary", drive: driveBinary},
	{name: "midstream", warm: warmMidstream, drive: driveMidstream},
	{name: "hotkey", drive: driveHotkey},
}

func run(log *slog.Logger, out, only string) error {
	for _, bin := range []string{"memcached", "tcpdump", "memccat", "memccp"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("find %s: %w", bin, err)
		}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("check port %s is free (stop whatever listens there): %w", addr, err)
	}
	l.Close()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", out, err)
	}
	for _, fx := range fixtures {
		if only != "" && fx.name != only {
			continue
		}
		log.Info("record", "fixture", fx.name)
		if err := record(log, out, fx); err != nil {
			return fmt.Errorf("record %s: %w", fx.name, err)
		}
	}
	return nil
}

// record runs one fixture against a fresh memcached, so no state leaks from
// one scenario to the next.
func record(log *slog.Logger, out string, fx fixture) error {
	mc, err := startMemcached()
	if err != nil {
		return err
	}
	defer stop(mc)
	s := &session{state: map[string]any{}}
	defer func() {
		for _, v := range s.state {
			if c, ok := v.(interface{ Close() error }); ok {
				c.Close()
			}
		}
	}()
	if fx.warm != nil {
		if err := fx.warm(s); err != nil {
			return fmt.Errorf("warm up: %w", err)
		}
	}
	pcap := filepath.Join(out, fx.name+".pcap")
	td, err := startTcpdump(pcap)
	if err != nil {
		return err
	}
	// A pause between the capture start and the traffic: for the mid-stream
	// fixture it is what makes the connections "already open".
	time.Sleep(300 * time.Millisecond)
	t := truth{}
	derr := fx.drive(s, t)
	time.Sleep(300 * time.Millisecond)
	if err := stopTcpdump(td); err != nil {
		return err
	}
	if derr != nil {
		return fmt.Errorf("drive clients: %w", derr)
	}
	if fx.fromCapture != nil {
		if err := fx.fromCapture(pcap, t); err != nil {
			return fmt.Errorf("derive truth: %w", err)
		}
	}
	golden := filepath.Join(out, fx.name+".count.golden")
	if err := os.WriteFile(golden, []byte(formatCount(t)), 0o644); err != nil {
		return fmt.Errorf("write golden: %w", err)
	}
	st, err := os.Stat(pcap)
	if err != nil {
		return fmt.Errorf("stat pcap: %w", err)
	}
	log.Info("recorded", "fixture", fx.name, "pcap_bytes", st.Size(), "keys", len(t))
	return nil
}

func startMemcached() (*exec.Cmd, error) {
	cmd := exec.Command("memcached", "-l", "127.0.0.1", "-p", "11211", "-U", "0", "-m", "64", "-u", "root")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start memcached: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return cmd, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop(cmd)
	return nil, errors.New("start memcached: not listening after 10s")
}

func stop(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// startTcpdump starts a capture and returns once tcpdump says it is
// listening. --immediate-mode and -U hand over and write every packet as it
// comes: without them the last kernel block is lost on SIGINT. -B gives the
// kernel a 32 MiB buffer: on a busy machine the default one overflows and
// the capture silently misses segments.
func startTcpdump(file string) (*capture, error) {
	cmd := exec.Command("tcpdump", "-i", "lo", "--immediate-mode", "-B", "32768", "-n", "-U", "-w", file, "tcp port 11211")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("pipe tcpdump stderr: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start tcpdump: %w", err)
	}
	c := &capture{cmd: cmd, summary: make(chan string, 1)}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		said := false
		var summary strings.Builder
		for sc.Scan() {
			if !said && strings.Contains(sc.Text(), "listening on") {
				said = true
				ready <- nil
			}
			summary.WriteString(sc.Text() + "\n")
		}
		if !said {
			ready <- errors.New("tcpdump exited before listening")
		}
		c.summary <- summary.String()
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = cmd.Wait()
			return nil, fmt.Errorf("start tcpdump: %w", err)
		}
	case <-time.After(10 * time.Second):
		stop(cmd)
		return nil, errors.New("start tcpdump: not listening after 10s")
	}
	return c, nil
}

// capture is a running tcpdump and its stderr, whose last lines count drops.
type capture struct {
	cmd     *exec.Cmd
	summary chan string
}

// stopTcpdump stops the capture and fails when tcpdump reports dropped
// packets: a fixture with holes would make the truth wrong.
func stopTcpdump(c *capture) error {
	if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil {
		return fmt.Errorf("stop tcpdump: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("wait for tcpdump: %w", err)
		}
	case <-ctx.Done():
		stop(c.cmd)
		return errors.New("stop tcpdump: did not exit after SIGINT")
	}
	summary := <-c.summary
	if !strings.Contains("\n"+summary, "\n0 packets dropped by kernel") {
		return fmt.Errorf("capture incomplete, rerun: %s", strings.ReplaceAll(summary, "\n", "; "))
	}
	return nil
}

// formatCount writes t in the `hotsniff decode --count` format: every key
// was read with weight 1, so WEIGHT equals COUNT.
func formatCount(t truth) string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if t[keys[i]] != t[keys[j]] {
			return t[keys[i]] > t[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%d\t%d\tmemcache\t\t%s\n", t[k], t[k], decode.CountKey(k))
	}
	return b.String()
}
