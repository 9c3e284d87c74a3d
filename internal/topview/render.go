package topview

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/rivo/uniseg"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/termtext"
)

// Style is the role of a piece of text; the runner maps it to colors.
type Style int

// Styles.
const (
	StyleNormal      Style = iota
	StyleHeader            // the top bar
	StyleTitle             // column titles
	StyleTitleSorted       // the title of the sort column
	StyleHot               // the "hot" state cell
	StyleCold              // a row that left the hot set (dimmed)
	StyleError             // the status line on error
	StyleInfo              // the status line otherwise
	StyleFooter            // the key help
)

// Span is text in one style.
type Span struct {
	Text  string
	Style Style
}

// Line is one screen line.
type Line []Span

// String is the line's text.
func (l Line) String() string {
	var b strings.Builder
	for _, s := range l {
		b.WriteString(s.Text)
	}
	return b.String()
}

// width is the display width of s in terminal cells.
func width(s string) int { return uniseg.StringWidth(s) }

// pad fits s into exactly w cells: elided in the middle when too long,
// padded with spaces (on the left when right-aligned) when short.
func pad(s string, w int, right bool) string {
	if w <= 0 {
		return ""
	}
	s = elide(s, w)
	n := w - width(s)
	if n <= 0 {
		return s
	}
	if right {
		return strings.Repeat(" ", n) + s
	}
	return s + strings.Repeat(" ", n)
}

// elide shortens s to at most w cells by cutting its middle ("ab…yz").
func elide(s string, w int) string {
	if width(s) <= w {
		return s
	}
	if w <= 1 {
		return strings.Repeat("…", w)
	}
	var cl []string
	var ws []int
	state := -1
	for rest := s; rest != ""; {
		var c string
		var cw int
		c, rest, cw, state = uniseg.FirstGraphemeClusterInString(rest, state)
		cl = append(cl, c)
		ws = append(ws, cw)
	}
	room := w - 1
	headRoom := (room + 1) / 2
	tailRoom := room - headRoom
	var head, tail strings.Builder
	used := 0
	i := 0
	for ; i < len(cl) && used+ws[i] <= headRoom; i++ {
		head.WriteString(cl[i])
		used += ws[i]
	}
	tailRoom += headRoom - used // a wide rune that did not fit gives its room to the tail
	var tailParts []string
	used = 0
	for j := len(cl) - 1; j >= i && used+ws[j] <= tailRoom; j-- {
		tailParts = append(tailParts, cl[j])
		used += ws[j]
	}
	for j := len(tailParts) - 1; j >= 0; j-- {
		tail.WriteString(tailParts[j])
	}
	return head.String() + "…" + tail.String()
}

// fmtRate formats a rate in at most 7 characters.
func fmtRate(q float64) string {
	switch {
	case q <= 0:
		return "-"
	case q < 1e5:
		return strconv.FormatFloat(q, 'f', 1, 64)
	case q < 1e7:
		return strconv.FormatFloat(q, 'f', 0, 64)
	}
	return strconv.FormatFloat(q/1e6, 'f', 1, 64) + "M"
}

func fmtThreshold(q float64) string {
	if q <= 0 {
		return "?"
	}
	return strconv.FormatFloat(q, 'f', -1, 64)
}

// column layout
const (
	wRate   = 8
	wTrend  = 7 // sparkline, space, arrow
	wProto  = 8
	wState  = 5
	wSource = 8
	wLocal  = 5
	wBytes  = 7
	minKey  = 16
)

// nCols is the number of columns of the plain layout; the key is the last.
const nCols = 10

// colBytes is the BYTES/S column of the plain layout: reply bytes per
// second attributed to the key (bytes_ps), right-aligned like RATE.
const colBytes = 8

// LOCAL is the share of RATE that client shims served from memory and
// reported (absorbed_qps / qps).
var titles = []string{"RATE", "TREND", "PROTO", "SERVER", "NS", "STATE", "SOURCE", "LOCAL", "BYTES/S", "KEY"}

