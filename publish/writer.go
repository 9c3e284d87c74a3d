package publish

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/termtext"
)

// Output formats of a Writer.
const (
	FormatJSONL = "jsonl"
	FormatText  = "text"
)

// Writer prints events as JSONL (exactly the contract object) or as a text
// table. It assigns seq (from 1) to events that have none, so print-only
// runs number their events like a publisher does.
type Writer struct {
	mu     sync.Mutex
	w      *bufio.Writer
	format string
	node   string
	seq    uint64
	header bool
	err    error
}

// NewWriter returns a Writer for format "jsonl" or "text". Node, if not
// empty, fills the node of events that have none.
func NewWriter(w io.Writer, format, node string) (*Writer, error) {
	switch format {
	case "", FormatJSONL:
		format = FormatJSONL
	case FormatText:
	default:
		return nil, fmt.Errorf("output format must be jsonl or text, not %q", format)
	}
	return &Writer{w: bufio.NewWriter(w), format: format, node: node}, nil
}

// Emit writes e and flushes, so a subscriber's output is live. The first
// write error is kept (Err) and later events are discarded.
func (w *Writer) Emit(e *event.Event) { w.emit(e, false) }

// EmitSnapshot writes an entry read from the snapshot rather than received
// as a message: in JSONL it carries "snapshot":true after the event's own
// fields, in text its TYPE is marked "(snap)".
func (w *Writer) EmitSnapshot(e *event.Event) { w.emit(e, true) }

func (w *Writer) emit(e *event.Event, snap bool) {
	if e == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return
	}
	if e.Seq == 0 {
		w.seq++
		e.Seq = w.seq
	} else if e.Seq > w.seq {
		w.seq = e.Seq
	}
	if e.V == 0 {
		e.V = event.Version
	}
	if e.Node == "" {
		e.Node = w.node
	}
	if e.Source == "" {
		e.Source = event.SourceDetected
	}
	if w.format == FormatJSONL {
		b, err := e.MarshalJSON()
		if err != nil {
			w.err = fmt.Errorf("encode event: %w", err)
			return
		}
		if snap && len(b) > 1 && b[len(b)-1] == '}' {
			b = append(b[:len(b)-1:len(b)-1], `,"snapshot":true}`...)
		}
		w.w.Write(b)
		w.w.WriteByte('\n')
	} else {
		w.text(e, snap)
	}
	if err := w.w.Flush(); err != nil {
		w.err = fmt.Errorf("write event: %w", err)
	}
}

// Column widths of the text table; longer values push the row right rather
// than being cut, since a truncated key is a wrong key.
const textRow = "%-27s %-10s %-8s %-21s %-3s %-40s %10s\n"

func (w *Writer) text(e *event.Event, snap bool) {
	if !w.header {
		w.header = true
		fmt.Fprintf(w.w, textRow, "TIME", "TYPE", "PROTO", "SERVER", "NS", "KEY", "QPS")
	}
	qps := "-"
	if e.Type != event.TypeInvalidate {
		qps = strconv.FormatFloat(e.QPS, 'f', 1, 64)
		switch {
		case e.QPSLowerBound:
			// Caught faster than its rate can be timed: at least this.
			qps = "≥" + qps
		case e.Sample > 0 && e.Sample < 1:
			// Scaled up from part of the connections: an estimate, as
			// `hotsniff top` marks it.
			qps = "~" + qps
		}
		if e.Capped {
			// Reported demand was cut to a bound: at least this much.
			qps += "+"
		}
	}
	// Every field may come from whoever can PUBLISH on the channel: each is
	// escaped, so no control sequence reaches the terminal.
	typ := termtext.Field(e.Type)
	if e.Source == event.SourceManual {
		typ += "*" // manual entries are marked, the rest of the row is the same
	}
	if snap {
		typ += " (snap)" // read from the snapshot, not received as a message
	}
	ns := "-"
	if e.NS != "" {
		ns = termtext.Field(e.NS)
	}
	fmt.Fprintf(w.w, textRow, e.TS.UTC().Format(event.TSFormat), typ, termtext.Field(e.Proto), termtext.Field(e.Server), ns, PrintableKey(e.Key), qps)
}

// PrintableKey returns the key as is when it is printable UTF-8 without
// spaces, else Go-quoted, so every key stays one unambiguous column.
func PrintableKey(k []byte) string { return termtext.Key(k) }

// Err is the first write error, if any.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
