package stream

import "github.com/hotsniff/hotsniff/decode"

// numProtos sizes per-protocol counters; decode.Registry is indexed by Proto.
const numProtos = len(decode.Registry{})

// Stats counts what the Assembler has seen. Counters only grow; the fields
// marked "now" are gauges.
type Stats struct {
	FlowsActive   int    // now: open connections tracked
	ClosedMarkers int    // now: closed connections remembered to drop late segments
	BufferedBytes int    // now: buffer capacity held by flows (bounded by MaxBufferBytes)
	FlowsCreated  uint64 // connections first seen (or reopened by a SYN)
	FlowsClosed   uint64 // closed by FIN or RST, or by Flush
	FlowsExpired  uint64 // idle longer than IdleTimeout
	FlowsEvicted  uint64 // evicted to respect MaxFlows
	FlowsReset    uint64 // replaced by a new connection on the same ports (SYN with a new ISN)
	MemEvictions  uint64 // flows evicted to respect MaxBufferBytes

	Segments           uint64 // segments on mapped ports
	SegmentsIgnored    uint64 // segments on no mapped port
	SegmentsAfterClose uint64 // segments with payload for a closed connection or direction: dropped

	Bytes              uint64 // stream bytes delivered in order (parsed or skipped at the parser's request)
	BytesSkipped       uint64 // of those, bytes skipped because the parser asked to (or lost inside a skip)
	BytesRetransmitted uint64 // bytes seen again (retransmissions, overlaps, duplicates): counted once
	BytesLost          uint64 // stream bytes never captured that the parser needed: holes declared as gaps, snap-length cuts (not those inside a skip: BytesSkipped)
	BytesDiscarded     uint64 // buffered bytes thrown away: unparsed tails at gaps, overflows and close
	BytesDropped       uint64 // payload of directions without a parser, never looked at

	OutOfOrder      uint64            // segments buffered because they arrived ahead of a hole
	Gaps            [numProtos]uint64 // per decode.Proto: times a parser was told bytes were lost
	BufferOverflows uint64            // MaxFlowBuffer or MaxOutOfOrder hit: data dropped or a hole given up early
	Resyncs         uint64            // directions restarted after a long run of only old data (bad sequence state)
	SampleResumes   uint64            // directions restarted where flow sampling resumed a skipped connection (not a loss)

	Rejected      [numRejects]uint64 // Config.Verify: segments that cannot belong to a connection the server accepted, by RejectReasons
	RejectedBytes uint64             // their payload (and uncaptured) bytes, never decoded nor counted as lost

	Pending decode.PendingStats // reply pairing: requests and keys not kept, queues thrown away
}

// TotalGaps sums Gaps over protocols.
func (s *Stats) TotalGaps() uint64 {
	var n uint64
	for _, g := range s.Gaps {
		n += g
	}
	return n
}
