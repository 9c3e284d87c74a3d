// Command accuracy measures the hot-key detectors against workloads with
// known truth and prints a markdown table; with -doc it also rewrites the
// table in docs/detection.md.
//
//	go run ./cmd/accuracy [-quick] [-kernel [-kernel-read d]] [-sampling] [-doc docs/detection.md]
//
// -kernel adds the kernel path (--kernel-count: stage 1 counted in the
// kernel, only reads of located buckets reach the detector) beside the
// user-space one; -kernel-read sets how often its reader hands the
// kernel's counts over (default: at each sub-window's end).
//
// -sampling measures the default detector under flow sampling (--max-cpu)
// instead, at 1/2, 1/4 and 1/16 with reads over 100, 1000 and 10000
// connections (1/16 also with a 16× longer window), and rewrites the table
// between the sampling markers.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hotsniff/hotsniff/internal/testing/accuracy"
)

const (
	beginMark     = "<!-- accuracy:begin -->"
	endMark       = "<!-- accuracy:end -->"
	samplingBegin = "<!-- accuracy-sampling:begin -->"
	samplingEnd   = "<!-- accuracy-sampling:end -->"
)

func main() {
	p := accuracy.Full()
	quick := flag.Bool("quick", false, "run the reduced workloads of the tests")
	doc := flag.String("doc", "", "rewrite the table between "+beginMark+" and "+endMark+" in this file")
	seed := flag.Uint64("seed", 0, "random seed (0: the configuration's)")
	sampling := flag.Bool("sampling", false, "measure the default detector under flow sampling 1/2, 1/4, 1/16")
	kernel := flag.Bool("kernel", false, "also run the default detector fed as under --kernel-count (stage 1 in the kernel)")
	kernelRead := flag.Duration("kernel-read", 0, "with -kernel: how often the reader hands the kernel's counts to the detector (0: at each sub-window's end)")
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
	p.Kernel, p.KernelRead = *kernel, *kernelRead
	start := time.Now()
	var table string
	begin, end := beginMark, endMark
	if *sampling {
		var cases []accuracy.SamplingCase
		// Rates 1/2, 1/4 and 1/16 (levels of a sixteenth of an octave).
		for _, l := range []uint8{16, 32, 64} {
			for _, c := range []int{100, 1000, 10000} {
				cases = append(cases, accuracy.SamplingCase{Level: l, Conns: c})
			}
		}
		// 1/16 with a window long enough to resolve it: 16 × 800 / hot-qps
		// (800 seen reads at the threshold in a window, twice the 400 the
		// detector needs: how many connections are kept varies).
		for _, c := range []int{100, 1000, 10000} {
			cases = append(cases, accuracy.SamplingCase{Level: 64, Conns: c, Window: time.Duration(16 * 800 / p.HotQPS * float64(time.Second))})
		}
		rs, at, err := accuracy.RunSampling(p, cases)
		if err != nil {
			fmt.Fprintf(os.Stderr, "accuracy: %v\n", err)
			os.Exit(1)
		}
		table = accuracy.SamplingTable(p, rs, at)
		begin, end = samplingBegin, samplingEnd
	} else {
		rs, err := accuracy.Run(p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "accuracy: %v\n", err)
			os.Exit(1)
		}
		table = accuracy.Table(p, rs)
	}
	fmt.Print(table)
	slog.Info("accuracy done", "elapsed", time.Since(start).Round(time.Millisecond))
	if *doc != "" {
		if err := rewrite(*doc, table, begin, end); err != nil {
			fmt.Fprintf(os.Stderr, "accuracy: %v\n", err)
			os.Exit(1)
		}
	}
}

// rewrite replaces the marked section of the file with table.
func rewrite(path, table, beginMark, endMark string) error {
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
