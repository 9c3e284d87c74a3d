package stream

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/decode"
)

// span is one segment to send: stream bytes [off, off+n).
type span struct{ off, n int }

// shuffle segments a stream of length n at random, reorders it so that no
// more than maxAhead segments ever wait for a hole, and adds exact
// duplicates, retransmissions of bytes already sent and repacketized
// segments that overlap old and new bytes.
func shuffle(r *rand.Rand, n, maxSeg, maxAhead int) []span {
	var segs []span
	for off := 0; off < n; {
		l := min(1+r.IntN(maxSeg), n-off)
		segs = append(segs, span{off, l})
		off += l
	}
	// Shuffling windows of maxAhead+1 segments leaves at most maxAhead
	// segments ahead of the first missing one.
	for i := 0; i < len(segs); i += maxAhead + 1 {
		w := segs[i:min(i+maxAhead+1, len(segs))]
		r.Shuffle(len(w), func(a, b int) { w[a], w[b] = w[b], w[a] })
	}
	var out []span
	sent := 0 // every byte before sent has been sent
	pending := map[int]bool{}
	for _, s := range segs {
		out = append(out, s)
		pending[s.off] = true
		for pending[sent] {
			delete(pending, sent)
			for _, t := range segs {
				if t.off == sent {
					sent += t.n
					break
				}
			}
		}
		switch r.IntN(6) {
		case 0: // exact duplicate
			out = append(out, s)
		case 1: // retransmission of a range already complete, cut differently
			if sent > 0 {
				a := r.IntN(sent)
				out = append(out, span{a, 1 + r.IntN(sent-a)})
			}
		case 2: // repacketized: old bytes followed by new ones
			if sent > 0 && sent < n {
				a := r.IntN(sent)
				out = append(out, span{a, min(n, sent+1+r.IntN(maxSeg)) - a})
			}
		}
	}
	return out
}

func TestPropertyReorderDuplicate(t *testing.T) {
	var reordered, retransmitted uint64
	defer func() {
		// The generator must actually exercise reordering and duplicates.
		if reordered == 0 || retransmitted == 0 {
			t.Errorf("generator too tame: %d out-of-order segments, %d retransmitted bytes", reordered, retransmitted)
		}
	}()
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 7))
		cfg := DefaultConfig()
		cfg.MaxOutOfOrder = 1 + r.IntN(16)
		mode := []parseMode{consumeAll, consumeLines, consumeChunk}[seed%3]
		dec := &fakeDecoder{proto: decode.ProtoMemcache, mode: mode, chunkSize: 1 + r.IntN(40)}
		var reg decode.Registry
		reg.Register(dec)
		a := NewAssembler(cfg, DefaultPorts(), &reg, nopSink{})

		// Three connections, each with a random stream in both directions,
		// interleaved segment by segment.
		type dirStream struct {
			src    []byte
			isn    uint32
			spans  []span
			client netip.AddrPort
			toSrv  bool
		}
		var streams []*dirStream
		for c := range 3 {
			for _, toSrv := range []bool{true, false} {
				src := make([]byte, 1+r.IntN(3000))
				for i := range src {
					src[i] = "abcdefgh\n"[r.IntN(9)]
				}
				streams = append(streams, &dirStream{
					src:    src,
					isn:    r.Uint32(), // often wraps within the stream when near 2^32
					spans:  shuffle(r, len(src), 1+r.IntN(200), cfg.MaxOutOfOrder),
					client: clientAddr(c),
					toSrv:  toSrv,
				})
			}
		}
		if seed%2 == 0 {
			streams[0].isn = 1<<32 - 100 // force a wrap
		}
		// Announce each direction with a SYN so its start is known.
		srv := netip.MustParseAddrPort("10.9.9.9:11211")
		ts := int64(0)
		add := func(s *dirStream, seq uint32, flags uint8, payload []byte) {
			seg := capture.Segment{TS: ts, Src: s.client, Dst: srv, Seq: seq, Flags: flags, Payload: payload}
			if !s.toSrv {
				seg.Src, seg.Dst = srv, s.client
			}
			a.Add(&seg)
			ts += 1000
			if err := checkInvariants(a); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
		for _, s := range streams {
			add(s, s.isn, capture.FlagSYN, nil)
		}
		for left := true; left; {
			left = false
			for _, s := range streams {
				if len(s.spans) == 0 {
					continue
				}
				left = true
				sp := s.spans[0]
				s.spans = s.spans[1:]
				add(s, s.isn+1+uint32(sp.off), capture.FlagACK, s.src[sp.off:sp.off+sp.n])
			}
		}
		a.Flush()

		st := a.Stats()
		reordered += st.OutOfOrder
		retransmitted += st.BytesRetransmitted
		if st.TotalGaps() != 0 || st.BufferOverflows != 0 || st.BufferedBytes != 0 {
			t.Fatalf("seed %d: stats %+v", seed, st)
		}
		if len(dec.parsers) != len(streams) {
			t.Fatalf("seed %d: %d parsers for %d streams", seed, len(dec.parsers), len(streams))
		}
		for i, s := range streams {
			p := dec.parsers[i]
			got := []byte(p.stream())
			want := s.src
			if mode != consumeAll {
				// Parsers that keep a tail never consume the incomplete end.
				want = want[:len(got)]
				if len(s.src)-len(got) > max(dec.chunkSize, len(s.src)-bytes.LastIndexByte(s.src, '\n')-1) {
					t.Fatalf("seed %d stream %d: consumed %d of %d bytes", seed, i, len(got), len(s.src))
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("seed %d stream %d: reassembled stream differs (%d vs %d bytes)", seed, i, len(got), len(s.src))
			}
		}
	}
}
