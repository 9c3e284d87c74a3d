package redis

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/internal/testing/replytest"
)

func respCmd(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

func bulk(v string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(v), v) }

// replyCase: requests, the server's replies, and the bytes each key must
// get ("ns/key"), computed by hand from the reply encoding.
type replyCase struct {
	name     string
	req, rep string
	want     map[string]uint64
	unpaired uint64
}

var big = strings.Repeat("v", 3000)

var replyCases = []replyCase{
	{
		name: "get hit, miss (RESP2 and RESP3 null), pipelined",
		req:  respCmd("GET", "a") + respCmd("GET", "b") + respCmd("GET", "c"),
		rep:  bulk("hello") + "$-1\r\n" + "_\r\n",
		want: map[string]uint64{"0/a": 11, "0/b": 5, "0/c": 3},
	},
	{
		// *3\r\n is 4 bytes: 2,1,1 to a,b,c, with each key's element.
		name: "mget split per element, header evenly",
		req:  respCmd("MGET", "a", "b", "c"),
		rep:  "*3\r\n" + bulk("xy") + "$-1\r\n" + bulk(big),
		want: map[string]uint64{"0/a": 2 + 8, "0/b": 1 + 5, "0/c": 1 + 5 + 2 + 3000 + 2},
	},
	{
		name: "errors and writes: a write's reply goes to no key",
		req:  respCmd("SET", "a", "1") + respCmd("GET", "h") + respCmd("INCR", "n"),
		rep:  "+OK\r\n" + "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n" + ":1\r\n",
		want: map[string]uint64{"0/h": 68},
	},
	{
		name: "RESP3 map, set, double, bool, verbatim, big number, blob error",
		req: respCmd("HGETALL", "h") + respCmd("SMEMBERS", "s") + respCmd("ZSCORE", "z", "m") +
			respCmd("EXISTS", "e") + respCmd("GET", "v") + respCmd("GET", "n") + respCmd("GET", "x"),
		rep: "%2\r\n" + bulk("f1") + bulk("v1") + bulk("f2") + ":2\r\n" + // 4+8+8+8+4 = 32
			"~2\r\n+a\r\n+b\r\n" + // 4+4+4 = 12
			",1.5\r\n" + // 6
			"#t\r\n" + // 4
			"=9\r\ntxt:hello\r\n" + // 4+9+2 = 15
			"(3492890328409238509324850943850943825024385\r\n" + // 46
			"!5\r\nERR x\r\n", // 4+5+2 = 11
		want: map[string]uint64{"0/h": 32, "0/s": 12, "0/z": 6, "0/e": 4, "0/v": 15, "0/n": 46, "0/x": 11},
	},
	{
		// A push (client tracking) between replies answers no request;
		// an attribute belongs to the reply it precedes.
		name:     "RESP3 push and attribute",
		req:      respCmd("GET", "a") + respCmd("GET", "b"),
		rep:      bulk("1") + ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\na\r\n" + "|1\r\n+ttl\r\n:3\r\n" + bulk("2"),
		want:     map[string]uint64{"0/a": 7, "0/b": 4 + 6 + 4 + 7},
		unpaired: 4 + 17 + 4 + 7,
	},
	{
		name: "nested arrays (EXEC of MGET) and empty and null arrays",
		req: respCmd("MULTI") + respCmd("MGET", "a", "b") + respCmd("EXEC") +
			respCmd("MGET", "c") + respCmd("LRANGE", "l", "0", "-1") + respCmd("SELECT", "3") + respCmd("GET", "d"),
		rep: "+OK\r\n" + "+QUEUED\r\n" + "*1\r\n*2\r\n$1\r\n1\r\n$-1\r\n" +
			"*1\r\n*-1\r\n" + "*0\r\n" + "+OK\r\n" + bulk("dd"),
		// The MGET inside MULTI is answered QUEUED (9 bytes: 5 and 4);
		// EXEC's reply goes to no key (EXEC names none).
		want: map[string]uint64{"0/a": 5, "0/b": 4, "0/c": 4 + 5, "0/l": 4, "3/d": 8},
	},
	{
		name: "hmget weighs its fields, reply to the hash",
		req:  respCmd("HMGET", "h", "f1", "f2"),
		rep:  "*2\r\n" + bulk("x") + "$-1\r\n",
		want: map[string]uint64{"0/h": 4 + 7 + 5},
	},
}

