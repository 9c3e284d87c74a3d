package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// driveMemcslap runs libmemcached's load generator: text single-key gets,
// binary gets and binary multi-gets (GETKQ batches). Its keys are random and
// never printed, so the truth comes from tsharkTruth. Text mget is left out
// on purpose: Wireshark's dissector shows only the first key of a multi-key
// text get, so it could not be the truth for it.
func driveMemcslap(_ *session, _ truth) error {
	servers := "--servers=" + addr
	for _, args := range [][]string{
		{"--test=get", "--execute-number=8"},
		{"--binary", "--test=get", "--execute-number=6"},
		{"--binary", "--test=mget", "--execute-number=6"},
	} {
		if err := tool("", "memcslap", servers, append([]string{"--concurrency=1"}, args...)...); err != nil {
			return err
		}
	}
	return nil
}

// Binary opcodes that read a key, and those that carry no key at all.
var (
	binaryReads  = map[int]bool{0x00: true, 0x09: true, 0x0c: true, 0x0d: true, 0x1d: true, 0x1e: true, 0x23: true, 0x24: true}
	binaryNoKeys = map[int]bool{0x07: true, 0x08: true, 0x0a: true, 0x0b: true, 0x17: true, 0x18: true, 0x1b: true, 0x20: true}
)

// tsharkTruth counts the reads in a capture with Wireshark's memcache
// dissector: an independent decoder, trusted only where it is complete
// (single-key text gets, binary requests). It fails rather than guess when
// a frame's keys do not line up with its opcodes or a text get has more
// than one key.
func tsharkTruth(pcap string, t truth) error {
	out, err := exec.Command("tshark", "-r", pcap, "-Y", "tcp.dstport == 11211 && memcache",
		"-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,",
		"-e", "memcache.opcode", "-e", "memcache.command", "-e", "memcache.key", "-e", "tcp.payload").Output()
	if err != nil {
		return fmt.Errorf("run tshark: %w", err)
	}
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		f := strings.Split(line, "\t")
		for len(f) < 4 {
			f = append(f, "")
		}
		var keys []string
		if f[2] != "" {
			keys = strings.Split(f[2], ",")
		}
		if f[0] == "" { // text
			cmds := strings.Split(f[1], ",")
			for i, c := range cmds {
				if c != "get" && c != "gets" {
					continue
				}
				if multiKeyText(f[3]) {
					return fmt.Errorf("text multi-get in capture: tshark shows only its first key")
				}
				if i >= len(keys) {
					return fmt.Errorf("text get without key in %q", line)
				}
				t.add(keys[i])
			}
			continue
		}
		var withKey []int
		for _, o := range strings.Split(f[0], ",") {
			op, err := strconv.Atoi(o)
			if err != nil {
				return fmt.Errorf("parse opcode %q: %w", o, err)
			}
			if !binaryNoKeys[op] {
				withKey = append(withKey, op)
			}
		}
		if len(withKey) != len(keys) {
			return fmt.Errorf("opcodes %s do not line up with keys %s", f[0], f[2])
		}
		for i, op := range withKey {
			if binaryReads[op] {
				t.add(keys[i])
			}
		}
	}
	if len(t) == 0 {
		return fmt.Errorf("no reads found by tshark")
	}
	return nil
}

// multiKeyText reports whether a hex-encoded text payload holds a get line
// with more than one key.
func multiKeyText(hexPayload string) bool {
	b := make([]byte, len(hexPayload)/2)
	for i := range b {
		v, err := strconv.ParseUint(hexPayload[2*i:2*i+2], 16, 8)
		if err != nil {
			return false
		}
		b[i] = byte(v)
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		fs := bytes.Fields(l)
		if len(fs) > 2 && (string(fs[0]) == "get" || string(fs[0]) == "gets") {
			return true
		}
	}
	return false
}
