package topview

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/termtext"
)

// SortCol is a column the table can be sorted by.
type SortCol int

// Sort columns, in the order 's' cycles through them.
const (
	SortRate SortCol = iota
	SortKey
	SortProto
	SortServer
	SortState
	SortBytes
	numSort
)

var sortNames = [...]string{"rate", "key", "proto", "server", "state", "bytes"}

func (c SortCol) String() string { return sortNames[c] }

// ParseSort reads a sort column name.
func ParseSort(s string) (SortCol, error) {
	for i, n := range sortNames {
		if s == n {
			return SortCol(i), nil
		}
	}
	return 0, fmt.Errorf("sort column %q: want one of %s", s, strings.Join(sortNames[:], ", "))
}

const (
	historyLen = 8 // qps samples kept per row for the trend
	sparkLen   = 5 // samples drawn in the sparkline
	// trendRatio is the relative change that counts as rising or falling.
	trendRatio = 0.05
)

// Options tune a Model.
type Options struct {
	// ColdFor is how long (snapshot time) a key that left the hot set stays
	// listed as cold. 0 means 30s; negative drops it at once.
	ColdFor time.Duration
	// Sort and Reverse set the initial order.
	Sort    SortCol
	Reverse bool
	// Filter is the initial filter.
	Filter string
	// TopN, when positive, lists at most TopN rows (more only when more
	// keys are hot: every hot key is listed): the hot keys, then, from
	// sources that report them, the keys below the threshold with the
	// highest rates, then, while there is room, the keys that recently left
	// the hot set.
	TopN int
	// Fleet shows the keys of every node (the channel's view): a node
	// column, each key's write rate and whether shims may cache it.
	Fleet bool
}

// row is one key on screen.
type row struct {
	id        string
	ev        event.Event
	keyText   string // the key as shown (quoted or b64: as needed)
	hist      []float64
	hot       bool
	warm      bool      // listed by the source among the hottest, below the threshold
	coldSince time.Time // when it left the hot set; zero if it never was hot
	seen      uint64    // generation of the last snapshot that listed it
}

// rate is the sort rate: cold rows sink below every listed one.
func (r *row) rate() float64 {
	if !r.hot && !r.warm {
		return -1
	}
	return r.ev.QPS
}

// byteRate is the reply-bytes sort rate: cold rows sink below every hot one.
func (r *row) byteRate() float64 {
	if !r.hot {
		return -1
	}
	return r.ev.BytesPS
}

// Trend is the direction of a row's rate over its last samples.
type Trend int

// Trends.
const (
	TrendNew Trend = iota // one sample only
	TrendSteady
	TrendRising
	TrendFalling
)

// Arrow is the trend's symbol.
func (t Trend) Arrow() string {
	switch t {
	case TrendRising:
		return "↑"
	case TrendFalling:
		return "↓"
	case TrendSteady:
		return "→"
	}
	return "·"
}

func (r *row) trend() Trend {
	n := len(r.hist)
	if n < 2 {
		return TrendNew
	}
	last, prev := r.hist[n-1], r.hist[n-2]
	d := last - prev
	switch {
	case d > trendRatio*prev && d > 0.05:
		return TrendRising
	case -d > trendRatio*prev && -d > 0.05:
		return TrendFalling
	}
	return TrendSteady
}

var sparks = []rune("▁▂▃▄▅▆▇█")

// spark draws the last sparkLen samples, scaled to their maximum.
func (r *row) spark() string {
	h := r.hist
	if len(h) > sparkLen {
		h = h[len(h)-sparkLen:]
	}
	mx := 0.0
	for _, v := range h {
		mx = max(mx, v)
	}
	var b strings.Builder
	for _, v := range h {
		i := 0
		if mx > 0 {
			i = int(v/mx*float64(len(sparks)-1) + 0.5)
		}
		b.WriteRune(sparks[i])
	}
	return b.String()
}

