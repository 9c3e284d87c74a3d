package tairwire

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// Hex dumps of the worked examples of tair-protocol.md §10, copied verbatim
// (offset column included). They were built from the spec, not captured
// from a Tair server: none can run here.
const (
	Ex101Get = `
0000: 6d 42 64 54 00 00 00 65 00 00 00 02 00 00 00 36
0010: 00 00 03 00 00 00 01 00 00 00 00 00 00 00 00 00
0020: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
0030: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 07 75
0040: 73 65 72 3a 34 32`
	Ex102MGet = `
0000: 6d 42 64 54 00 00 00 66 00 00 00 02 00 00 00 5b
0010: 00 00 03 00 00 00 02 00 00 00 00 00 00 00 00 00
0020: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
0030: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 02 6b
0040: 31 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
0050: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
0060: 00 00 00 00 00 00 00 00 02 6b 32`
	Ex103PrefixGets = `
0000: 6d 42 64 54 00 00 00 2a 00 00 00 1d 00 00 00 6f
0010: 00 00 07 00 00 00 02 00 00 00 00 00 00 00 00 00
0020: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
0030: 00 00 00 00 00 00 00 00 00 00 00 02 40 00 0c 00
0040: 18 00 04 73 68 6f 70 31 00 04 61 00 00 00 00 00
0050: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
0060: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 02
0070: 40 00 0c 00 18 00 04 73 68 6f 70 31 00 04 62`
	Ex104SimpleGet = `
0000: 6d 42 64 54 00 00 00 2b 00 00 00 24 00 00 00 23
0010: 00 00 00 00 00 00 00 00 00 07 00 01 00 09 00 18
0020: 00 04 73 68 6f 70 31 00 02 00 03 00 04 61 00 03
0030: 00 04 62`
	Ex105Feedback = `
0000: 6d 42 64 54 ff ff ff ff 00 00 04 63 00 00 00 07
0010: 00 00 00 00 00 03 00`
)

// ParseDump turns a hex dump with offset columns ("0000: 6d 42 ...") into bytes.
func ParseDump(s string) ([]byte, error) {
	var out []byte
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("parse dump line %q: no offset column", line)
		}
		b, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(rest), " ", ""))
		if err != nil {
			return nil, fmt.Errorf("parse dump line %q: %w", line, err)
		}
		out = append(out, b...)
	}
	return out, nil
}
