// Command accuracy measures the hot-key detectors against workloads with
// known truth and prints a markdown table; with -doc it also rewrites the
// table in docs/detection.md.
//
//	go run ./cmd/accuracy [-quick] [-doc docs/detection.md]
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hotsniff/hotsniff/detect/accuracy"
)

const (
	beginMark = "<!-- accuracy:begin -->"
	endMark   = "<!-- accuracy:end -->"
)

func main() {
	p := accuracy.Full()
	quick := flag.Bool("quick", false, "run the reduced workloads of the tests")
	doc := flag.String("doc", "", "rewrite the table between "+beginMark+" and "+endMark+" in this file")
	seed := flag.Uint64("seed", 0, "random seed (0: the configuration's)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "accuracy: no arguments expected")
		os.Exit(2)
	}
	if *quick {
		p = accuracy.Quick()
	}
	if *seed != 0 {
		p.Seed = *seed
	}
	start := time.Now()
	rs, err := accuracy.Run(p)
	if err != nil {
		fmt.Fprintf(os.Stderr, "accuracy: %v\n", err)
		os.Exit(1)
	}
	table := accuracy.Table(p, rs)
	fmt.Print(table)
	slog.Info("accuracy done", "elapsed", time.Since(start).Round(time.Millisecond))
	if *doc != "" {
		if err := rewrite(*doc, table); err != nil {
			fmt.Fprintf(os.Stderr, "accuracy: %v\n", err)
			os.Exit(1)
		}
	}
}

// rewrite replaces the marked section of the file with table.
func rewrite(path, table string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read doc: %w", err)
	}
	i, j := bytes.Index(b, []byte(beginMark)), bytes.Index(b, []byte(endMark))
	if i < 0 || j < i {
		return errors.New("rewrite doc: markers not found")
	}
	var out bytes.Buffer
	out.Write(b[:i+len(beginMark)])
	out.WriteString("\n" + table)
	out.Write(b[j:])
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write doc: %w", err)
	}
	return nil
}
