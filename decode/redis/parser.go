package redis

import (
	"bytes"

	"github.com/hotsniff/hotsniff/decode"
)

// RESP request framing (https://redis.io/docs/reference/protocol-spec/).
const (
	respArray = '*' // *<count>\r\n followed by <count> bulk strings
	respBulk  = '$' // $<len>\r\n<len bytes>\r\n
)

// maxIntArg is the longest numeric argument (numkeys, SELECT index) the
// parser reads: 19 digits and a sign. Longer cannot be a valid int64.
const maxIntArg = 20

type state uint8

const (
	stIdle      state = iota // at a request boundary
	stArgHeader              // expecting "$<len>\r\n" of argument argi
	stArgData                // header read; waiting for the whole argument and its CRLF
)

// Values of parser.cmd besides an index into commands.
const (
	cmdUnknown    = -1
	cmdPendingSub = -2 // a container command waiting for its subcommand name
)

type phase uint8

const (
	phDone     phase = iota
	phSearch         // looking for keyword in arguments from..to
	phNumKeys        // waiting for the numkeys argument at numIdx
	phRange          // keys at first, first+step, ..., last
	phSortScan       // SORT's STORE option, found like redis-server's sortGetKeys
)

// specState is the progress of one key spec through the current request.
type specState struct {
	spec  *KeySpec
	kw    string
	ph    phase
	from  int32 // keyword search window, inclusive
	to    int32
	first int32 // range (or keynum base before numkeys is known)
	last  int32
	step  int32
	// numIdx is the numkeys argument (phNumKeys).
	numIdx int32
	// sortSkip counts option arguments still to pass over and storeKey is
	// the argument after the latest STORE (phSortScan).
	sortSkip int32
	storeKey int32
}

// parser decodes the requests of one connection. Its state between Parse
// calls is the position inside the current request (argument index and
// count, command, key-spec progress), so a request is decoded argument by
// argument however the stream splits it: only a key (or a command name,
// keyword, numkeys) must be whole in one buffer.
type parser struct {
	cfg Config

	f *decode.Flow // of the Parse call in progress
	s decode.Sink

	ns            int32
	nsBeforeMulti int32
	inMulti       bool

	resync        bool // scanning for a request boundary
	resyncCounted bool // ReasonResync reported for this episode

	st      state
	argc    int
	argi    int
	bulkLen int
	cmd     int // index into commands, cmdUnknown or cmdPendingSub
	parent  int // container index while cmd == cmdPendingSub
	arityOK bool
	keysOn  bool   // some key spec is still live
	weight  uint32 // weight of each key of this request
	nspecs  int
	specs   [maxKeySpecs]specState

	// lastName and lastIdx remember the previous command name exactly as
	// sent: pipelines repeat one command, and comparing a few bytes is
	// cheaper than folding case and searching the table.
	lastName [maxNameLen]byte
	lastLen  int
	lastIdx  int

	req decode.Request
	// cur is the key of the request being decoded when it reads exactly
	// one key, prev that of the request before it: an absorbed-demand
	// report (report.go) counts only right after a read of its key.
	cur, prev pairKey
	curKeys   int
	abs       decode.Absorbed
	// scratch holds an unescaped quoted inline argument; it grows to at most
	// MaxInlineLen.
	scratch []byte
}

func newParser(cfg Config, midStream bool) *parser {
	// A connection joined mid-stream missed any SELECT: NS stays 0.
	return &parser{cfg: cfg, resync: midStream}
}

// Gap drops the request in progress and resynchronises.
func (p *parser) Gap() {
	p.st = stIdle
	p.forgetPairs()
	if !p.resync {
		p.resync = true
		p.resyncCounted = false
	}
}

// Parse implements decode.Parser. Keys reported to s alias b (or, for a
// quoted inline word, the parser's scratch buffer): valid only during the
// Sink.Key call.
//
// Bytes it may leave unconsumed, to be offered again: an incomplete header
// or resynchronisation candidate (under 80 bytes), an incomplete key
// argument (at most MaxKeyLen+2), an incomplete inline line (under
// MaxInlineLen), an incomplete absorbed-demand report (at most
// MaxKeyLen+reportOverhead+2). A value it does not need is skipped by
// returning more than len(b).
func (p *parser) Parse(b []byte, f *decode.Flow, s decode.Sink) int {
	n := p.parse(b, f, s)
	p.settlePairs()
	return n
}

