// Command shimwrites writes the table of written keys (client/writes.json:
// one file; the Python and Node packages link to it) that the Go (embedded),
// Python and Node client shims use to drop cached keys on writes, derived from the
// redis-server COMMAND table in decode/redis, so every shim agrees with the
// Go shim's writtenKeys.
//
//	go run ./tools/gen/shimwrites -out client/writes.json
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/hotsniff/hotsniff/tools/gen/shimwrites/writespec"
)

type outs []string

func (o *outs) String() string     { return strings.Join(*o, ",") }
func (o *outs) Set(v string) error { *o = append(*o, v); return nil }

func main() {
	var out outs
	flag.Var(&out, "out", "file to write (repeatable)")
	flag.Parse()
	if len(out) == 0 {
		fmt.Fprintln(os.Stderr, "shimwrites: give at least one -out FILE")
		os.Exit(2)
	}
	b, err := writespec.JSON()
	if err != nil {
		fmt.Fprintln(os.Stderr, "shimwrites:", err)
		os.Exit(1)
	}
	for _, p := range out {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "shimwrites:", err)
			os.Exit(1)
		}
	}
}