// The fleet view (several nodes, from the channel) inserts three columns
// after TREND: the publishing node, the key's write rate and whether shims
// may cache it.
var fleetTitles = []string{"RATE", "TREND", "NODE", "WRITE/S", "CACHE", "PROTO", "SERVER", "NS", "STATE", "SOURCE", "LOCAL", "BYTES/S", "KEY"}

const (
	wWrite = 8
	wCache = 5
)

// When the rows in view come from different sampling rates (keys of
// nodes that sample differently, or of one daemon as its rate changed), a
// SAMPLE column after RATE shows each row's: the share of connections its
// figures were scaled up from.
const (
	sampleTitle = "SAMPLE"
	wSample     = 6
)

// col maps a column of the plain layout (titles) to its place in the
// current one.
func (m *Model) col(i int) int {
	if m.sampleMixed && i >= 1 {
		i++
	}
	if m.opt.Fleet && i >= 2+m.off() {
		return i + 3
	}
	return i
}

// off is 1 when the SAMPLE column is shown: the fleet-only columns (NODE,
// WRITE/S, CACHE at 2, 3, 4) move one to the right.
func (m *Model) off() int {
	if m.sampleMixed {
		return 1
	}
	return 0
}

func (m *Model) titles() []string {
	t := titles
	if m.opt.Fleet {
		t = fleetTitles
	}
	if m.sampleMixed {
		return slices.Insert(slices.Clone(t), 1, sampleTitle)
	}
	return t
}

// fmtSample formats a sampling rate (the share of connections seen) in at
// most 6 characters: a percentage with three significant digits, or 1/N
// below 1 %. The rate need not be a power of two.
func fmtSample(r float64) string {
	switch {
	case r >= 1 || r <= 0:
		return "100%"
	case r > 0.999:
		return ">99.9%"
	case r >= 0.01:
		return strconv.FormatFloat(r*100, 'g', 3, 64) + "%"
	case r < 1e-6: // forged or absurd: bounded text
		return "<1/1M"
	}
	return "1/" + strconv.FormatFloat(math.Round(1/r), 'f', 0, 64)
}

// fmtBytes formats a byte rate in at most 7 characters: "-" when unknown.
func fmtBytes(b float64) string {
	switch {
	case b <= 0:
		return "-"
	case b < 1e4:
		return strconv.FormatFloat(b, 'f', 0, 64)
	case b < 1e6:
		return strconv.FormatFloat(b/1e3, 'f', 1, 64) + "k"
	case b < 1e9:
		return strconv.FormatFloat(b/1e6, 'f', 1, 64) + "M"
	}
	return strconv.FormatFloat(b/1e9, 'f', 1, 64) + "G"
}

// cells returns a row's column texts, in title order.
func (m *Model) cells(r *row) []string {
	rate, trend := "-", r.spark()+" "+r.trend().Arrow()
	state, local, bytes := "cold", "-", "-"
	switch {
	case r.hot:
		rate, state, bytes = m.rateText(r), "hot", fmtBytes(r.ev.BytesPS)
		if r.ev.AbsorbedQPS > 0 && r.ev.QPS > 0 {
			local = strconv.Itoa(int(min(r.ev.AbsorbedQPS/r.ev.QPS, 1)*100)) + "%"
		}
	case r.warm:
		rate = m.rateText(r)
		if r.coldSince.IsZero() {
			state = "-" // below the threshold, never hot
		}
	}
	src := r.ev.Source
	switch {
	case r.warm:
		// Listed among the hottest but below the threshold: nothing
		// detected it (and a key that left the hot set is no longer
		// what its last event said).
		src = "-"
	case src == "":
		src = event.SourceDetected
	}
	// Fields come from /hotkeys or the channel, which an attacker may
	// forge: escaped here, at render time, so no control sequence reaches
	// the terminal (the key is escaped when its row is made).
	var c []string
	if !m.opt.Fleet {
		c = []string{rate, trend, termtext.Field(r.ev.Proto), termtext.Field(r.ev.Server), termtext.Field(r.ev.NS), state, termtext.Field(src), local, bytes, r.keyText}
	} else {
		write, cache := "-", "yes"
		if r.ev.WriteQPS > 0 {
			write = fmtRate(r.ev.WriteQPS)
		}
		if r.ev.Uncacheable {
			cache = "no"
		}
		c = []string{rate, trend, termtext.Field(r.ev.Node), write, cache, termtext.Field(r.ev.Proto), termtext.Field(r.ev.Server), termtext.Field(r.ev.NS), state, termtext.Field(src), local, bytes, r.keyText}
	}
	if m.sampleMixed {
		smp := "-"
		if r.hot || r.warm {
			smp = fmtSample(sampleOf(&r.ev))
		}
		c = slices.Insert(c, 1, smp)
	}
	return c
}