func (p *parser) parse(b []byte, f *decode.Flow, s decode.Sink) int {
	p.f, p.s = f, s
	pos := 0
	for {
		switch p.st {
		case stIdle:
			if pos >= len(b) {
				return pos
			}
			if p.resync {
				q, found := p.scan(b, pos)
				// Only bytes thrown away count: a connection joined
				// mid-stream exactly at a request boundary lost nothing.
				if q > pos && !p.resyncCounted {
					s.Error(f, ReasonResync)
					p.resyncCounted = true
				}
				if !found {
					return q
				}
				pos = q
				p.resync = false
				p.resyncCounted = false
			}
			if b[pos] != respArray {
				next, more := p.inline(b, pos)
				if more {
					return next
				}
				pos = next
				continue
			}
			n, hl := parseLen(b[pos+1:])
			if hl == 0 {
				return pos
			}
			if hl < 0 {
				p.fail(ReasonBadLength)
				pos++
				continue
			}
			pos += 1 + hl
			if n <= 0 {
				continue // redis-server ignores "*0" and "*-1"
			}
			if n > p.cfg.MaxArrayLen {
				p.fail(ReasonTooLong)
				continue
			}
			p.startRequest(n)

		case stArgHeader:
			if pos >= len(b) {
				return pos
			}
			if b[pos] != respBulk {
				// Scan from here: a '*' here is likely the next request
				// after one whose array length lied.
				p.fail(ReasonBadType)
				continue
			}
			var n, hl int
			if pos+4 <= len(b) && b[pos+1]-'0' <= 9 && b[pos+2] == '\r' && b[pos+3] == '\n' {
				n, hl = int(b[pos+1]-'0'), 3 // one digit: most arguments, inlined
			} else {
				n, hl = parseLen(b[pos+1:])
			}
			if hl == 0 {
				return pos
			}
			if hl < 0 || n < 0 {
				p.fail(ReasonBadLength)
				pos++
				continue
			}
			if n > p.cfg.MaxBulkLen {
				p.fail(ReasonTooLong)
				pos++
				continue
			}
			pos += 1 + hl
			p.bulkLen = n
			end := pos + n + 2
			if p.wants(n) {
				if end > len(b) {
					p.st = stArgData
					return pos
				}
				if b[end-2] != '\r' || b[end-1] != '\n' {
					p.fail(ReasonBadFormat)
					continue
				}
				p.arg(b[pos:end-2], true)
				pos = end
				continue
			}
			if end > len(b) {
				// Skip the rest of the value without buffering it.
				p.arg(nil, false)
				return end
			}
			if b[end-2] != '\r' || b[end-1] != '\n' {
				p.fail(ReasonBadFormat)
				continue
			}
			p.arg(nil, false)
			pos = end

		case stArgData:
			end := pos + p.bulkLen + 2
			if end > len(b) {
				return pos
			}
			if b[end-2] != '\r' || b[end-1] != '\n' {
				p.fail(ReasonBadFormat)
				continue
			}
			p.arg(b[pos:end-2], true)
			pos = end
		}
	}
}

// fail counts a decode error and starts resynchronising.
func (p *parser) fail(reason string) {
	p.s.Error(p.f, reason)
	p.st = stIdle
	p.forgetPairs()
	if !p.resync {
		p.resync = true
		p.s.Error(p.f, ReasonResync)
		p.resyncCounted = true
	}
}

func (p *parser) startRequest(argc int) {
	p.argc = argc
	p.argi = 0
	p.prev, p.cur, p.curKeys = p.cur, pairKey{}, 0
	p.cmd = cmdUnknown
	p.keysOn = false
	p.st = stArgHeader
}

// wants reports whether argument argi, n bytes long, must be whole in the
// buffer (command name, key, keyword, numkeys, SELECT index) or can be
// skipped.
func (p *parser) wants(n int) bool {
	i := int32(p.argi)
	if i == 0 || p.cmd == cmdPendingSub {
		return n <= maxNameLen
	}
	if p.cmd == idxSelect {
		return i == 1 && n <= maxIntArg
	}
	if p.cmd == idxEcho {
		return i == 1 && p.arityOK && n <= p.cfg.MaxKeyLen+reportOverhead
	}
	if !p.keysOn {
		return false
	}
	for j := range p.specs[:p.nspecs] {
		st := &p.specs[j]
		switch st.ph {
		case phRange:
			if i >= st.first && i <= st.last && (st.step == 1 || (i-st.first)%st.step == 0) {
				return n <= p.cfg.MaxKeyLen
			}
		case phSearch:
			if i >= st.from && i <= st.to && n == len(st.kw) {
				return true
			}
		case phNumKeys:
			if i == st.numIdx && n <= maxIntArg {
				return true
			}
		case phSortScan:
			if i == st.storeKey {
				return n <= p.cfg.MaxKeyLen
			}
			if i >= st.from && st.sortSkip == 0 && (n == 2 || n == 3 || n == 5) { // BY, GET, LIMIT, STORE
				return true
			}
		}
	}
	return false
}

