package memcache

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"
)

// keySeq is a comparable rendering of the keys a sink saw, in order.
func keySeq(s *recSink) []string {
	var out []string
	for _, e := range s.ev {
		if e.isKey {
			out = append(out, fmt.Sprintf("%s %q %v", e.op, e.key, e.write))
		}
	}
	return out
}

func isSuffix(got, full []string) bool {
	if len(got) > len(full) {
		return false
	}
	off := len(full) - len(got)
	for i := range got {
		if got[i] != full[off+i] {
			return false
		}
	}
	return true
}

// TestMidStreamEveryOffset joins each recorded connection at every offset
// of several windows (the start, the middle, around a multi-KB get line) and
// checks that no phantom key appears: every read is a key the client really
// read, no more often than it did, and the keys reported are exactly the
// tail of the keys a parser that saw the whole stream reports, i.e. the
// parser resynchronises onto a true boundary and stays there.
func TestMidStreamEveryOffset(t *testing.T) {
	for _, name := range fixtureNames {
		t.Run(name, func(t *testing.T) {
			truth := readGolden(t, fixturePath(name+".count.golden"))
			for _, c := range readPcap(t, fixturePath(name+".pcap")) {
				stream := bytes.Join(c.segments, nil)
				starts := []int{0, len(stream) / 2}
				if i := bytes.Index(stream, []byte("gets big:")); i > 0 {
					starts = append(starts, i-200)
				}
				const window = 300
				for _, w := range starts {
					w = max(w, 0)
					end := min(len(stream), w+window+3000)
					// The reference saw the connection from its start (as far
					// as the capture goes) up to the same end.
					ref := keySeq(decodeChunks(!c.sawSYN, stream[:end]))
					for o := w; o < min(w+window, len(stream)); o++ {
						s := decodeChunks(true, stream[o:end])
						for k, n := range s.reads() {
							if n > truth[k] {
								t.Fatalf("%s offset %d: read %q %d times, truth %d", c.client, o, k, n, truth[k])
							}
						}
						if got := keySeq(s); !isSuffix(got, ref) {
							t.Fatalf("%s offset %d: keys are not a tail of the reference: first %q", c.client, o, got[:min(3, len(got))])
						}
					}
				}
			}
		})
	}
}

// TestGapRecovery drops a random run of bytes from a recorded stream,
// telling the parser with Gap, and checks that the keys after the gap are a
// tail of the truth, whatever the cut.
func TestGapRecovery(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for _, name := range fixtureNames {
		for _, c := range readPcap(t, fixturePath(name+".pcap")) {
			stream := bytes.Join(c.segments, nil)
			full := keySeq(decodeChunks(!c.sawSYN, stream))
			for range 60 {
				cut := rng.Intn(len(stream))
				lost := rng.Intn(min(300, len(stream)-cut)) + 1
				s := &recSink{}
				st := newStream(!c.sawSYN)
				st.feed(stream[:cut], s)
				before := len(keySeq(s))
				st.p.Gap()
				st.buf, st.skip = st.buf[:0], 0
				st.feed(stream[min(cut+lost, len(stream)):], s)
				after := keySeq(s)[before:]
				if !isSuffix(after, full) {
					t.Fatalf("%s %s: cut %d lost %d: keys after the gap are no tail of the truth: %q", name, c.client, cut, lost, after[:min(3, len(after))])
				}
			}
		}
	}
}

// TestMidStreamAdversarial joins, at every offset, a stream whose values
// hold command words away from line starts. Only line starts may be taken as
// text boundaries, so none of the "phantom" keys may appear, with one
// documented exception: the first bytes after a gap are taken for a line
// start (segments after a gap usually begin with a request), so when they
// parse as a request that request is believed.
func TestMidStreamAdversarial(t *testing.T) {
	var b bytes.Buffer
	for i := range 20 {
		v := fmt.Sprintf("abc get phantom:%d mg phantom:b gets phantom:c", i)
		fmt.Fprintf(&b, "set real:%d 0 0 %d\r\n%s\r\n", i, len(v), v)
		fmt.Fprintf(&b, "get real:%d real:x\r\n", i)
		fmt.Fprintf(&b, "ms real:m 11 T0\r\nx mg phantom:m\r\n")
	}
	stream := b.Bytes()
	for o := range len(stream) {
		s := decodeChunks(true, stream[o:])
		reqs := 0
		firstBelieved := NewParser(true).textCandidate(stream[o:]) == accept
		for _, e := range s.ev {
			if e.reason == "" && !e.isKey {
				reqs++
			}
			if !e.isKey || (firstBelieved && reqs == 1) {
				continue
			}
			if k := e.key; bytes.HasPrefix([]byte(k), []byte("phantom")) {
				t.Fatalf("offset %d: phantom key %q", o, k)
			}
		}
	}
}
