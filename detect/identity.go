package detect

import (
	"net/netip"

	"github.com/cespare/xxhash/v2"

	"github.com/hotsniff/hotsniff/decode"
)

// Identity is the identity hash the detector gives a key read at server in
// namespace ns: xxhash64(key) XOR a seed of (proto, server, ns), never 0.
// The eBPF programs compute the same hash when they count in the kernel
// (bpf/kcount.h), so their bucket counts are the detector's stage 1.
func Identity(server netip.AddrPort, proto decode.Proto, ns int32, key []byte) uint64 {
	h := xxhash.Sum64(key) ^ identitySeed(server, proto, ns)
	if h == 0 {
		h = 1
	}
	return h
}

// Bucket is the stage-1 bucket of identity hash h among buckets (a power
// of two).
func Bucket(h uint64, buckets int) int {
	return int(h >> (64 - bitsLen(buckets)))
}