// arg handles argument argi: a is its bytes when have, otherwise it was
// skipped (not wanted, or too long to be what was wanted).
func (p *parser) arg(a []byte, have bool) {
	i := p.argi
	switch {
	case i == 0:
		idx := cmdUnknown
		if have {
			idx = p.lookupName(a)
		}
		if idx >= 0 && commands[idx].SubHi > commands[idx].SubLo && p.argc >= 2 {
			p.cmd = cmdPendingSub
			p.parent = idx
		} else {
			p.setCmd(idx)
		}
	case p.cmd == cmdPendingSub:
		idx := -1
		if have {
			idx = lookupSub(p.parent, a)
		}
		if idx < 0 {
			// An unknown subcommand is rejected by the server; report the
			// container, which has no keys.
			idx = p.parent
		}
		p.setCmd(idx)
	case p.cmd == idxSelect:
		if i == 1 && have && p.arityOK {
			if n, ok := parseInt(a); ok && n >= 0 && n <= 1<<31-1 {
				p.ns = int32(n)
			}
		}
	case p.cmd == idxEcho:
		if i == 1 && have && p.arityOK {
			p.report(a)
		}
	case p.keysOn:
		p.keyArg(int32(i), a, have)
	}
	p.argi++
	if p.argi >= p.argc {
		p.st = stIdle
	} else {
		p.st = stArgHeader
	}
}

func (p *parser) lookupName(a []byte) int {
	if len(a) == p.lastLen && string(a) == string(p.lastName[:p.lastLen]) {
		return p.lastIdx
	}
	idx := lookupFold(a)
	if idx >= 0 {
		p.lastLen = copy(p.lastName[:], a)
		p.lastIdx = idx
	}
	return idx
}

// setCmd reports the request once its command is known and prepares its
// key specs.
func (p *parser) setCmd(idx int) {
	p.cmd = idx
	p.keysOn = false
	p.arityOK = false
	p.req.NS = p.ns
	if idx < 0 {
		p.req.Op = "UNKNOWN"
		p.req.Write = false
		p.s.Request(p.f, &p.req)
		return
	}
	c := &commands[idx]
	p.req.Op = c.Name
	p.req.Write = c.Flags&FlagWrite != 0
	p.s.Request(p.f, &p.req)
	if !c.arityOK(p.argc) {
		return
	}
	p.arityOK = true
	switch idx {
	case idxMulti:
		if !p.inMulti {
			p.inMulti = true
			p.nsBeforeMulti = p.ns
		}
	case idxExec:
		p.inMulti = false
	case idxDiscard:
		if p.inMulti {
			// A SELECT queued since MULTI never runs.
			p.ns = p.nsBeforeMulti
			p.inMulti = false
		}
	case idxReset:
		p.ns = 0
		p.inMulti = false
	}
	if len(c.KeySpecs) > 0 {
		p.initSpecs(idx, c)
	}
}

