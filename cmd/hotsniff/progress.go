package main

import (
	"bytes"
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
	line      string // last drawn, for redrawing after output
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
	p.drawn, p.last, p.line = true, now, line
}

// clear erases the bar, if drawn, and reports whether it was.
func (p *progress) clear() bool {
	if !p.drawn {
		return false
	}
	fmt.Fprint(p.w, "\r\033[K")
	p.drawn = false
	return true
}

func (p *progress) redraw() {
	fmt.Fprintf(p.w, "\r\033[K%s", p.line)
	p.drawn = true
}

// writer wraps w, the output that may share the terminal with the bar, so
// that output never lands on the bar's line: the bar is cleared before
// complete lines are written and redrawn after; a partial line is held
// until its end arrives (or Flush).
func (p *progress) writer(w io.Writer) *barWriter { return &barWriter{w: w, p: p} }

type barWriter struct {
	w    io.Writer
	p    *progress
	tail []byte
	err  error
}

// maxTail bounds what is held of a line without its newline.
const maxTail = 1 << 20

func (b *barWriter) Write(d []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	i := bytes.LastIndexByte(d, '\n')
	if i < 0 && len(b.tail)+len(d) <= maxTail {
		b.tail = append(b.tail, d...)
		return len(d), nil
	}
	if i < 0 {
		i = len(d) - 1
	}
	redraw := b.p.clear()
	if len(b.tail) > 0 {
		if _, b.err = b.w.Write(b.tail); b.err != nil {
			return 0, b.err
		}
		b.tail = b.tail[:0]
	}
	if _, b.err = b.w.Write(d[:i+1]); b.err != nil {
		return 0, b.err
	}
	b.tail = append(b.tail, d[i+1:]...)
	if redraw {
		b.p.redraw()
	}
	return len(d), nil
}

// Flush writes a held partial line.
func (b *barWriter) Flush() error {
	if b.err != nil || len(b.tail) == 0 {
		return b.err
	}
	redraw := b.p.clear()
	_, b.err = b.w.Write(b.tail)
	b.tail = b.tail[:0]
	if redraw {
		b.p.redraw()
	}
	return b.err
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
