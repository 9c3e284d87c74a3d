package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	capfix "github.com/hotsniff/hotsniff/tools/gen/fixture"
)

// btruth receives the reply-bytes truth of the fixture being recorded,
// written as NAME.bytes.golden when it holds any key.
var btruth *capfix.BytesTruth

// endShares gives each key of a get its share of "END\r\n" (5 bytes split
// evenly, the remainder to the first keys) and returns them.
func endShares(n int) []uint64 {
	s := make([]uint64, n)
	for i := range s {
		s[i] = 5 / uint64(n)
		if uint64(i) < 5%uint64(n) {
			s[i]++
		}
	}
	return s
}

// driveBytes reads values of known sizes through the three protocols, with
// memcached started with -C (no CAS, so "gets" replies carry cas 0 and
// every reply's size follows from the value sizes):
//   - gomemcache Get and GetMulti ("gets k..."): a hit is
//     "VALUE k 0 n 0\r\n", the value and CRLF, plus the key's share of END;
//     a miss only its share of END;
//   - meta mg with v, and k v (the reply echoes the key), misses (EN), and
//     quiet mg pipelines (k v q: hits echo the key) closed by mn, where a
//     miss gets no reply (0 bytes);
//   - binary GETKQ pipelines closed by NOOP (a hit is 24 + 4 + key + value,
//     a miss nothing), GET and GETK hits.
//
// Each batch's replies are also read back and their total checked against
// the truth, so a wrong assumption about the server fails the recording.
func driveBytes(_ *session, t truth) error {
	sizes := map[string]int{"mb:big": 30000}
	for i := range 10 {
		sizes[fmt.Sprintf("mb:v:%d", i)] = 50 * (i + 1)
	}
	c := newGomemcache(0)
	defer c.Close()
	for k, n := range sizes {
		if err := c.Set(&memcache.Item{Key: k, Value: bytes.Repeat([]byte("m"), n)}); err != nil {
			return fmt.Errorf("set: %w", err)
		}
	}
	hit := func(k string, share uint64) {
		if n, ok := sizes[k]; ok {
			btruth.Add("memcache", "", k, uint64(len(fmt.Sprintf("VALUE %s 0 %d 0\r\n", k, n))+n+2)+share)
		} else {
			btruth.Add("memcache", "", k, share)
		}
	}
	for i := range 200 {
		k := fmt.Sprintf("mb:v:%d", i%10)
		switch {
		case i%10 == 3:
			k = "mb:big"
		case i%10 == 7:
			k = "mb:miss"
		}
		t.add(k)
		hit(k, 5)
		if _, err := c.Get(k); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
			return fmt.Errorf("get: %w", err)
		}
	}
	for i := range 40 {
		keys := []string{"mb:big", fmt.Sprintf("mb:v:%d", i%10), fmt.Sprintf("mb:absent:%d", i)}
		if i%2 == 0 {
			keys = append(keys, fmt.Sprintf("mb:v:%d", (i+5)%10))
		}
		sh := endShares(len(keys))
		for j, k := range keys {
			t.add(k)
			hit(k, sh[j])
		}
		if _, err := c.GetMulti(keys); err != nil {
			return fmt.Errorf("get multi: %w", err)
		}
	}

	// Meta.
	m, err := dialText()
	if err != nil {
		return err
	}
	defer m.Close()
	var want uint64
	var cmds []string
	for i := range 30 {
		k := fmt.Sprintf("mb:v:%d", i%12) // mb:v:10 and 11 miss
		t.add(k)
		n, ok := sizes[k]
		switch {
		case !ok:
			cmds = append(cmds, "mg "+k+" v\r\n")
			btruth.Add("memcache", "", k, 4) // EN\r\n
			want += 4
		case i%2 == 0:
			cmds = append(cmds, "mg "+k+" v\r\n")
			r := uint64(len(fmt.Sprintf("VA %d\r\n", n)) + n + 2)
			btruth.Add("memcache", "", k, r)
			want += r
		default:
			cmds = append(cmds, "mg "+k+" k v\r\n")
			r := uint64(len(fmt.Sprintf("VA %d k%s\r\n", n, k)) + n + 2)
			btruth.Add("memcache", "", k, r)
			want += r
		}
	}
	for i := range 20 {
		k := fmt.Sprintf("mb:v:%d", i%14) // quiet: misses say nothing
		t.add(k)
		cmds = append(cmds, "mg "+k+" k v q\r\n")
		if n, ok := sizes[k]; ok {
			r := uint64(len(fmt.Sprintf("VA %d k%s\r\n", n, k)) + n + 2)
			btruth.Add("memcache", "", k, r)
			want += r
		} else {
			btruth.Add("memcache", "", k, 0)
		}
	}
	if err := m.rawBatch(cmds, want+4); err != nil {
		return fmt.Errorf("meta: %w", err)
	}

	// Binary.
	b, err := dialBinary()
	if err != nil {
		return err
	}
	defer b.Close()
	for round := range 4 {
		want = 24 // the NOOP's response
		for j := range 25 {
			k := fmt.Sprintf("mb:v:%d", (round*7+j)%13) // 10..12 miss
			if j%6 == 0 {
				k = "mb:big"
			}
			t.add(k)
			b.add(opGetKQ, k, nil, nil)
			if n, ok := sizes[k]; ok {
				r := uint64(24 + 4 + len(k) + n)
				btruth.Add("memcache", "", k, r)
				want += r
			} else {
				btruth.Add("memcache", "", k, 0)
			}
		}
		for j := range 3 {
			k := fmt.Sprintf("mb:v:%d", j)
			t.add(k, k)
			b.add(opGet, k, nil, nil)
			b.add(opGetK, k, nil, nil)
			n := sizes[k]
			btruth.Add("memcache", "", k, uint64(24+4+n))
			btruth.Add("memcache", "", k, uint64(24+4+len(k)+n))
			want += uint64(24+4+n) + uint64(24+4+len(k)+n)
		}
		got, err := b.flushCount()
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("binary batch %d: replies were %d bytes, truth says %d", round, got, want)
		}
	}
	return nil
}

// rawBatch sends cmds plus "mn" and reads up to "MN\r\n", checking the
// replies total want bytes (MN included).
func (c *textConn) rawBatch(cmds []string, want uint64) error {
	_ = c.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c.c, strings.Join(cmds, "")+"mn\r\n"); err != nil {
		return fmt.Errorf("write batch: %w", err)
	}
	var got uint64
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("read reply: %w", err)
		}
		got += uint64(len(line))
		if line == "MN\r\n" {
			break
		}
	}
	if got != want {
		return fmt.Errorf("replies were %d bytes, truth says %d", got, want)
	}
	return nil
}

// flushCount is flush that also returns the reply bytes read.
func (c *binConn) flushCount() (uint64, error) {
	c.add(opNoop, "", nil, nil)
	_ = c.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.c.Write(c.buf); err != nil {
		return 0, fmt.Errorf("write batch: %w", err)
	}
	c.buf = c.buf[:0]
	var got uint64
	var h [24]byte
	for {
		if _, err := io.ReadFull(c.r, h[:]); err != nil {
			return got, fmt.Errorf("read reply: %w", err)
		}
		body := int(uint32(h[8])<<24 | uint32(h[9])<<16 | uint32(h[10])<<8 | uint32(h[11]))
		if _, err := c.r.Discard(body); err != nil {
			return got, fmt.Errorf("read reply: %w", err)
		}
		got += uint64(24 + body)
		if h[1] == opNoop {
			return got, nil
		}
	}
}
