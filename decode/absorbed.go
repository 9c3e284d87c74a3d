package decode

// Absorbed is one absorbed-demand report: a client shim telling the daemon
// how many reads of one key it served from its own memory. A shim sends it
// in-band, on the connection it refreshes the key on, as
//
//	ECHO "hotsniff:absorbed:1 <hits> <window_ms> <key>"
//
// pipelined right after its refresh read of that key (see
// docs/channel-protocol.md). The decoder hands it on as its own record: it is
// neither a read nor a write of the key.
type Absorbed struct {
	// NS is the connection's namespace (Redis DB) when the report was sent.
	NS int32
	// Key aliases a decode buffer: valid only during the Absorbed call.
	Key []byte
	// Hits is the number of local reads the report claims (>= 1).
	Hits uint64
	// WindowMS is how many milliseconds those reads took (>= 1).
	WindowMS uint64
	// Reject is why the decoder will not vouch for the report, or "" when
	// the report immediately followed a read of Key on the same connection.
	// Rejected reports are handed on only to be counted.
	Reject string
}

// Reasons a report is rejected; fixed strings, usable as metric labels.
// The detector adds its own (see detect.Stats).
const (
	// AbsorbedMalformed: the ECHO carried the report prefix but not a
	// well-formed report (unknown version, bad number, zero, no key).
	AbsorbedMalformed = "malformed"
	// AbsorbedUnpaired: the request before it on the connection was not a
	// read of exactly that key (or bytes were lost in between).
	AbsorbedUnpaired = "unpaired"
)

// Absorbed forwards a report to Next.
func (c *Counter) Absorbed(f *Flow, a *Absorbed) {
	if c.Next != nil {
		c.Next.Absorbed(f, a)
	}
}