// rateText is a row's rate; "≥" marks a lower bound (a key caught faster
// than its rate can be timed: the next refresh measures it), "~" one scaled
// up from sampled connections (an estimate).
func (m *Model) rateText(r *row) string {
	q := fmtRate(r.ev.QPS)
	if q != "-" && r.ev.Capped {
		q += "+" // absorbed demand cut to a bound: a lower bound
	}
	switch {
	case q == "-":
	case r.hot && r.ev.QPSLowerBound:
		return "≥" + q
	case sampleOf(&r.ev) < 1:
		return "~" + q
	}
	return q
}

// colWidths lays the columns out in w cells; the key takes what is left.
// On a narrow screen the bytes column is dropped, the server column shrinks (elided in the middle), then
// local, source, trend, (write rate,) ns and proto are dropped (width 0),
// in that order.
func (m *Model) colWidths(rows []*row, w int) []int {
	sw, nw, dw := width("SERVER"), width("NS"), width("NODE")
	for _, r := range rows {
		sw = max(sw, width(termtext.Field(r.ev.Server)))
		nw = max(nw, width(termtext.Field(r.ev.NS)))
		dw = max(dw, width(termtext.Field(r.ev.Node)))
	}
	sw, nw, dw = min(sw, 47), min(nw, 6), min(dw, 24)
	ws := []int{wRate, wTrend, wProto, sw, nw, wState, wSource, wLocal, wBytes, 0}
	if m.opt.Fleet {
		ws = []int{wRate, wTrend, dw, wWrite, wCache, wProto, sw, nw, wState, wSource, wLocal, wBytes, 0}
	}
	if m.sampleMixed {
		ws = slices.Insert(ws, 1, wSample)
	}
	last := len(ws) - 1
	fixed := func() int {
		n := 0
		for _, x := range ws[:last] {
			if x > 0 {
				n += x + 1 // and its separator
			}
		}
		return n
	}
	if w-fixed() < minKey {
		ws[m.col(colBytes)] = 0 // the first to go: most events have no bytes_ps
	}
	srv := m.col(3)
	if k := w - fixed(); k < minKey {
		ws[srv] = max(ws[srv]-(minKey-k), min(ws[srv], 12))
	}
	drops := []int{m.col(7), m.col(6), m.col(1), m.col(4), m.col(2)}
	if m.opt.Fleet {
		drops = []int{m.col(7), m.col(6), m.col(1), 3 + m.off(), m.col(4), m.col(2)}
	}
	if m.sampleMixed { // before proto: which rows are estimates matters more
		drops = slices.Insert(drops, len(drops)-1, 1)
	}
	for _, drop := range drops {
		if w-fixed() >= minKey {
			break
		}
		ws[drop] = 0
	}
	ws[last] = max(w-fixed(), 1)
	return ws
}

func (m *Model) sortArrow() string {
	desc := m.sortCol == SortRate || m.sortCol == SortBytes || m.sortCol == SortState
	if m.reverse {
		desc = !desc
	}
	if desc {
		return "▼"
	}
	return "▲"
}

var sortTitle = [...]int{SortRate: 0, SortKey: nCols - 1, SortProto: 2, SortServer: 3, SortState: 5, SortBytes: colBytes}

