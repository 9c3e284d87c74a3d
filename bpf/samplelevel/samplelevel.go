// Package samplelevel is the arithmetic of flow sampling levels, shared by
// the eBPF programs' loader and the capture layer above it.
package samplelevel

import "math"

// Flow sampling levels. A capture that samples (an eBPF capture under
// --max-cpu, or shedding load before its rings overflow) keeps a connection
// when the top 16 bits of a hash of it are below KeepAt(level): level 0
// keeps every connection, each LevelsPerHalving further levels halve the
// share. Steps of a sixteenth of an octave (4.4 %) are fine enough to hold
// a CPU budget to a few per cent, and the level fits in the seven bits a
// record has for it.
const (
	// LevelsPerHalving is the number of levels that halve the rate.
	LevelsPerHalving = 16
	// Max is the deepest level: about one connection in 244.
	Max = 127
	// KeepAll is KeepAt(0): every 16-bit hash is below it.
	KeepAll = 1 << 16
)

// KeepAt is the hash threshold of level: connections whose 16-bit hash is
// below it are kept.
func KeepAt(level uint8) uint32 {
	if level == 0 {
		return KeepAll
	}
	level = min(level, Max)
	return uint32(math.Round(KeepAll * math.Exp2(-float64(level)/LevelsPerHalving)))
}

// Rate is the fraction of connections level keeps (1 at level 0).
func Rate(level uint8) float64 {
	return float64(KeepAt(level)) / KeepAll
}