func TestReplyAttribution(t *testing.T) {
	for _, c := range replyCases {
		t.Run(c.name, func(t *testing.T) {
			for _, cuts := range cutsOf(len(c.rep)) {
				conn := replytest.NewConn(New(Config{}), decode.PendingConfig{})
				conn.Requests(1, []byte(c.req))
				prev := 0
				for _, x := range cuts {
					conn.Replies(2, []byte(c.rep[prev:x]))
					prev = x
				}
				s := conn.S
				if fmt.Sprint(s.Bytes) != fmt.Sprint(c.want) || s.Unpaired != c.unpaired || len(s.Errors) > 0 {
					t.Fatalf("cuts %v: bytes %v unpaired %d errors %v, want %v unpaired %d", cuts, s.Bytes, s.Unpaired, s.Errors, c.want, c.unpaired)
				}
				if s.Total != uint64(len(c.rep)) {
					t.Fatalf("cuts %v: replies total %d bytes, the stream had %d", cuts, s.Total, len(c.rep))
				}
				if n := conn.F.Pending.Len(); n != 0 {
					t.Fatalf("cuts %v: %d requests left unanswered", cuts, n)
				}
			}
		})
	}
}

// cutsOf returns ways to split n bytes: whole, at every point in two, and
// byte by byte.
func cutsOf(n int) [][]int {
	out := [][]int{{n}}
	for i := 1; i < n; i++ {
		out = append(out, []int{i, n})
	}
	var each []int
	for i := 1; i <= n; i++ {
		each = append(each, i)
	}
	return append(out, each)
}

// TestReplyMidStream: replies of requests sent before the capture cannot be
// paired; pairing starts with the first request after a silence in both
// directions, and nothing is attributed to a wrong key before that.
func TestReplyMidStream(t *testing.T) {
	d := New(Config{})
	cfg := decode.PendingConfig{}
	conn := replytest.NewConn(d, cfg)
	conn.F.Pending.Desync() // joined mid-stream
	ms := int64(1e6)
	// The tail of a reply, then a request and the reply to it and to an
	// earlier unseen request, back to back: no pairing yet.
	conn.Replies(1*ms, []byte("xxxx\r\n"+bulk("old")))
	conn.Requests(1*ms+10, []byte(respCmd("GET", "new")))
	conn.Replies(1*ms+20, []byte(bulk("older")+bulk("new-value")))
	if len(conn.S.Bytes) != 0 {
		t.Fatalf("attributed before a quiet point: %v", conn.S.Bytes)
	}
	// After 5 ms of silence, requests pair.
	conn.Requests(6*ms, []byte(respCmd("GET", "k1")+respCmd("MGET", "k2", "k3")))
	conn.Replies(6*ms+10, []byte(bulk("v1")+"*2\r\n"+bulk("v2")+"$-1\r\n"))
	want := map[string]uint64{"0/k1": 8, "0/k2": 2 + 8, "0/k3": 2 + 5}
	if fmt.Sprint(conn.S.Bytes) != fmt.Sprint(want) {
		t.Fatalf("after the quiet point: %v, want %v", conn.S.Bytes, want)
	}
	if conn.S.Unpaired != uint64(6+9+11+15) {
		t.Errorf("unpaired %d", conn.S.Unpaired)
	}
}

