package redis

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hotsniff/hotsniff/decode"
)

func TestDecoderInterface(t *testing.T) {
	var d decode.Decoder = New(Config{})
	if d.Proto() != decode.ProtoRedis {
		t.Errorf("Proto() = %v", d.Proto())
	}
	if d.NewParser(decode.ToClient, false) == nil {
		t.Error("NewParser(ToClient) is nil, want the reply parser")
	}
	if d.NewParser(decode.ToServer, true) == nil {
		t.Error("NewParser(ToServer) is nil")
	}
}

func TestParseRequests(t *testing.T) {
	bigValue := strings.Repeat("v", 100000)
	tests := []struct {
		name string
		in   string
		want []string
		errs []string
	}{
		{"get", resp("GET", "k"), []string{"GET k"}, nil},
		{"lower and mixed case", resp("get", "a") + resp("mGeT", "b", "c"), []string{"GET a", "MGET b c"}, nil},
		{"literal bytes", "*2\r\n$3\r\nGET\r\n$5\r\nitem:\r\n", []string{"GET item:"}, nil},
		{"mget", resp("MGET", "a", "b", "c"), []string{"MGET a b c"}, nil},
		{"hget weight 1", resp("HGET", "h", "f"), []string{"HGET h"}, nil},
		{"hmget weighted", resp("HMGET", "h", "f1", "f2", "f3"), []string{"HMGET h*3"}, nil},
		{"hexists hstrlen", resp("HEXISTS", "h", "f") + resp("HSTRLEN", "h", "f"), []string{"HEXISTS h", "HSTRLEN h"}, nil},
		{"smismember zmscore", resp("SMISMEMBER", "s", "a", "b") + resp("ZMSCORE", "z", "a", "b", "c", "d"), []string{"SMISMEMBER s*2", "ZMSCORE z*4"}, nil},
		{"hgetall not weighted", resp("HGETALL", "h"), []string{"HGETALL h"}, nil},
		{"set is write", resp("SET", "k", "v", "EX", "10"), []string{"SET/w k"}, nil},
		{"mset keys", resp("MSET", "k1", "v1", "k2", "v2"), []string{"MSET/w k1 k2"}, nil},
		{"mset unbalanced", resp("MSET", "k1", "v1", "k2"), []string{"MSET/w"}, nil},
		{"del", resp("DEL", "a", "b"), []string{"DEL/w a b"}, nil},
		{"eval", resp("EVAL", "return 1", "2", "k1", "k2", "arg"), []string{"EVAL k1 k2"}, nil},
		{"eval no keys", resp("EVAL", "return 1", "0", "arg"), []string{"EVAL"}, nil},
		{"eval numkeys too big", resp("EVAL", "return 1", "3", "k1"), []string{"EVAL"}, nil},
		{"eval numkeys bad", resp("EVAL", "return 1", "x", "k1") + resp("EVAL", "s", "01", "k1") + resp("EVAL", "s", "-1", "k1"), []string{"EVAL", "EVAL", "EVAL"}, nil},
		{"evalsha eval_ro fcall", resp("EVALSHA", "abc", "1", "k") + resp("EVAL_RO", "s", "1", "k") + resp("EVALSHA_RO", "s", "1", "k") + resp("FCALL", "f", "2", "a", "b", "x") + resp("FCALL_RO", "f", "1", "a"),
			[]string{"EVALSHA k", "EVAL_RO k", "EVALSHA_RO k", "FCALL a b", "FCALL_RO a"}, nil},
		{"xread", resp("XREAD", "COUNT", "2", "STREAMS", "s1", "s2", "0", "$"), []string{"XREAD s1 s2"}, nil},
		{"xread stream named streams", resp("XREAD", "streams", "STREAMS", "0"), []string{"XREAD STREAMS"}, nil},
		{"xread unbalanced", resp("XREAD", "STREAMS", "a", "b", "c"), []string{"XREAD"}, nil},
		{"xreadgroup", resp("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s1", ">"), []string{"XREADGROUP/w s1"}, nil},
		{"zunionstore", resp("ZUNIONSTORE", "dst", "2", "a", "b", "WEIGHTS", "1", "2"), []string{"ZUNIONSTORE/w dst a b"}, nil},
		{"zunion zinter", resp("ZUNION", "2", "a", "b") + resp("ZINTER", "1", "a", "WITHSCORES"), []string{"ZUNION a b", "ZINTER a"}, nil},
		{"lmpop", resp("LMPOP", "2", "l1", "l2", "LEFT"), []string{"LMPOP/w l1 l2"}, nil},
		{"sort store", resp("SORT", "k", "BY", "w_*", "GET", "#", "LIMIT", "0", "10", "STORE", "dst"), []string{"SORT/w k dst"}, nil},
		{"sort get consumes store", resp("SORT", "k", "GET", "STORE", "ALPHA"), []string{"SORT/w k"}, nil},
		{"sort_ro", resp("SORT_RO", "k", "BY", "x"), []string{"SORT_RO k"}, nil},
		{"georadius store", resp("GEORADIUS", "g", "0", "0", "1", "km", "STORE", "dst"), []string{"GEORADIUS/w g dst"}, nil},
		{"georadius_ro", resp("GEORADIUS_RO", "g", "0", "0", "1", "km"), []string{"GEORADIUS_RO g"}, nil},
		{"migrate keys", resp("MIGRATE", "h", "6379", "", "0", "5000", "COPY", "KEYS", "a", "b"), []string{"MIGRATE/w a b"}, nil},
		{"migrate one", resp("MIGRATE", "h", "6379", "k", "0", "5000"), []string{"MIGRATE/w k"}, nil},
		{"migrate key named keys", resp("MIGRATE", "h", "6379", "KEYS", "0", "5000"), []string{"MIGRATE/w KEYS"}, nil},
		{"object subcommand", resp("OBJECT", "ENCODING", "k"), []string{"OBJECT|ENCODING k"}, nil},
		{"xinfo memory", resp("xinfo", "stream", "s") + resp("MEMORY", "USAGE", "k", "SAMPLES", "5"), []string{"XINFO|STREAM s", "MEMORY|USAGE k"}, nil},
		{"client config", resp("CLIENT", "SETNAME", "x") + resp("config", "get", "maxmemory") + resp("CLIENT", "bogus") + resp("CLIENT"),
			[]string{"CLIENT|SETNAME", "CONFIG|GET", "CLIENT", "CLIENT"}, nil},
		{"keyless", resp("PING") + resp("HELLO", "3", "AUTH", "u", "p") + resp("AUTH", "p") + resp("INFO") + resp("SUBSCRIBE", "a", "b") + resp("PUBLISH", "c", "m"),
			[]string{"PING", "HELLO", "AUTH", "INFO", "SUBSCRIBE", "PUBLISH"}, nil},
		{"shard channels are not keys", resp("SPUBLISH", "ch", "m") + resp("SSUBSCRIBE", "ch"), []string{"SPUBLISH", "SSUBSCRIBE"}, nil},
		{"unknown", resp("FOO", "a", "b") + resp(strings.Repeat("X", 100), "a"), []string{"UNKNOWN", "UNKNOWN"}, nil},
		{"wrong arity", resp("GET") + resp("GET", "a", "b") + resp("MGET"), []string{"GET", "GET", "MGET"}, nil},
		{"binary key", resp("GET", "a b\r\n\x00\xff*1\r\n") + resp("MGET", "", "x"), []string{`GET "a b\r\n\x00\xff*1\r\n"`, `MGET "" x`}, nil},
		{"big value skipped", resp("SET", "k", bigValue) + resp("GET", "k"), []string{"SET/w k", "GET k"}, nil},
		{"empty arrays ignored", "*0\r\n*-1\r\n" + resp("GET", "k"), []string{"GET k"}, nil},
		{"multi exec", resp("MULTI") + resp("INCR", "a") + resp("GET", "b") + resp("EXEC"), []string{"MULTI", "INCR/w a", "GET b", "EXEC"}, nil},

		{"select", resp("SELECT", "3") + resp("GET", "k") + resp("SELECT", "0") + resp("GET", "k"), []string{"SELECT", "GET@3 k", "SELECT@3", "GET k"}, nil},
		{"select ignored", resp("SELECT", "3") + resp("SELECT", "x") + resp("SELECT", "-1") + resp("SELECT", "04") + resp("SELECT", "5", "6") + resp("GET", "k"),
			[]string{"SELECT", "SELECT@3", "SELECT@3", "SELECT@3", "SELECT@3", "GET@3 k"}, nil},
		{"reset", resp("SELECT", "2") + resp("RESET") + resp("GET", "k"), []string{"SELECT", "RESET@2", "GET k"}, nil},
		{"discard undoes select", resp("MULTI") + resp("SELECT", "4") + resp("GET", "k") + resp("DISCARD") + resp("GET", "k"),
			[]string{"MULTI", "SELECT", "GET@4 k", "DISCARD@4", "GET k"}, nil},
		{"exec keeps select", resp("MULTI") + resp("SELECT", "4") + resp("EXEC") + resp("GET", "k"), []string{"MULTI", "SELECT", "EXEC@4", "GET@4 k"}, nil},

		{"inline", "GET foo\r\nMGET a  b\tc\n\r\n\n   \r\n", []string{"GET foo", "MGET a b c"}, nil},
		{"inline quotes", `SET "a b" 'c d'` + "\r\n" + `GET "\x41\n\"q\\"` + "\r\n" + `GET 'it\'s'` + "\r\n" + `GET x"y z"` + "\r\n",
			[]string{`SET/w "a b"`, `GET "A\n\"q\\"`, `GET it's`, `GET "xy z"`}, nil},
		{"inline then resp", "HMGET h a b\r\n" + resp("GET", "k"), []string{"HMGET h*2", "GET k"}, nil},
		{"inline unbalanced", "GET \"foo\r\n" + resp("GET", "k"), []string{"GET k"}, []string{"bad_inline", "resync"}},
		{"inline closing quote glued", "GET \"a\"b\r\n" + resp("GET", "k"), []string{"GET k"}, []string{"bad_inline", "resync"}},

		{"bad type resyncs", "*2\r\n:3\r\n" + resp("GET", "k"), []string{"GET k"}, []string{"bad_type", "resync"}},
		{"bad length", "*2\r\n$abc\r\n" + resp("GET", "k"), []string{"GET k"}, []string{"bad_length", "resync"}},
		{"negative bulk", "*2\r\n$3\r\nGET\r\n$-1\r\n" + resp("GET", "k"), []string{"GET", "GET k"}, []string{"bad_length", "resync"}},
		{"bad array length", "*x\r\n" + resp("GET", "k"), []string{"GET k"}, []string{"bad_length", "resync"}},
		{"leading zero", "*02\r\n" + resp("GET", "k"), []string{"GET k"}, []string{"bad_length", "resync"}},
		{"array too long", "*99999999\r\n$3\r\nGET\r\n" + resp("GET", "k"), []string{"GET k"}, []string{"too_long", "resync"}},
		{"bulk too long", "*2\r\n$3\r\nSET\r\n$999999999999\r\n" + resp("GET", "k"), []string{"SET/w", "GET k"}, []string{"too_long", "resync"}},
		{"missing crlf", "*2\r\n$3\r\nGET\r\n$3\r\nfooXX" + resp("GET", "k"), []string{"GET", "GET k"}, []string{"bad_format", "resync"}},
		{"lying array length", "*3\r\n$3\r\nGET\r\n$1\r\na\r\n" + resp("GET", "k"), []string{"GET", "GET k"}, []string{"bad_type", "resync"}},
		{"garbage between", resp("GET", "a") + "\x00\x01garbage*\r\n*5x" + resp("GET", "b"), []string{"GET a", "GET b"}, []string{"bad_inline", "resync"}},
		{"wrong arity parsed in sync", "$5\r\n" + resp("GET", "a") + "*1\r\n$3\r\nGET\r\n" + resp("GET", "k"), []string{"UNKNOWN", "GET a", "GET", "GET k"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := decodeWhole(t, []byte(tc.in))
			if got := r.lines(); !slices.Equal(got, tc.want) {
				t.Errorf("requests\n got %q\nwant %q", got, tc.want)
			}
			if !slices.Equal(r.errs, tc.errs) {
				t.Errorf("errors got %q, want %q", r.errs, tc.errs)
			}
			// Byte by byte must give the same result on valid input.
			if tc.errs == nil {
				rb := decodeChunks(t, Config{}, false, []byte(tc.in), func() int { return 1 })
				if got := rb.lines(); !slices.Equal(got, tc.want) {
					t.Errorf("byte by byte\n got %q\nwant %q", got, tc.want)
				}
			}
		})
	}
}