// Model is the state of the view. It is not safe for concurrent use: Run
// owns it.
type Model struct {
	opt  Options
	rows map[string]*row
	gen  uint64

	// Header data of the last snapshot.
	source string
	node   string
	ts     time.Time
	hotQPS float64
	nHot   int
	got    bool // a snapshot arrived

	status    string // error or end-of-source line
	statusErr bool
	ended     bool

	sortCol SortCol
	reverse bool
	filter  string
	editing bool
	edit    string
	paused  bool
	offset  int
	pageLen int // rows visible in the last frame

	view  []*row // sorted, filtered rows; rebuilt when dirty
	dirty bool

	// Sampling of the rows in view (hot or listed below the threshold),
	// set with view: the lowest and highest rate (1: all seen), whether
	// any row is sampled, and whether rows differ (then each row shows
	// its rate in a SAMPLE column).
	sampleMin, sampleMax float64
	sampled, sampleMixed bool
}

// NewModel returns an empty model; source labels the header until the first
// snapshot arrives.
func NewModel(source string, opt Options) *Model {
	if opt.ColdFor == 0 {
		opt.ColdFor = 30 * time.Second
	}
	return &Model{
		opt:     opt,
		rows:    map[string]*row{},
		source:  source,
		sortCol: opt.Sort,
		reverse: opt.Reverse,
		filter:  opt.Filter,
		dirty:   true,
	}
}

// rowID is a row's identity: two nodes reporting one key are two rows.
func rowID(e *event.Event) string {
	return e.Node + "\x00" + e.Proto + "\x00" + e.Server + "\x00" + e.NS + "\x00" + string(e.Key)
}

// KeyText is how a key is shown: as is when printable UTF-8, Go-quoted when
// UTF-8 with non-printable characters, b64:BASE64 when not UTF-8.
func KeyText(k []byte) string {
	if !utf8.Valid(k) {
		return "b64:" + base64.StdEncoding.EncodeToString(k)
	}
	// Spaces stay readable here (the key is the last column); every
	// other non-printable character is escaped by the shared helper.
	if s := string(k); termtext.Strip(s) == s {
		return s
	}
	return termtext.Key(k)
}

// Apply takes a snapshot: its keys are hot, listed keys missing from it turn
// cold, and cold keys older than ColdFor are dropped. A successful snapshot
// clears the error line.
func (m *Model) Apply(s Snapshot) {
	m.gen++
	if s.TS.IsZero() {
		s.TS = time.Now()
	}
	if s.Source != "" {
		m.source = s.Source
	}
	m.node, m.ts, m.hotQPS, m.got = s.Node, s.TS, s.HotQPS, true
	if !m.ended {
		m.status, m.statusErr = "", false
	}
	for i := range s.Keys {
		e := s.Keys[i]
		if e.Type != "" && e.Type != event.TypeHot {
			continue
		}
		id := rowID(&e)
		r := m.rows[id]
		if r == nil {
			r = &row{id: id, keyText: KeyText(e.Key)}
			m.rows[id] = r
		}
		if r.seen == m.gen { // listed twice: keep the higher rate
			if e.QPS <= r.ev.QPS {
				continue
			}
			r.hist = r.hist[:len(r.hist)-1]
		}
		r.ev = e
		r.hot, r.warm, r.coldSince = true, false, time.Time{}
		r.seen = m.gen
		r.hist = appendHist(r.hist, e.QPS)
	}
	for i := range s.Warm {
		e := s.Warm[i]
		id := rowID(&e)
		r := m.rows[id]
		if r == nil {
			r = &row{id: id, keyText: KeyText(e.Key)}
			m.rows[id] = r
		}
		if r.seen == m.gen {
			continue // hot in this snapshot
		}
		if r.hot { // it just left the hot set
			r.coldSince = s.TS
		}
		r.ev = e
		r.hot, r.warm = false, true
		r.seen = m.gen
		r.hist = appendHist(r.hist, e.QPS)
	}
	m.nHot = 0
	for id, r := range m.rows {
		switch {
		case r.seen == m.gen:
			if r.hot {
				m.nHot++
			}
		case r.warm && r.coldSince.IsZero():
			delete(m.rows, id) // no longer among the hottest
		case r.warm:
			r.warm = false
			r.hist = appendHist(r.hist, 0)
		case r.hot:
			r.hot = false
			r.coldSince = s.TS
			r.hist = appendHist(r.hist, 0)
			if m.opt.ColdFor < 0 {
				delete(m.rows, id)
			}
		case s.TS.Sub(r.coldSince) >= m.opt.ColdFor:
			delete(m.rows, id)
		}
	}
	m.dirty = true
}