// TestReplyGapDesync: a lost reply segment throws the queue away; pairing
// resumes at the next quiet point, never shifted by one.
func TestReplyGapDesync(t *testing.T) {
	conn := replytest.NewConn(New(Config{}), decode.PendingConfig{})
	ms := int64(1e6)
	conn.Requests(ms, []byte(respCmd("GET", "a")+respCmd("GET", "b")))
	conn.Replies(ms+1, []byte(bulk("aa")))
	conn.Gap(1) // b's reply lost
	conn.Requests(ms+2, []byte(respCmd("GET", "c")))
	conn.Replies(ms+3, []byte(bulk("cc")))
	conn.Requests(10*ms, []byte(respCmd("GET", "d")))
	conn.Replies(10*ms+1, []byte(bulk("dddd")))
	want := map[string]uint64{"0/a": 8, "0/d": 10}
	if fmt.Sprint(conn.S.Bytes) != fmt.Sprint(want) {
		t.Fatalf("%v, want %v", conn.S.Bytes, want)
	}
	if conn.Stats().Desyncs != 1 {
		t.Errorf("desyncs %d, want 1", conn.Stats().Desyncs)
	}
}

// TestReplyQueueBounds: requests beyond MaxRequests are counted, their
// replies keep the queue aligned and go to no key; keys beyond MaxKeyBytes
// keep their place.
func TestReplyQueueBounds(t *testing.T) {
	conn := replytest.NewConn(New(Config{}), decode.PendingConfig{MaxRequests: 2, MaxKeyBytes: 5})
	conn.Requests(1, []byte(respCmd("GET", "ab")+respCmd("MGET", "cd", "toolong", "e")+respCmd("GET", "f")+respCmd("GET", "g")))
	conn.Replies(2, []byte(bulk("1")+"*3\r\n"+bulk("2")+bulk("3")+bulk("4")+bulk("5")+bulk("6")))
	// toolong does not fit: it and the MGET's later keys keep their places
	// (cd keeps its element) without bytes.
	want := map[string]uint64{"0/ab": 7, "0/cd": 2 + 7}
	if fmt.Sprint(conn.S.Bytes) != fmt.Sprint(want) {
		t.Fatalf("%v, want %v", conn.S.Bytes, want)
	}
	if st := conn.Stats(); st.Overflow != 2 || st.KeysDropped != 2 {
		t.Errorf("stats %+v, want 2 overflows and 2 keys dropped", st)
	}
	if conn.F.Pending.Len() != 0 {
		t.Errorf("%d left", conn.F.Pending.Len())
	}
}

// TestReplyBadBytes: garbage in the reply stream is counted, stops pairing
// and never crashes; a subscribe turns pairing off for good.
func TestReplyBadBytes(t *testing.T) {
	conn := replytest.NewConn(New(Config{}), decode.PendingConfig{})
	conn.Requests(1, []byte(respCmd("GET", "a")))
	conn.Replies(2, []byte("?garbage\r\n"))
	if len(conn.S.Errors) != 1 || conn.S.Errors[0] != ReasonBadReply || len(conn.S.Bytes) != 0 {
		t.Fatalf("errors %v bytes %v", conn.S.Errors, conn.S.Bytes)
	}
	conn = replytest.NewConn(New(Config{}), decode.PendingConfig{})
	conn.Requests(1, []byte(respCmd("SUBSCRIBE", "ch")+respCmd("GET", "a")))
	conn.Replies(2, []byte("*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"+"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"))
	if len(conn.S.Bytes) != 0 {
		t.Fatalf("pub/sub message attributed: %v", conn.S.Bytes)
	}
}

// FuzzReply feeds requests and then arbitrary reply bytes; see
// replytest.Check for what must hold.
func FuzzReply(f *testing.F) {
	for _, c := range replyCases {
		f.Add([]byte(c.req), []byte(c.rep), byte(len(c.name)))
	}
	f.Add([]byte(respCmd("GET", "a")), []byte("*99999999999\r\n$-7\r\n%-1\r\n|0\r\n>0\r\n"), byte(3))
	f.Fuzz(func(t *testing.T, req, rep []byte, seed byte) {
		replytest.Check(t, New(Config{}), req, rep, seed, 0)
	})
}