func TestParseMidStream(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"at boundary", resp("GET", "a") + resp("GET", "b"), []string{"GET a", "GET b"}},
		{"inside value", "lue\r\n" + resp("GET", "b"), []string{"GET b"}},
		{"inline is not a boundary", "GET x\r\n" + resp("GET", "b"), []string{"GET b"}},
		{"arity must fit", "*1\r\n$3\r\nGET\r\n$1\r\nz\r\n" + resp("GET", "b"), []string{"GET b"}},
		{"unknown command is not a boundary", resp("NOPE", "x") + resp("GET", "b"), []string{"GET b"}},
		{"star in key", "*\r\n*1x*9\r\n$3\r\nGET\r\n" + resp("MGET", "a", "b"), []string{"MGET a b"}},
		{"select unknown means ns 0", resp("GET", "a") + resp("SELECT", "2") + resp("GET", "b"), []string{"GET a", "SELECT", "GET@2 b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, chunk := range []int{1 << 20, 1, 7} {
				r := decodeChunks(t, Config{}, true, []byte(tc.in), func() int { return chunk })
				if got := r.lines(); !slices.Equal(got, tc.want) {
					t.Errorf("chunk %d requests\n got %q\nwant %q", chunk, got, tc.want)
				}
				// Joining at a boundary loses nothing: no error then.
				wantErrs := []string{"resync"}
				if strings.HasPrefix(tc.in, "*2\r\n$3\r\nGET") {
					wantErrs = nil
				}
				if !slices.Equal(r.errs, wantErrs) {
					t.Errorf("chunk %d errors %q, want %q", chunk, r.errs, wantErrs)
				}
			}
		})
	}
}