func appendHist(h []float64, v float64) []float64 {
	if len(h) == historyLen {
		copy(h, h[1:])
		h = h[:historyLen-1]
	}
	return append(h, v)
}

// SetError shows err on the status line; the rows stay as they were.
func (m *Model) SetError(err error) {
	m.status, m.statusErr = err.Error(), true
}

// End marks the source as finished: msg is shown on the status line
// (an error when isErr).
func (m *Model) End(msg string, isErr bool) {
	m.ended = true
	m.status, m.statusErr = msg, isErr
}

// Paused reports whether the view is frozen.
func (m *Model) Paused() bool { return m.paused }

// Editing reports whether the filter is being typed.
func (m *Model) Editing() bool { return m.editing }

// Action is what a key asks of the runner.
type Action int

// Actions.
const (
	ActNone Action = iota
	ActQuit
)

// Key is a key press, independent of the terminal library.
type Key int

// Keys the model understands besides runes.
const (
	KeyRune Key = iota
	KeyEnter
	KeyEsc
	KeyBackspace
	KeyUp
	KeyDown
	KeyPgUp
	KeyPgDn
	KeyHome
	KeyEnd
	KeyCtrlC
	KeyOther
)

// HandleKey applies one key press.
func (m *Model) HandleKey(k Key, r rune) Action {
	if k == KeyCtrlC {
		return ActQuit
	}
	if m.editing {
		switch k {
		case KeyRune:
			m.edit += string(r)
		case KeyBackspace:
			if _, n := utf8.DecodeLastRuneInString(m.edit); n > 0 {
				m.edit = m.edit[:len(m.edit)-n]
			}
		case KeyEnter:
			m.editing = false
			m.filter = m.edit
			m.offset = 0
			m.dirty = true
		case KeyEsc:
			m.editing = false
			m.edit, m.filter = "", ""
			m.dirty = true
		}
		return ActNone
	}
	switch k {
	case KeyRune:
		switch r {
		case 'q', 'Q':
			return ActQuit
		case 's':
			m.sortCol = (m.sortCol + 1) % numSort
			m.dirty = true
		case 'S':
			m.sortCol = (m.sortCol + numSort - 1) % numSort
			m.dirty = true
		case 'r':
			m.reverse = !m.reverse
			m.dirty = true
		case '/':
			m.editing = true
			m.edit = m.filter
		case 'p', ' ':
			m.paused = !m.paused
		case 'k':
			m.scroll(-1)
		case 'j':
			m.scroll(1)
		}
	case KeyEsc:
		if m.filter != "" {
			m.filter = ""
			m.dirty = true
		}
	case KeyUp:
		m.scroll(-1)
	case KeyDown:
		m.scroll(1)
	case KeyPgUp:
		m.scroll(-max(m.pageLen-1, 1))
	case KeyPgDn:
		m.scroll(max(m.pageLen-1, 1))
	case KeyHome:
		m.offset = 0
	case KeyEnd:
		m.offset = 1 << 30
	}
	return ActNone
}

func (m *Model) scroll(n int) {
	m.offset = max(m.offset+n, 0) // clamped to the rows when drawn
}