// TestReplyTotalBound: all queues of a stream together stay within
// MaxTotalBytes; what does not fit is counted and pairing stays aligned.
func TestReplyTotalBound(t *testing.T) {
	cfg := decode.PendingConfig{MaxTotalBytes: 4096}
	conn := replytest.NewConn(New(Config{}), cfg)
	var req, rep strings.Builder
	for i := range 200 {
		req.WriteString(respCmd("GET", fmt.Sprintf("key:%03d", i)))
		rep.WriteString(bulk("v"))
	}
	conn.Requests(1, []byte(req.String()))
	if st := conn.Stats(); st.Held > 4096 || st.Overflow == 0 {
		t.Fatalf("held %d bytes (bound 4096), %d overflows", st.Held, st.Overflow)
	}
	conn.Replies(2, []byte(rep.String()))
	// Every kept request got its own reply, none another's.
	for k, n := range conn.S.Bytes {
		if n != 7 {
			t.Errorf("%s: %d bytes, want 7", k, n)
		}
	}
	if len(conn.S.Bytes) == 0 || conn.F.Pending.Len() != 0 {
		t.Errorf("%d keys attributed, %d requests left", len(conn.S.Bytes), conn.F.Pending.Len())
	}
	conn.F.Pending.Release()
	if st := conn.Stats(); st.Held != 0 {
		t.Errorf("held %d after Release", st.Held)
	}
}

// TestReplyFramedByCapture: with the capture framing replies (in-kernel
// counting with reply bytes), it copies only some requests and exactly
// their replies, back to back with no quiet point: pairing starts where it
// says (Align), goes on across the requests and replies it left out
// (Resume: no loss), stops when it says it lost the framing (Unframed),
// and a silence then does not restart it. Without Align nothing pairs.
func TestReplyFramedByCapture(t *testing.T) {
	for _, align := range []bool{true, false} {
		conn := replytest.NewConn(New(Config{}), decode.PendingConfig{})
		q := conn.F.Pending
		q.Desync() // joined mid-stream
		us := int64(1e3)
		if align {
			q.Align()
		}
		conn.Requests(10*us, []byte(respCmd("GET", "a")+respCmd("MGET", "b", "c")))
		conn.Replies(20*us, []byte(bulk("aa")+"*2\r\n"+bulk("bb")+"$-1\r\n"))
		// GET x counted in the kernel and not copied, nor its reply.
		conn.Resume(0)
		conn.Requests(40*us, []byte(respCmd("GET", "d")))
		conn.Resume(1)
		conn.Replies(50*us, []byte(bulk(big)))
		want := map[string]uint64{"0/a": 8, "0/b": 2 + 8, "0/c": 2 + 5, "0/d": uint64(len(bulk(big)))}
		if !align {
			if len(conn.S.Bytes) != 0 {
				t.Fatalf("without Align: attributed %v before any quiet point", conn.S.Bytes)
			}
			continue
		}
		if fmt.Sprint(conn.S.Bytes) != fmt.Sprint(want) || conn.S.Unpaired != 0 {
			t.Fatalf("bytes %v unpaired %d, want %v and none", conn.S.Bytes, conn.S.Unpaired, want)
		}
		q.Unframed()
		conn.Requests(60*us, []byte(respCmd("GET", "e")))
		// 10 ms of silence: no quiet point when the capture frames.
		conn.Requests(10_060*us, []byte(respCmd("GET", "f")))
		if q.Synced() {
			t.Fatal("pairing restarted at a silence while the capture had lost the framing")
		}
		q.Align()
		conn.Requests(10_070*us, []byte(respCmd("GET", "g")))
		conn.Resume(1)
		conn.Replies(10_080*us, []byte(bulk("g")))
		want["0/g"] = 7
		if fmt.Sprint(conn.S.Bytes) != fmt.Sprint(want) {
			t.Fatalf("after Align again: %v, want %v", conn.S.Bytes, want)
		}
	}
}
