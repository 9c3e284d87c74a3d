package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hotsniff/hotsniff/capture"
)

// progress draws a one-line progress bar on a terminal while files are
// read: bytes done, packets per second, ETA. It is silent when stderr is
// not a terminal (unless forced), so scripts and CI logs stay clean.
type progress struct {
	w         io.Writer
	name      string
	size      int64
	start     time.Time
	last      time.Time
	drawn     bool
	lastPkts  uint64
	lastBytes uint64
}

func newProgress(w io.Writer, mode string) *progress {
	switch mode {
	case "never":
		return nil
	case "always":
	default:
		f, ok := w.(*os.File)
		if !ok {
			return nil
		}
		st, err := f.Stat()
		if err != nil || st.Mode()&os.ModeCharDevice == 0 {
			return nil
		}
	}
	return &progress{w: w}
}

func (p *progress) startFile(name string, size int64) {
	p.name, p.size = filepath.Base(name), size
	p.start, p.last = time.Now(), time.Now()
	p.lastPkts, p.lastBytes = 0, 0
}

func (p *progress) update(st capture.Stats) {
	now := time.Now()
	if now.Sub(p.last) < 200*time.Millisecond {
		return
	}
	el := now.Sub(p.start).Seconds()
	pps := float64(st.Packets) / el
	line := fmt.Sprintf("%s  %s", p.name, humanBytes(st.Bytes))
	if p.size > 0 {
		frac := float64(st.Bytes) / float64(p.size)
		if frac > 1 {
			frac = 1
		}
		const width = 24
		bar := make([]byte, width)
		for i := range bar {
			bar[i] = '.'
			if float64(i) < frac*width {
				bar[i] = '#'
			}
		}
		eta := "?"
		if frac > 0 {
			eta = (time.Duration(el/frac*(1-frac)) * time.Second).Round(time.Second).String()
		}
		line = fmt.Sprintf("%s [%s] %3.0f%% %s/%s  %.0f pkt/s  ETA %s", p.name, bar, frac*100, humanBytes(st.Bytes), humanBytes(uint64(p.size)), pps, eta)
	}
	fmt.Fprintf(p.w, "\r\033[K%s", line)
	p.drawn, p.last = true, now
}

func (p *progress) finishFile(capture.Stats) {
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}