func (p *parser) initSpecs(idx int, c *Command) {
	p.weight = 1
	if isFieldWeighted[idx] && p.argc > 3 {
		p.weight = uint32(p.argc - 2)
	}
	argc := int32(p.argc)
	if ks := &c.KeySpecs[0]; len(c.KeySpecs) == 1 && ks.Begin == BeginIndex && ks.Find == FindRange && ks.LastKey >= 0 && ks.Flags&KeyNotKey == 0 {
		// Fast path for fixed key positions (GET k, HMGET h f..., SET k v).
		st := &p.specs[0]
		st.first, st.last, st.step = ks.Index, ks.Index+ks.LastKey, max(ks.KeyStep, 1)
		st.ph = phRange
		p.nspecs = 1
		p.keysOn = st.last < argc
		return
	}
	p.nspecs = 0
	for j := range c.KeySpecs {
		ks := &c.KeySpecs[j]
		if ks.Flags&KeyNotKey != 0 {
			continue
		}
		st := &p.specs[p.nspecs]
		st.spec = ks
		st.ph = phDone
		switch ks.Begin {
		case BeginIndex:
			p.beginKeys(st, ks.Index)
		case BeginKeyword:
			st.kw = ks.Keyword
			if ks.StartFrom > 0 {
				st.from, st.to = ks.StartFrom, argc-2
			} else {
				// redis-server searches backwards from argc+StartFrom down
				// to 2. Searching forwards for the first match decodes the
				// argument by argument; for MIGRATE (the only such command)
				// it is also how migrateCommand itself finds KEYS, from 6.
				st.from, st.to = 2, argc+ks.StartFrom
				if idx == idxMigrate {
					st.from = 6
				}
			}
			if st.from <= st.to {
				st.ph = phSearch
			}
		case BeginUnknown:
			// SORT's STORE; its BY/GET spec names patterns, not request keys.
			if idx == idxSort && ks.Flags&KeyOW != 0 {
				st.ph = phSortScan
				st.from = 2 // options start after the key
				st.sortSkip = 0
				st.storeKey = -1
			}
		}
		if st.ph != phDone {
			p.nspecs++
		}
	}
	p.keysOn = p.nspecs > 0
}

// beginKeys resolves a spec's keys once its first key index is known,
// dropping specs whose range does not fit the request (the server rejects
// such requests).
func (p *parser) beginKeys(st *specState, first int32) {
	ks := st.spec
	argc := int32(p.argc)
	st.ph = phDone
	st.step = max(ks.KeyStep, 1)
	switch ks.Find {
	case FindRange:
		var last int32
		switch {
		case ks.LastKey >= 0:
			last = first + ks.LastKey
		case ks.Limit == 0:
			last = argc + ks.LastKey
			if ks.LastKey == -1 && st.step > 1 && (argc-first)%st.step != 0 {
				return // MSET k1 v1 k2: unbalanced, rejected
			}
		default:
			rem := argc - first
			if rem%ks.Limit != 0 {
				return // XREAD STREAMS a b c: unbalanced, rejected
			}
			last = first + rem/ks.Limit + ks.LastKey
		}
		if first >= argc || last >= argc || last < first {
			return
		}
		st.first, st.last = first, last
		st.ph = phRange
	case FindKeyNum:
		st.numIdx = first + ks.KeyNumIdx
		if st.numIdx >= argc {
			return
		}
		st.first = first
		st.ph = phNumKeys
	}
}

// keyArg advances every live key spec past argument i and reports i if it
// is a key.
func (p *parser) keyArg(i int32, a []byte, have bool) {
	isKey := false
	live := 0
	for j := range p.specs[:p.nspecs] {
		st := &p.specs[j]
		switch st.ph {
		case phRange:
			if i >= st.first {
				if st.step == 1 || (i-st.first)%st.step == 0 {
					isKey = true
				}
				if i >= st.last {
					st.ph = phDone
				}
			}
		case phSearch:
			if i >= st.from {
				if have && equalFold(a, st.kw) {
					p.beginKeys(st, i+1)
				} else if i >= st.to {
					st.ph = phDone
				}
			}
		case phNumKeys:
			if i == st.numIdx {
				n, ok := parseInt(a)
				if !have || !ok || n <= 0 || n > int64(p.argc) {
					st.ph = phDone
					break
				}
				first := st.first + st.spec.FirstKey
				last := first + int32(n) - 1
				if last >= int32(p.argc) {
					st.ph = phDone // EVAL with numkeys beyond its arguments: rejected
					break
				}
				st.first, st.last = first, last
				st.ph = phRange
			}
		case phSortScan:
			if i == st.storeKey {
				isKey = true
			}
			switch {
			case i < st.from:
			case st.sortSkip > 0:
				st.sortSkip--
			case !have:
			case equalFold(a, "LIMIT"):
				st.sortSkip = 2
			case equalFold(a, "GET"), equalFold(a, "BY"):
				st.sortSkip = 1
			case equalFold(a, "STORE") && int(i)+1 < p.argc:
				// Every STORE is reported; the server uses the last one.
				st.storeKey = i + 1
			}
		}
		if st.ph != phDone {
			live++
		}
	}
	if live == 0 {
		p.keysOn = false
	}
	if !isKey {
		return
	}
	p.noteKey(a, have && len(a) <= p.cfg.MaxKeyLen)
	if !have || len(a) > p.cfg.MaxKeyLen {
		p.s.Error(p.f, ReasonKeyTooLong)
		return
	}
	if len(a) == 0 && p.cmd == idxMigrate && i == 3 {
		return // MIGRATE host port "" db timeout KEYS k...: "" means none
	}
	p.s.Key(p.f, &p.req, decode.Key{Bytes: a, Weight: p.weight})
}