// Frame lays out the whole screen in w×h cells: a header, a status line,
// the column titles, as many rows as fit from the scroll position, and
// the key help.
func (m *Model) Frame(w, h int) []Line {
	if w <= 0 || h <= 0 {
		return nil
	}
	rows := m.rowsView()
	page := max(h-4, 0)
	m.pageLen = page
	m.offset = min(m.offset, max(len(rows)-page, 0))

	out := make([]Line, 0, h)
	out = append(out, Line{{pad(m.headerText(w, false), w, false), StyleHeader}})
	st, stStyle := m.statusText(len(rows))
	out = append(out, Line{{pad(st, w, false), stStyle}})

	ws := m.colWidths(rows, w)
	var tl Line
	for i, t := range m.titles() {
		if ws[i] == 0 {
			continue
		}
		style := StyleTitle
		if i == m.col(sortTitle[m.sortCol]) {
			t += m.sortArrow()
			style = StyleTitleSorted
		}
		if len(tl) > 0 {
			tl = append(tl, Span{" ", StyleTitle})
		}
		tl = append(tl, Span{pad(t, ws[i], i == 0 || i == m.col(colBytes)), style})
	}
	out = append(out, fitLine(tl, w))

	end := min(m.offset+page, len(rows))
	for _, r := range rows[m.offset:end] {
		out = append(out, fitLine(m.rowLine(r, ws), w))
	}
	for len(out) < h-1 {
		out = append(out, Line{{strings.Repeat(" ", w), StyleNormal}})
	}
	if len(out) < h {
		out = append(out, Line{{pad(m.footerText(len(rows), page, w), w, false), StyleFooter}})
	}
	return out[:h]
}

func (m *Model) rowLine(r *row, ws []int) Line {
	c := m.cells(r)
	base := StyleNormal
	if !r.hot && !r.warm {
		base = StyleCold
	}
	var l Line
	for i, t := range c {
		if ws[i] == 0 {
			continue
		}
		if len(l) > 0 {
			l = append(l, Span{" ", base})
		}
		s := base
		if i == m.col(5) && r.hot {
			s = StyleHot
		}
		l = append(l, Span{pad(t, ws[i], i == 0 || i == m.col(colBytes)), s})
	}
	return l
}

// fitLine cuts or pads l to exactly w cells.
func fitLine(l Line, w int) Line {
	out := make(Line, 0, len(l)+1)
	used := 0
	for _, s := range l {
		sw := width(s.Text)
		if used+sw > w {
			s.Text = cut(s.Text, w-used)
			sw = width(s.Text)
		}
		if sw > 0 {
			out = append(out, s)
		}
		used += sw
		if used >= w {
			break
		}
	}
	if used < w {
		out = append(out, Span{strings.Repeat(" ", w-used), StyleNormal})
	}
	return out
}

// cut keeps the first w cells of s.
func cut(s string, w int) string {
	var b strings.Builder
	used := 0
	state := -1
	for rest := s; rest != ""; {
		var c string
		var cw int
		c, rest, cw, state = uniseg.FirstGraphemeClusterInString(rest, state)
		if used+cw > w {
			break
		}
		b.WriteString(c)
		used += cw
	}
	return b.String()
}

func (m *Model) headerText(w int, full bool) string {
	lead := " hotsniff top · "
	src := termtext.Strip(m.source)
	if !m.got {
		return m.fitHeader(lead, src, " · waiting for data…", w, full)
	}
	var node, hot string
	if m.node != "" {
		node = "node " + termtext.Field(m.node)
	}
	ts := m.ts.UTC().Format("15:04:05Z")
	if full {
		ts = m.ts.UTC().Format(event.TSFormat)
	}
	if m.hotQPS > 0 {
		hot = fmt.Sprintf("%d hot ≥%s qps", m.nHot, fmtThreshold(m.hotQPS))
	} else {
		hot = fmt.Sprintf("%d hot", m.nHot) // the channel does not carry thresholds
	}
	variants := [][]string{{node, ts, hot}}
	if m.sampled {
		// That rates are estimates must survive a narrow terminal: a
		// shorter form first, then the time and the node give way.
		short := "~ sampled " + m.sampleRange()
		variants = [][]string{{node, ts, hot, m.samplingText()}}
		if !full {
			variants = append(variants, []string{node, ts, hot, short}, []string{node, hot, short}, []string{hot, short})
		}
	}
	var rest string
	for _, v := range variants {
		rest = " ·"
		for _, p := range v {
			if p != "" {
				rest += " " + p + " ·"
			}
		}
		rest = strings.TrimSuffix(rest, " ·")
		if full || width(lead)+min(width(src), 8)+width(rest) <= w {
			break
		}
	}
	return m.fitHeader(lead, src, rest, w, full)
}