func TestGapResyncs(t *testing.T) {
	r := &recSink{}
	p := New(Config{}).NewParser(decode.ToServer, false)
	fd := &feeder{t: t, p: p, s: r}
	full := resp("MGET", "a", "b", "c")
	fd.write([]byte(resp("SELECT", "1") + full[:21]))
	p.Gap()
	fd.buf = fd.buf[:0] // the stream layer drops the tail on a gap
	fd.write([]byte(full[25:] + resp("GET", "k")))
	p.Gap() // a second gap before resynchronising counts once
	fd.write([]byte("garbage" + resp("GET", "z")))
	want := []string{"SELECT", "MGET@1 a", "GET@1 k", "GET@1 z"}
	if got := r.lines(); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if !slices.Equal(r.errs, []string{"resync", "resync"}) {
		t.Errorf("errors %q", r.errs)
	}
}

func TestKeyTooLong(t *testing.T) {
	long := strings.Repeat("k", 40)
	in := resp("MGET", "a", long, "b") + "MGET c " + long + " d\r\n"
	for _, chunk := range []int{1000, 1, 3} {
		r := decodeChunks(t, Config{MaxKeyLen: 32}, false, []byte(in), func() int { return chunk })
		want := []string{"MGET a b", "MGET c d"}
		if got := r.lines(); !slices.Equal(got, want) {
			t.Errorf("chunk %d: got %q, want %q", chunk, got, want)
		}
		if !slices.Equal(r.errs, []string{"key_too_long", "key_too_long"}) {
			t.Errorf("chunk %d errors %q", chunk, r.errs)
		}
	}
}