// parseLen reads "<int>\r\n" the way redis-server's string2ll does (no
// sign but '-', no leading zeros). It returns the value and the bytes used,
// 0 when b ends first, or -1 when b is not such a line.
func parseLen(b []byte) (int, int) {
	// Fast paths: one and two digits are most lengths and counts.
	if len(b) >= 4 {
		c0, c1 := b[0]-'0', b[1]-'0'
		if c0 <= 9 && b[1] == '\r' && b[2] == '\n' {
			return int(c0), 3
		}
		if c0-1 <= 8 && c1 <= 9 && b[2] == '\r' && b[3] == '\n' {
			return int(c0)*10 + int(c1), 4
		}
	}
	i, neg := 0, false
	if len(b) > 0 && b[0] == '-' {
		i, neg = 1, true
	}
	start, v := i, 0
	for ; i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' {
			break
		}
		if i-start >= 18 {
			return 0, -1 // beyond any plausible length
		}
		v = v*10 + int(c-'0')
	}
	if i+1 >= len(b) {
		if i < len(b) && b[i] != '\r' {
			return 0, -1
		}
		return 0, 0
	}
	if i == start || (b[start] == '0' && (i-start > 1 || neg)) || b[i] != '\r' || b[i+1] != '\n' {
		return 0, -1
	}
	if neg {
		v = -v
	}
	return v, i + 2
}

// parseInt parses a whole argument as redis-server's string2ll does.
func parseInt(a []byte) (int64, bool) {
	i, neg := 0, false
	if len(a) > 0 && a[0] == '-' {
		i, neg = 1, true
	}
	digits := a[i:]
	// 19 digits cannot overflow a uint64; more cannot be an int64.
	if len(digits) == 0 || len(digits) > 19 || (digits[0] == '0' && (len(digits) > 1 || neg)) {
		return 0, false
	}
	var v uint64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return int64(-v), true
	}
	if v > 1<<63-1 {
		return 0, false
	}
	return int64(v), true
}

// equalFold compares an argument with an upper-case ASCII keyword.
func equalFold(a []byte, upper string) bool {
	if len(a) != len(upper) {
		return false
	}
	for i := range len(a) {
		c := a[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != upper[i] {
			return false
		}
	}
	return true
}

// scan looks for the next request boundary at or after pos: an array of a
// known command whose length fits the command's arity. It returns the
// boundary and true, or how far b is consumed and false when it needs more
// bytes to decide.
func (p *parser) scan(b []byte, pos int) (int, bool) {
	for pos < len(b) {
		q := bytes.IndexByte(b[pos:], respArray)
		if q < 0 {
			return len(b), false
		}
		q += pos
		switch p.candidate(b[q:]) {
		case candYes:
			return q, true
		case candMore:
			return q, false
		}
		pos = q + 1
	}
	return len(b), false
}

const (
	candNo = iota
	candYes
	candMore
)

// candidate checks for `*<n>\r\n$<len>\r\n<name>\r\n` at the start of c.
func (p *parser) candidate(c []byte) int {
	n, hl := parseLen(c[1:])
	if hl == 0 {
		return candMore
	}
	if hl < 0 || n < 1 || n > p.cfg.MaxArrayLen {
		return candNo
	}
	r := c[1+hl:]
	if len(r) == 0 {
		return candMore
	}
	if r[0] != respBulk {
		return candNo
	}
	l, hl := parseLen(r[1:])
	if hl == 0 {
		return candMore
	}
	if hl < 0 || l < 1 || l > maxNameLen {
		return candNo
	}
	r = r[1+hl:]
	if len(r) < l+2 {
		return candMore
	}
	if r[l] != '\r' || r[l+1] != '\n' {
		return candNo
	}
	idx := lookupFold(r[:l])
	if idx < 0 || !commands[idx].arityOK(n) {
		return candNo
	}
	return candYes
}
