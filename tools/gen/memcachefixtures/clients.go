package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// newGomemcache returns a gomemcache client; one idle connection at most,
// so the mid-stream fixture reuses the one it warmed up. With mss > 0 its
// connections send at most mss bytes per segment.
func newGomemcache(mss int) *memcache.Client {
	c := memcache.New(addr)
	c.MaxIdleConns = 1
	c.Timeout = 5 * time.Second
	if mss > 0 {
		c.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
			var d net.Dialer
			nc, err := d.DialContext(ctx, network, address)
			if err != nil {
				return nil, err
			}
			return &mssConn{Conn: nc, mss: mss}, nil
		}
	}
	return c
}

// ethernetMSS is the segment size of a 1500-byte MTU path with TCP
// timestamps, what a cache client on a real network sends.
const ethernetMSS = 1448

// mssConn cuts writes into segments of at most mss bytes, as a real network
// would. Loopback's 64 KiB MTU would otherwise carry any request whole and
// the capture would never show a request split across segments. The pause
// keeps Linux from coalescing the pieces again (TCP autocorking).
type mssConn struct {
	net.Conn
	mss int
}

func (c *mssConn) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		k := min(len(b), c.mss)
		w, err := c.Conn.Write(b[:k])
		n += w
		if err != nil {
			return n, err
		}
		b = b[k:]
		if len(b) > 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return n, nil
}

// driveGomemcache: Zipf-ish gets over 200 keys with a planted hot key,
// multi-key gets (some with hundreds of keys, a ~4.4 KB line sent as
// several 1448-byte segments), gat, and writes that must not count as reads.
func driveGomemcache(_ *session, t truth) error {
	c := newGomemcache(ethernetMSS)
	defer c.Close()
	const n = 200
	key := func(i int) string { return fmt.Sprintf("item:%d", i) }
	for i := range n {
		if err := c.Set(&memcache.Item{Key: key(i), Value: []byte("v" + fmt.Sprint(i))}); err != nil {
			return fmt.Errorf("set: %w", err)
		}
	}
	if err := c.Set(&memcache.Item{Key: "item:hot", Value: []byte("hot")}); err != nil {
		return fmt.Errorf("set: %w", err)
	}
	rng := rand.New(rand.NewSource(4))
	zipf := rand.NewZipf(rng, 1.2, 1, n-1)
	for i := range 600 {
		k := key(int(zipf.Uint64()))
		if i%3 == 0 {
			k = "item:hot"
		}
		t.add(k)
		if _, err := c.Get(k); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
			return fmt.Errorf("get: %w", err)
		}
	}
	// Small multi-gets, misses included: a miss is a read too.
	for i := range 40 {
		keys := []string{"item:hot"}
		for j := range 2 + i%9 {
			keys = append(keys, key((i*7+j*13)%n))
		}
		keys = append(keys, fmt.Sprintf("miss:%d", i))
		t.add(keys...)
		if _, err := c.GetMulti(keys); err != nil {
			return fmt.Errorf("get multi: %w", err)
		}
	}
	// Large multi-gets: one line of several KB.
	for round := range 2 {
		var keys []string
		for j := range 450 {
			keys = append(keys, fmt.Sprintf("big:%d:%d", round, j))
		}
		keys = append(keys, "item:hot")
		t.add(keys...)
		if _, err := c.GetMulti(keys); err != nil {
			return fmt.Errorf("get multi: %w", err)
		}
	}
	for i := range 20 {
		k := key(i)
		t.add(k)
		if _, err := c.GetAndTouch(k, 3600); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
			return fmt.Errorf("gat: %w", err)
		}
	}
	// Writes only from here on.
	for i := range 30 {
		k := key(i)
		if err := c.Touch(k, 60); err != nil {
			return fmt.Errorf("touch: %w", err)
		}
		if err := c.Delete(key(n - 1 - i)); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
	}
	if err := c.Set(&memcache.Item{Key: "ctr", Value: []byte("1")}); err != nil {
		return fmt.Errorf("set: %w", err)
	}
	if _, err := c.Increment("ctr", 5); err != nil {
		return fmt.Errorf("incr: %w", err)
	}
	if err := c.Append(&memcache.Item{Key: "item:hot", Value: []byte("+")}); err != nil {
		return fmt.Errorf("append: %w", err)
	}
	return nil
}

