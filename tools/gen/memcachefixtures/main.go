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
// Run from the repository root: go run ./tools/gen/memcachefixtures
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	capfix "github.com/hotsniff/hotsniff/tools/gen/fixture"
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
	// args are extra memcached arguments.
	args []string
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
	{name: "bytes", drive: driveBytes, args: []string{"-C"}},
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
	mc, err := startMemcached(fx.args...)
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
	// capfix.StartCapture runs tcpdump with --immediate-mode and a large
	// kernel buffer, and Stop fails when it reports kernel drops: a fixture
	// with holes would make the truth wrong.
	td, err := capfix.StartCapture(pcap, "tcp port 11211")
	if err != nil {
		return err
	}
	// A pause between the capture start and the traffic: for the mid-stream
	// fixture it is what makes the connections "already open".
	time.Sleep(300 * time.Millisecond)
	t := truth{}
	btruth = capfix.NewBytesTruth()
	derr := fx.drive(s, t)
	time.Sleep(300 * time.Millisecond)
	if err := td.Stop(); err != nil {
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
	if err := formatCount(t).Write(golden); err != nil {
		return fmt.Errorf("write golden: %w", err)
	}
	if btruth.Len() > 0 {
		if err := btruth.Write(filepath.Join(out, fx.name+".bytes.golden")); err != nil {
			return fmt.Errorf("write bytes golden: %w", err)
		}
	}
	if fx.name == "bytes" {
		// Mostly value bytes of one repeated letter: kept gzipped.
		if out, err := exec.Command("gzip", "-9", "-f", pcap).CombinedOutput(); err != nil {
			return fmt.Errorf("gzip %s: %v: %s", pcap, err, out)
		}
		pcap += ".gz"
	}
	st, err := os.Stat(pcap)
	if err != nil {
		return fmt.Errorf("stat pcap: %w", err)
	}
	log.Info("recorded", "fixture", fx.name, "pcap_bytes", st.Size(), "keys", len(t))
	return nil
}

func startMemcached(extra ...string) (*exec.Cmd, error) {
	cmd := exec.Command("memcached", append([]string{"-l", "127.0.0.1", "-p", "11211", "-U", "0", "-m", "64", "-u", "root"}, extra...)...)
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

// formatCount writes t in the `hotsniff decode --count` format: every key
// was read with weight 1, so WEIGHT equals COUNT.
func formatCount(t truth) *capfix.Truth {
	ft := capfix.NewTruth()
	for k, n := range t {
		ft.Add("memcache", "", k, uint64(n), 1)
	}
	return ft
}
