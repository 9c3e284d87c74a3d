// Package capture turns packets, from pcap files or from the kernel, into TCP
// segments. Every capture path (pcap, AF_PACKET, eBPF ring buffer) hands the
// same Segment type to the stream layer, so nothing downstream knows or cares
// where the bytes came from.
package capture

import "net/netip"

// TCP flag bits as they appear in byte 13 of the TCP header.
const (
	FlagFIN uint8 = 0x01
	FlagSYN uint8 = 0x02
	FlagRST uint8 = 0x04
	FlagPSH uint8 = 0x08
	FlagACK uint8 = 0x10
)

// Segment is one TCP segment with its flow tuple.
//
// Payload aliases the source's buffer and is valid only until the next call
// to Source.Next: a consumer that keeps bytes must copy them. Filling a
// Segment never allocates.
type Segment struct {
	// TS is the packet time in Unix nanoseconds. On replay it is the only clock.
	TS  int64
	Src netip.AddrPort
	Dst netip.AddrPort
	Seq uint32
	Ack uint32
	// Flags holds the TCP flag bits (FlagSYN, ...).
	Flags uint8
	// Payload is the captured TCP payload.
	Payload []byte
	// Missing counts payload bytes that were on the wire but not captured
	// (snap length, eBPF copy limit). They follow Payload in sequence space,
	// so the stream layer treats them as a gap.
	Missing uint32
	// Resumed says the capture skipped this connection on purpose a
	// moment ago (flow sampling, --max-cpu) and copies it again: bytes
	// between what the stream layer saw last and this segment were not
	// lost, so it restarts the direction here without counting a gap.
	Resumed bool
	// KernelCounted says the capture programs already counted this
	// segment's reads in their bucket counts (in-kernel counting): the
	// detector takes them to its later stages only.
	KernelCounted bool
	// Replies says what the capture does with the replies of the
	// segment's connection (in-kernel counting with reply bytes): on a
	// request segment any of the values, on a reply only RepliesUnframed
	// (the capture could not deliver a reply it framed); RepliesAsCaptured
	// otherwise.
	Replies ReplyFraming
	// SampleLevel is the flow sampling in effect when the segment was
	// copied: about 2^(-SampleLevel/16) of the connections are seen
	// (SampleRate gives the exact fraction; 0: all).
	SampleLevel uint8
}

// ReplyFraming is what the capture does with a connection's replies, said
// on its request segments. With in-kernel counting most requests are
// counted in the kernel and not copied; to measure the reply bytes of the
// keys it copies requests of, the capture programs frame the connection's
// replies themselves and copy exactly the replies answering the requests
// they copy, so the requests and replies user space sees pair one to one.
type ReplyFraming uint8

const (
	// RepliesAsCaptured: nothing is said; replies arrive as captured.
	RepliesAsCaptured ReplyFraming = iota
	// RepliesFramed: the replies copied are exactly those of the requests
	// copied (this segment's among them).
	RepliesFramed
	// RepliesFramedFrom: as RepliesFramed, and no request copied before
	// this segment is answered by a copied reply: pairing starts here.
	RepliesFramedFrom
	// RepliesUnframed: the capture lost the framing of the connection's
	// replies and copies none until a RepliesFramedFrom.
	RepliesUnframed
)

// Source yields TCP segments.
type Source interface {
	// Next fills seg with the next TCP segment. It returns io.EOF when the
	// source is exhausted. Packets that are not TCP are skipped and counted.
	Next(seg *Segment) error
	// Stats reports what the source has read so far.
	Stats() Stats
	Close() error
}

// Stats counts what a Source has seen. Counters only grow.
type Stats struct {
	Packets   uint64 // packets read from the source
	Segments  uint64 // TCP segments returned by Next
	Skipped   uint64 // packets that were not IPv4/IPv6 TCP (ARP, UDP, ...)
	Malformed uint64 // packets whose headers did not parse (truncated, lying lengths)
	Bytes     uint64 // bytes of the underlying file or ring consumed, for progress
}
