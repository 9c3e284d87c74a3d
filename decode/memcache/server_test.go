package memcache

import (
	"bufio"
	"encoding/base64"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

// serverStats reads memcached's global counters.
func serverStats(t *testing.T, addr string) map[string]int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	io.WriteString(c, "stats\r\n")
	r := bufio.NewReader(c)
	m := map[string]int{}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read stats: %v", err)
		}
		if line == "END\r\n" {
			return m
		}
		f := strings.Fields(line)
		if len(f) == 3 {
			if n, err := strconv.Atoi(f[2]); err == nil {
				m[f[1]] = n
			}
		}
	}
}

// TestServerAgrees sends tricky inputs to a real memcached and compares how
// many keys it looked up (cmd_get, plus cmd_touch: memcached files gat and
// mg with the T flag under touches) and how many storage commands it ran
// (cmd_set) with what the parser reports for the same bytes. It is how the
// grammar decisions above (what is swallowed after a bad line, what a bad
// terminator costs, which lengths are refused) were checked against the
// server rather than against the spec text alone.
func TestServerAgrees(t *testing.T) {
	mc := testutil.StartMemcached(t)
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	inputs := []string{
		"get a b c\r\n",
		"gat 100 a b\r\ngats 0 c\r\n",
		"gets a\r\nget  a   b \n",
		"set k 0 0 5\r\nhello\r\nget k\r\n",
		"set k 1 2 10 noreply\r\nget evil\r\n\r\nget k\r\n",
		"set k 0 0 2\r\nabcd\r\nget z\r\n",
		"set k x 0 1\r\nx\r\nget y\r\n",
		"set " + strings.Repeat("k", 251) + " 0 0 1\r\nx\r\nget y\r\n",
		"cas k 0 0 2\r\nab\r\nget y\r\n",
		"get a " + strings.Repeat("k", 251) + " b\r\nget c\r\n",
		"mg k v\r\nmg k s v t f h l k c O123 N30 R10 T60 q u\r\n",
		"mg " + b64("a b\x00c") + " b v\r\nms " + b64("k\xff") + " 1 b\r\nx\r\n",
		"mg YWI b\r\nget after\r\n",
		"ms k 7 5\r\nmg evil\r\nmg k\r\n",
		"ms k 2 T0 F5\r\nhi\r\nmg k\r\n",
		"ms k x\r\nmg k\r\n",
		"mg k 1\r\nmg k\r\n",
		"me k\r\nmn\r\n",
		"delete k 10\r\nget k\r\n",
		"GET a\r\nget b\r\n",
	}
	for i, in := range inputs {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			before := serverStats(t, mc.Addr)
			c, err := net.Dial("tcp", mc.Addr)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			// The trailing mn's reply tells us the server has read it all.
			io.WriteString(c, in+"mn\r\n")
			r := bufio.NewReader(c)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					t.Fatalf("read replies: %v", err)
				}
				if line == "MN\r\n" {
					break
				}
			}
			c.Close()
			after := serverStats(t, mc.Addr)
			s := decodeAll([]byte(in))
			reads, sets := 0, 0
			for _, e := range s.ev {
				switch {
				case e.isKey && !e.write:
					reads++
				case !e.isKey && e.reason == "" && (e.op == "set" || e.op == "cas" || e.op == "ms"):
					sets++
				}
			}
			if got, want := reads, after["cmd_get"]+after["cmd_touch"]-before["cmd_get"]-before["cmd_touch"]; got != want {
				t.Errorf("%q: parser reads %d keys, server looked up %d (events %v)", in, got, want, evStrings(s))
			}
			if got, want := sets, after["cmd_set"]-before["cmd_set"]; got != want {
				t.Errorf("%q: parser saw %d stores, server ran %d (events %v)", in, got, want, evStrings(s))
			}
		})
	}
}