// rowsView returns the rows to show: filtered and sorted.
func (m *Model) rowsView() []*row {
	if !m.dirty {
		return m.view
	}
	m.view = m.view[:0]
	f := strings.ToLower(m.filter)
	for _, r := range m.rows {
		if f != "" && !strings.Contains(strings.ToLower(r.keyText), f) &&
			!strings.Contains(strings.ToLower(r.ev.Proto), f) &&
			!strings.Contains(strings.ToLower(r.ev.Server), f) &&
			!(m.opt.Fleet && strings.Contains(strings.ToLower(r.ev.Node), f)) {
			continue
		}
		m.view = append(m.view, r)
	}
	if n := m.opt.TopN; n > 0 {
		m.view = topRows(m.view, n)
	}
	slices.SortFunc(m.view, m.compare)
	m.noteSampling()
	m.dirty = false
	return m.view
}

// sampleOf is the fraction of connections a row's figures come from:
// 1 when everything was seen (no sample field, or a value outside (0,1)).
func sampleOf(e *event.Event) float64 {
	if e.Sample > 0 && e.Sample < 1 {
		return e.Sample
	}
	return 1
}

// noteSampling sums up the sampling of the rows in view that show a rate.
func (m *Model) noteSampling() {
	m.sampleMin, m.sampleMax, m.sampled, m.sampleMixed = 1, 1, false, false
	first := true
	for _, r := range m.view {
		if !r.hot && !r.warm {
			continue
		}
		s := sampleOf(&r.ev)
		if first {
			m.sampleMin, m.sampleMax, first = s, s, false
		}
		m.sampleMin, m.sampleMax = min(m.sampleMin, s), max(m.sampleMax, s)
	}
	m.sampled = m.sampleMin < 1
	m.sampleMixed = m.sampleMin != m.sampleMax
}

// compare orders rows by the sort column (rate, bytes and state: highest first;
// the others ascending), then by rate, then by identity.
func (m *Model) compare(a, b *row) int {
	var c int
	switch m.sortCol {
	case SortRate:
		c = cmp.Compare(b.rate(), a.rate())
	case SortBytes:
		c = cmp.Compare(b.byteRate(), a.byteRate())
	case SortKey:
		c = strings.Compare(a.keyText, b.keyText)
	case SortProto:
		c = strings.Compare(a.ev.Proto, b.ev.Proto)
	case SortServer:
		c = strings.Compare(a.ev.Server, b.ev.Server)
	case SortState:
		c = cmp.Compare(stateRank(b), stateRank(a))
	}
	if c == 0 && m.sortCol != SortRate {
		c = cmp.Compare(b.rate(), a.rate())
	}
	if c == 0 {
		c = strings.Compare(a.id, b.id)
	}
	if m.reverse {
		c = -c
	}
	return c
}

func stateRank(r *row) int {
	if r.hot {
		return 1
	}
	return 0
}

// topRows keeps at most n rows (`--top 10` shows ten rows, not ten and the
// cold ones), more only when more than n keys are hot: every hot key (a key
// hot by reply bytes can have a low rate), then the keys below the
// threshold of highest rate, then the cold rows that left the hot set most
// recently, while there is room.
func topRows(rows []*row, n int) []*row {
	rank := func(r *row) int {
		switch {
		case r.hot:
			return 0
		case r.warm:
			return 1
		}
		return 2
	}
	slices.SortFunc(rows, func(a, b *row) int {
		if c := cmp.Compare(rank(a), rank(b)); c != 0 {
			return c
		}
		if c := cmp.Compare(b.rate(), a.rate()); c != 0 {
			return c
		}
		if c := b.coldSince.Compare(a.coldSince); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	hot := 0
	for _, r := range rows {
		if r.hot {
			hot++
		}
	}
	return rows[:min(max(n, hot), len(rows))]
}