func TestBoundedTail(t *testing.T) {
	// A value is skipped, never buffered: the tail left to the stream layer
	// stays within a header even for a 1 MiB value in 1 KiB segments.
	in := []byte(resp("SET", "k", strings.Repeat("x", 1<<20)) + resp("GET", "k"))
	r := &recSink{}
	fd := &feeder{t: t, p: New(Config{}).NewParser(decode.ToServer, false), s: r}
	for len(in) > 0 {
		n := min(1024, len(in))
		fd.write(in[:n])
		in = in[n:]
	}
	if want := []string{"SET/w k", "GET k"}; !slices.Equal(r.lines(), want) {
		t.Errorf("got %q, want %q", r.lines(), want)
	}
	if fd.maxTail > 64 {
		t.Errorf("parser left %d bytes unconsumed", fd.maxTail)
	}
	// An inline line without newline is bounded too.
	r = decodeChunks(t, Config{MaxInlineLen: 100}, false, []byte(strings.Repeat("a", 300)+"\r\n"+resp("GET", "k")), func() int { return 10 })
	if want := []string{"GET k"}; !slices.Equal(r.lines(), want) {
		t.Errorf("got %q, want %q", r.lines(), want)
	}
	if !slices.Equal(r.errs, []string{"too_long", "resync"}) {
		t.Errorf("errors %q", r.errs)
	}
}

func TestSplitLargeMGET(t *testing.T) {
	// 10,000 keys in 20 segments: decoded key by key, never buffering the
	// request, and the same as whole.
	args := []string{"MGET"}
	for i := range 10000 {
		args = append(args, "key:"+strconv.Itoa(i))
	}
	in := []byte(resp(args...))
	seg := len(in)/20 + 1
	r := &recSink{}
	fd := &feeder{t: t, p: New(Config{}).NewParser(decode.ToServer, false), s: r}
	for off := 0; off < len(in); off += seg {
		fd.write(in[off:min(off+seg, len(in))])
	}
	if len(r.reqs) != 1 || len(r.reqs[0].Keys) != 10000 {
		t.Fatalf("got %d requests", len(r.reqs))
	}
	for i, k := range r.reqs[0].Keys {
		if k.Key != args[i+1] || k.Weight != 1 {
			t.Fatalf("key %d = %q", i, k.Key)
		}
	}
	if fd.maxTail > 32 {
		t.Errorf("parser left %d bytes unconsumed", fd.maxTail)
	}
}