// fitHeader elides the source to leave room for the rest of the header.
func (m *Model) fitHeader(lead, src, rest string, w int, full bool) string {
	if !full {
		src = elide(src, max(w-width(lead)-width(rest), 8))
	}
	return lead + src + rest
}

// samplingText says that rates shown come from sampled connections, and
// the rate (or the range of rates) in effect.
func (m *Model) samplingText() string {
	return "sampling " + m.sampleRange() + " of connections: ~ rates are estimates"
}

// sampleRange is the sampling rate of the rows in view, or its range.
func (m *Model) sampleRange() string {
	r := fmtSample(m.sampleMin)
	if m.sampleMixed {
		r += "–" + fmtSample(m.sampleMax)
	}
	return r
}

func (m *Model) statusText(n int) (string, Style) {
	if m.status != "" && m.statusErr {
		s := " ✖ " + termtext.Strip(m.status)
		if !m.ended {
			s += " (retrying"
			if m.got {
				s += "; rows as of " + m.ts.UTC().Format("15:04:05Z")
			}
			s += ")"
		}
		return s, StyleError
	}
	cold := 0
	for _, r := range m.view {
		if !r.hot && !r.coldSince.IsZero() {
			cold++
		}
	}
	s := fmt.Sprintf(" %s (%d cold) · sort %s %s", termtext.Count(n, "key", "keys"), cold, m.sortCol, m.sortArrow())
	if m.filter != "" {
		s += fmt.Sprintf(" · filter %q", m.filter)
	}
	if m.paused {
		s += " · PAUSED (p resumes)"
	}
	if m.status != "" {
		s += " · " + termtext.Strip(m.status)
	}
	return s, StyleInfo
}

func (m *Model) footerText(n, page, w int) string {
	if m.editing {
		return " filter: " + m.edit + "█   Enter apply · Esc clear"
	}
	help := " q quit · s sort · r reverse · / filter · p pause · ↑↓ PgUp PgDn"
	if w < 70 {
		help = " q quit s sort r rev / filter p pause"
	}
	if n > page && page > 0 {
		pos := fmt.Sprintf("%d-%d/%d ", m.offset+1, min(m.offset+page, n), n)
		if width(help)+1+width(pos) <= w {
			help += strings.Repeat(" ", w-width(help)-width(pos)) + pos
		}
	}
	return help
}

// WritePlain writes the header and every row (filtered and sorted, keys in
// full) as a plain-text table, for scripts and non-terminals.
func (m *Model) WritePlain(w io.Writer) error {
	rows := m.rowsView()
	var b strings.Builder
	b.WriteString(strings.TrimSpace(m.headerText(0, true)))
	b.WriteByte('\n')
	if m.statusErr {
		st, _ := m.statusText(len(rows))
		b.WriteString(strings.TrimSpace(st))
		b.WriteByte('\n')
	}
	cells := make([][]string, 0, len(rows)+1)
	cells = append(cells, m.titles())
	for _, r := range rows {
		cells = append(cells, m.cells(r))
	}
	ws := make([]int, len(m.titles()))
	for _, c := range cells {
		for i, t := range c {
			ws[i] = max(ws[i], width(t))
		}
	}
	for _, c := range cells {
		var l strings.Builder
		for i, t := range c {
			if i > 0 {
				l.WriteString("  ")
			}
			switch {
			case i == len(c)-1:
				l.WriteString(t)
			case i == 0 || i == m.col(colBytes):
				l.WriteString(strings.Repeat(" ", ws[i]-width(t)) + t)
			default:
				l.WriteString(t + strings.Repeat(" ", ws[i]-width(t)))
			}
		}
		b.WriteString(strings.TrimRight(l.String(), " "))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}