// driveLibmemcached: memccp stores files (key = file name), memccat reads
// them back in text and in binary protocol. memcslap is not used: its keys
// are random and not reported, so there would be no truth to compare with.
func driveLibmemcached(_ *session, t truth) error {
	dir, err := os.MkdirTemp("", "memcachefixtures")
	if err != nil {
		return fmt.Errorf("create temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	var files []string
	for i := range 12 {
		name := fmt.Sprintf("lm:%d", i)
		if i == 0 {
			name = "lm:hot"
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("value of "+name+"\n"), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		files = append(files, p)
	}
	servers := "--servers=" + addr
	if err := tool(dir, "memccp", servers, files[:6]...); err != nil {
		return err
	}
	if err := tool(dir, "memccp", servers, append([]string{"--binary"}, files[6:]...)...); err != nil {
		return err
	}
	for _, bin := range []bool{false, true} {
		for round := range 5 {
			args := []string{servers}
			if bin {
				args = append(args, "--binary")
			}
			keys := []string{"lm:hot", "lm:hot", fmt.Sprintf("lm:%d", 1+round), fmt.Sprintf("lm:%d", 6+round), "lm:absent"}
			args = append(args, keys...)
			t.add(keys...)
			// memccat exits non-zero when a key is missing; that is expected.
			_ = tool(dir, "memccat", args[0], args[1:]...)
		}
	}
	return nil
}

func tool(dir, name, first string, rest ...string) error {
	cmd := exec.Command(name, append([]string{first}, rest...)...)
	if dir != "" {
		cmd.Dir = dir
	}
	cmd.Stdout = io.Discard
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("run %s: %w (%s)", name, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// textConn is our own client for the text and meta protocols. Every batch
// ends with mn, whose MN reply marks the end of all replies to the batch
// (quiet mg misses send nothing at all).
type textConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialText() (*textConn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	return &textConn{c: c, r: bufio.NewReader(c)}, nil
}

func (c *textConn) Close() error { return c.c.Close() }

// batch sends cmds plus "mn" and reads up to MN, failing on any error reply
// so that the truth only holds commands the server accepted.
func (c *textConn) batch(cmds ...string) error {
	_ = c.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c.c, strings.Join(cmds, "")+"mn\r\n"); err != nil {
		return fmt.Errorf("write batch: %w", err)
	}
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("read reply: %w", err)
		}
		if strings.Contains(line, "ERROR") {
			return fmt.Errorf("server refused batch %q: %s", cmds, strings.TrimSpace(line))
		}
		if line == "MN\r\n" {
			return nil
		}
	}
}

// driveMeta: mg with assorted flags, base64 keys (one of them not UTF-8),
// quiet pipelines closed by mn, text gets mixed in, ms/md/ma writes and me.
func driveMeta(_ *session, t truth) error {
	c, err := dialText()
	if err != nil {
		return err
	}
	defer c.Close()
	b64 := func(k string) string { return base64.StdEncoding.EncodeToString([]byte(k)) }
	var sets []string
	for i := range 20 {
		v := fmt.Sprintf("mv%d", i)
		sets = append(sets, fmt.Sprintf("ms meta:%d %d T0 F5\r\n%s\r\n", i, len(v), v))
	}
	sets = append(sets, fmt.Sprintf("ms %s 3 b\r\nb64\r\n", b64("meta:b64")))
	sets = append(sets, fmt.Sprintf("ms %s 3 b q\r\nbin\r\n", b64("meta:\xff\x00 raw")))
	sets = append(sets, "ms meta:ctr 1\r\n7\r\n")
	if err := c.batch(sets...); err != nil {
		return err
	}
	flags := []string{"v", "k v", "s v t f", "v O42", "c v N30", "h l t", "k v q", "v T30"}
	for i := range 80 {
		k := fmt.Sprintf("meta:%d", i%25) // some misses
		if i%4 == 0 {
			k = "meta:0" // planted hot key
		}
		t.add(k)
		if err := c.batch(fmt.Sprintf("mg %s %s\r\n", k, flags[i%len(flags)])); err != nil {
			return err
		}
	}
	for i := range 6 {
		t.add("meta:b64", "meta:\xff\x00 raw")
		if err := c.batch(fmt.Sprintf("mg %s b v\r\n", b64("meta:b64")), fmt.Sprintf("mg %s b k v q\r\n", b64("meta:\xff\x00 raw"))); err != nil {
			return err
		}
		_ = i
	}
	// Quiet pipelines: only hits answer, mn closes the batch.
	for round := range 5 {
		var cmds []string
		for j := range 30 {
			k := fmt.Sprintf("meta:%d", (round*11+j)%30)
			t.add(k)
			cmds = append(cmds, fmt.Sprintf("mg %s v q\r\n", k))
		}
		if err := c.batch(cmds...); err != nil {
			return err
		}
	}
	// Text commands on the same connection.
	t.add("meta:1", "meta:2", "meta:3", "meta:0")
	if err := c.batch("get meta:1 meta:2\r\n", "gets meta:3 meta:0\r\n"); err != nil {
		return err
	}
	// Writes and debug: not reads.
	if err := c.batch("md meta:19 q\r\n", "ma meta:ctr\r\n", "ma meta:ctr N0 D5 MI\r\n", "me meta:1\r\n",
		fmt.Sprintf("md %s b\r\n", b64("meta:b64")), "touch meta:2 100\r\n", "delete meta:18\r\n"); err != nil {
		return err
	}
	return nil
}

// Binary protocol opcodes used by our client.
const (
	opGet    = 0x00
	opSet    = 0x01
	opDelete = 0x04
	opIncr   = 0x05
	opGetQ   = 0x09
	opNoop   = 0x0a
	opVer    = 0x0b
	opGetK   = 0x0c
	opGetKQ  = 0x0d
	opAppend = 0x0e
	opSetQ   = 0x11
	opTouch  = 0x1c
	opGat    = 0x1d
	opGatQ   = 0x1e
	opGatK   = 0x23
	opGatKQ  = 0x24
)

// binConn is our own binary protocol client.
type binConn struct {
	c   net.Conn
	r   *bufio.Reader
	buf []byte
}

func dialBinary() (*binConn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	return &binConn{c: c, r: bufio.NewReader(c)}, nil
}

func (c *binConn) Close() error { return c.c.Close() }

// add appends one request to the pending batch.
func (c *binConn) add(op byte, key string, extras, value []byte) {
	var h [24]byte
	h[0] = 0x80
	h[1] = op
	binary.BigEndian.PutUint16(h[2:], uint16(len(key)))
	h[4] = byte(len(extras))
	binary.BigEndian.PutUint32(h[8:], uint32(len(extras)+len(key)+len(value)))
	binary.BigEndian.PutUint32(h[12:], uint32(len(c.buf)))
	c.buf = append(c.buf, h[:]...)
	c.buf = append(c.buf, extras...)
	c.buf = append(c.buf, key...)
	c.buf = append(c.buf, value...)
}

// flush sends the batch plus a NOOP, in writes of at most chunk bytes (0:
// one write) so requests straddle TCP segments, and reads replies up to the
// NOOP's. Any status other than success or not-found fails the fixture.
func (c *binConn) flush(chunk int) error {
	c.add(opNoop, "", nil, nil)
	_ = c.c.SetDeadline(time.Now().Add(5 * time.Second))
	b := c.buf
	for len(b) > 0 {
		n := len(b)
		if chunk > 0 && n > chunk {
			n = chunk
		}
		if _, err := c.c.Write(b[:n]); err != nil {
			return fmt.Errorf("write batch: %w", err)
		}
		b = b[n:]
		if chunk > 0 {
			time.Sleep(2 * time.Millisecond) // let each chunk leave as its own segment
		}
	}
	c.buf = c.buf[:0]
	var h [24]byte
	for {
		if _, err := io.ReadFull(c.r, h[:]); err != nil {
			return fmt.Errorf("read reply: %w", err)
		}
		if h[0] != 0x81 {
			return fmt.Errorf("read reply: bad magic %#x", h[0])
		}
		if st := binary.BigEndian.Uint16(h[6:]); st != 0 && st != 1 {
			return fmt.Errorf("server refused opcode %#x: status %#x", h[1], st)
		}
		if _, err := c.r.Discard(int(binary.BigEndian.Uint32(h[8:]))); err != nil {
			return fmt.Errorf("read reply: %w", err)
		}
		if h[1] == opNoop {
			return nil
		}
	}
}

func setExtras() []byte { return make([]byte, 8) }

func expExtras(sec uint32) []byte {
	e := make([]byte, 4)
	binary.BigEndian.PutUint32(e, sec)
	return e
}

// driveBinary: GETKQ x N + NOOP pipelines (one of them written in 1000-byte
// chunks so headers and keys straddle segments), GETQ, GET/GETK, the GAT
// family, and writes.
func driveBinary(_ *session, t truth) error {
	c, err := dialBinary()
	if err != nil {
		return err
	}
	defer c.Close()
	for i := range 60 {
		c.add(opSetQ, fmt.Sprintf("bin:%d", i), setExtras(), []byte(fmt.Sprintf("bv%d", i)))
	}
	c.add(opSet, "bin:hot", setExtras(), []byte("hot"))
	if err := c.flush(0); err != nil {
		return err
	}
	for round := range 6 {
		for j := range 50 {
			k := fmt.Sprintf("bin:%d", (round*17+j)%80) // misses above 59
			if j%5 == 0 {
				k = "bin:hot"
			}
			t.add(k)
			c.add(opGetKQ, k, nil, nil)
		}
		chunk := 0
		if round == 2 {
			chunk = 1000
		}
		if err := c.flush(chunk); err != nil {
			return err
		}
	}
	for i := range 20 {
		k := fmt.Sprintf("bin:%d", i)
		t.add(k, "bin:hot")
		c.add(opGetQ, k, nil, nil)
		c.add(opGet, "bin:hot", nil, nil)
	}
	if err := c.flush(0); err != nil {
		return err
	}
	for i := range 10 {
		k := fmt.Sprintf("bin:%d", 30+i)
		t.add(k, k, k, k, k)
		c.add(opGetK, k, nil, nil)
		c.add(opGat, k, expExtras(600), nil)
		c.add(opGatQ, k, expExtras(600), nil)
		c.add(opGatK, k, expExtras(600), nil)
		c.add(opGatKQ, k, expExtras(600), nil)
		if err := c.flush(0); err != nil {
			return err
		}
	}
	// Writes and others: not reads.
	c.add(opVer, "", nil, nil)
	c.add(opTouch, "bin:1", expExtras(10), nil)
	c.add(opDelete, "bin:2", nil, nil)
	c.add(opAppend, "bin:3", nil, []byte("++"))
	c.add(opSet, "bin:ctr", setExtras(), []byte("10"))
	c.add(opIncr, "bin:ctr", make([]byte, 20), nil)
	c.add(opSet, "bin:large", setExtras(), bytes.Repeat([]byte("x"), 20000))
	return c.flush(0)
}

// warmMidstream opens connections of three kinds and uses them with pre:*
// keys before the capture starts.
func warmMidstream(s *session) error {
	g := newGomemcache(0)
	s.state["gomemcache"] = g
	for i := range 5 {
		k := fmt.Sprintf("pre:%d", i)
		if err := g.Set(&memcache.Item{Key: k, Value: []byte("p")}); err != nil {
			return fmt.Errorf("set: %w", err)
		}
		if _, err := g.GetMulti([]string{k, "pre:x"}); err != nil {
			return fmt.Errorf("get multi: %w", err)
		}
	}
	b, err := dialBinary()
	if err != nil {
		return err
	}
	s.state["binary"] = b
	b.add(opSet, "pre:b", setExtras(), []byte("p"))
	b.add(opGetKQ, "pre:b", nil, nil)
	if err := b.flush(0); err != nil {
		return err
	}
	m, err := dialText()
	if err != nil {
		return err
	}
	s.state["meta"] = m
	return m.batch("ms pre:m 1\r\np\r\n", "mg pre:m v\r\n", "get pre:m pre:0\r\n")
}

// driveMidstream reuses the warmed connections with mid:* keys only.
func driveMidstream(s *session, t truth) error {
	g := s.state["gomemcache"].(*memcache.Client)
	b := s.state["binary"].(*binConn)
	m := s.state["meta"].(*textConn)
	for i := range 40 {
		k := fmt.Sprintf("mid:%d", i%7)
		if i%2 == 0 {
			k = "mid:hot"
		}
		t.add(k)
		if _, err := g.Get(k); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
			return fmt.Errorf("get: %w", err)
		}
	}
	keys := []string{"mid:hot", "mid:1", "mid:2", "mid:3"}
	t.add(keys...)
	if _, err := g.GetMulti(keys); err != nil {
		return fmt.Errorf("get multi: %w", err)
	}
	for round := range 3 {
		for j := range 10 {
			k := fmt.Sprintf("mid:b%d", (round+j)%4)
			t.add(k)
			b.add(opGetKQ, k, nil, nil)
		}
		if err := b.flush(0); err != nil {
			return err
		}
	}
	for i := range 10 {
		k := fmt.Sprintf("mid:m%d", i%3)
		t.add(k)
		if err := m.batch(fmt.Sprintf("mg %s v q\r\n", k)); err != nil {
			return err
		}
	}
	if err := m.batch("ms mid:w 1\r\nw\r\n", "md mid:w\r\n"); err != nil {
		return err
	}
	return nil
}

// driveHotkey is paced traffic with one planted hot key, for `hotsniff
// replay`: two gomemcache clients each send a 16-key GetMulti every 10 ms
// for 3 s (about 3200 reads/s in all). Background keys are Zipf over 5000
// keys; "item:hot" takes 6 of the 16 slots during the first 2 s only (about
// 1200 reads/s) and is overwritten once at about 1 s (an invalidate). With
// --hot-qps 1000 exactly one key is hot.
func driveHotkey(_ *session, t truth) error {
	start := time.Now()
	errc := make(chan error, 2)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newGomemcache(0)
			defer c.Close()
			rng := rand.New(rand.NewSource(int64(40 + g)))
			zipf := rand.NewZipf(rng, 1.1, 1, 4999)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			wrote := false
			for range tick.C {
				el := time.Since(start)
				if el > 3*time.Second {
					return
				}
				keys := make([]string, 16)
				for j := range keys {
					keys[j] = fmt.Sprintf("item:%d", zipf.Uint64())
					if el < 2*time.Second && j%16 < 6 {
						keys[j] = "item:hot"
					}
				}
				mu.Lock()
				t.add(keys...)
				mu.Unlock()
				if _, err := c.GetMulti(keys); err != nil {
					errc <- fmt.Errorf("get multi: %w", err)
					return
				}
				if g == 0 && !wrote && el > time.Second {
					wrote = true
					if err := c.Set(&memcache.Item{Key: "item:hot", Value: []byte("new")}); err != nil {
						errc <- fmt.Errorf("set: %w", err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}
