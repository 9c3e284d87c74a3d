package memcache

import (
	"bytes"
	"encoding/base64"

	"github.com/hotsniff/hotsniff/decode"
)

// kind is the argument grammar of a text or meta command.
type kind uint8

const (
	kindGet       kind = iota // get/gets: key+
	kindGat                   // gat/gats: exptime key+
	kindStore                 // set/add/replace/append/prepend: key flags exptime bytes [noreply]
	kindCas                   // cas: key flags exptime bytes cas [noreply]
	kindDelete                // delete: key [0] [noreply]
	kindArith                 // incr/decr: key delta [noreply]
	kindTouch                 // touch: key exptime [noreply]
	kindMetaGet               // mg: key flag*
	kindMetaSet               // ms: key datalen flag*, then the data block
	kindMetaKey               // md/ma: key flag*
	kindMetaDebug             // me: key [flag*]; reported without its key (see command table)
	kindNoKey                 // stats, version, mn, ...: arguments ignored, no key
)

// command is one entry of the text command table. op is what Request.Op
// carries: the name as memcached spells it, never wire bytes.
type command struct {
	op    string
	kind  kind
	write bool
}

var (
	cmdGet     = command{"get", kindGet, false}
	cmdGets    = command{"gets", kindGet, false}
	cmdGat     = command{"gat", kindGat, false}
	cmdGats    = command{"gats", kindGat, false}
	cmdSet     = command{"set", kindStore, true}
	cmdAdd     = command{"add", kindStore, true}
	cmdReplace = command{"replace", kindStore, true}
	cmdAppend  = command{"append", kindStore, true}
	cmdPrepend = command{"prepend", kindStore, true}
	cmdCas     = command{"cas", kindCas, true}
	cmdDelete  = command{"delete", kindDelete, true}
	cmdIncr    = command{"incr", kindArith, true}
	cmdDecr    = command{"decr", kindArith, true}
	cmdTouch   = command{"touch", kindTouch, true}
	cmdMg      = command{"mg", kindMetaGet, false}
	cmdMs      = command{"ms", kindMetaSet, true}
	cmdMd      = command{"md", kindMetaKey, true}
	cmdMa      = command{"ma", kindMetaKey, true}
	// me dumps an item's metadata. It is an operator's debugging command
	// (memcached's own dump tools walk every key with it), not an
	// application read, so its key is not reported: a key dump must not look
	// like traffic. The request itself is still counted.
	cmdMe            = command{"me", kindMetaDebug, false}
	cmdMn            = command{"mn", kindNoKey, false}
	cmdStats         = command{"stats", kindNoKey, false}
	cmdVersion       = command{"version", kindNoKey, false}
	cmdFlushAll      = command{"flush_all", kindNoKey, true}
	cmdVerbosity     = command{"verbosity", kindNoKey, false}
	cmdQuit          = command{"quit", kindNoKey, false}
	cmdShutdown      = command{"shutdown", kindNoKey, false}
	cmdCacheMemlimit = command{"cache_memlimit", kindNoKey, false}
	cmdSlabs         = command{"slabs", kindNoKey, false}
	cmdLruCrawler    = command{"lru_crawler", kindNoKey, false}
	cmdLru           = command{"lru", kindNoKey, false}
	cmdWatch         = command{"watch", kindNoKey, false}
	cmdMisbehave     = command{"misbehave", kindNoKey, false}
	cmdDebugtime     = command{"debugtime", kindNoKey, false}
	cmdExtstore      = command{"extstore", kindNoKey, false}
	cmdRefreshCerts  = command{"refresh_certs", kindNoKey, false}
)

// lookup maps a command token to its table entry. The switch on string(tok)
// compiles to length-then-bytes comparisons without allocating.
func lookup(tok []byte) *command {
	switch string(tok) {
	case "get":
		return &cmdGet
	case "gets":
		return &cmdGets
	case "mg":
		return &cmdMg
	case "gat":
		return &cmdGat
	case "gats":
		return &cmdGats
	case "set":
		return &cmdSet
	case "ms":
		return &cmdMs
	case "add":
		return &cmdAdd
	case "replace":
		return &cmdReplace
	case "append":
		return &cmdAppend
	case "prepend":
		return &cmdPrepend
	case "cas":
		return &cmdCas
	case "delete":
		return &cmdDelete
	case "incr":
		return &cmdIncr
	case "decr":
		return &cmdDecr
	case "touch":
		return &cmdTouch
	case "md":
		return &cmdMd
	case "ma":
		return &cmdMa
	case "me":
		return &cmdMe
	case "mn":
		return &cmdMn
	case "stats":
		return &cmdStats
	case "version":
		return &cmdVersion
	case "flush_all":
		return &cmdFlushAll
	case "verbosity":
		return &cmdVerbosity
	case "quit":
		return &cmdQuit
	case "shutdown":
		return &cmdShutdown
	case "cache_memlimit":
		return &cmdCacheMemlimit
	case "slabs":
		return &cmdSlabs
	case "lru_crawler":
		return &cmdLruCrawler
	case "lru":
		return &cmdLru
	case "watch":
		return &cmdWatch
	case "misbehave":
		return &cmdMisbehave
	case "debugtime":
		return &cmdDebugtime
	case "extstore":
		return &cmdExtstore
	case "refresh_certs":
		return &cmdRefreshCerts
	}
	return nil
}

// nextToken returns the span of the first token at or after i. memcached
// splits on spaces only; runs of spaces separate like one. At the end of the
// line it returns an empty span at len(line).
func nextToken(line []byte, i int) (int, int) {
	for i < len(line) && line[i] == ' ' {
		i++
	}
	// IndexByte's vector loop beats a byte loop even on short keys.
	if j := bytes.IndexByte(line[i:], ' '); j >= 0 {
		return i, i + j
	}
	return i, len(line)
}

func trimCR(line []byte) []byte {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		return line[:n-1]
	}
	return line
}

// text decodes one text or meta line (and skips its data block) from b.
func (p *Parser) text(b []byte, f *decode.Flow, s decode.Sink) int {
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 || nl >= maxLine {
		if nl < 0 && len(b) < maxLine {
			return needMore
		}
		// Only multi-gets may be longer than maxLine; the limit holds
		// whether or not the newline is in view, so the outcome does not
		// depend on how the stream was cut.
		cs, ce := nextToken(b[:maxLine], 0)
		c := lookup(b[cs:ce])
		switch {
		case c == nil || (c.kind != kindGet && c.kind != kindGat):
			s.Error(f, ReasonLineTooLong)
			p.lostSync()
			return 0
		case nl >= 0:
			p.getLine(trimCR(b[:nl]), c, ce, f, s)
			return nl + 1
		}
		return p.startLongGet(b, c, ce, f, s)
	}
	line := trimCR(b[:nl])
	n := nl + 1
	cs, ce := nextToken(line, 0)
	c := lookup(line[cs:ce])
	if c == nil {
		// memcached answers ERROR and reads the next line; so do we.
		if ce == cs {
			s.Error(f, ReasonBadLine)
		} else {
			s.Error(f, ReasonUnknownCommand)
		}
		return n
	}
	if c.kind == kindGet || c.kind == kindGat {
		p.getLine(line, c, ce, f, s)
		return n
	}
	key, data, reason := p.scan(line, c)
	if reason != "" {
		s.Error(f, reason)
	} else {
		p.req.Op, p.req.Write = c.op, c.write
		// noreply (text) and the q flag (meta) ask the server to stay
		// silent unless something goes wrong (meta: on a miss).
		p.req.Quiet = quietLine(line)
		s.Request(f, &p.req)
		p.req.Quiet = false
		if key != nil {
			s.Key(f, &p.req, decode.Key{Bytes: key, Weight: 1})
		}
	}
	if data < 0 {
		return n
	}
	// The data block is skipped even after a bad meta line: memcached
	// swallows it once it has read a valid length. Its CRLF is checked
	// next, in the crlf state.
	p.crlf = true
	return n + data
}

// getLine reports a complete get/gets/gat/gats line; i is the end of the
// command token. Keys are reported in one pass as memcached serves them: a
// too-long key ends the request where it stands.
func (p *Parser) getLine(line []byte, c *command, i int, f *decode.Flow, s decode.Sink) {
	if c.kind == kindGat {
		ts, te := nextToken(line, i)
		if !isInt(line[ts:te]) {
			s.Error(f, ReasonBadLine)
			return
		}
		i = te
	}
	ks, ke := nextToken(line, i)
	if ks == ke {
		s.Error(f, ReasonBadLine)
		return
	}
	if ke-ks > maxKeyLen {
		s.Error(f, ReasonKeyTooLong)
		return
	}
	p.req.Op, p.req.Write = c.op, false
	s.Request(f, &p.req)
	for ks < ke {
		if ke-ks > maxKeyLen {
			s.Error(f, ReasonKeyTooLong)
			return
		}
		s.Key(f, &p.req, decode.Key{Bytes: line[ks:ke], Weight: 1})
		ks, ke = nextToken(line, ke)
	}
}

// startLongGet begins a get line longer than maxLine whose end has not
// arrived: memcached serves such multi-gets, and buffering them whole would
// make memory depend on the client. Keys are reported as they complete.
func (p *Parser) startLongGet(b []byte, c *command, i int, f *decode.Flow, s decode.Sink) int {
	if c.kind == kindGat {
		ts, te := nextToken(b, i)
		if te == len(b) || !isInt(b[ts:te]) {
			s.Error(f, ReasonBadLine)
			p.lostSync()
			return 0
		}
		i = te
	}
	p.req.Op, p.req.Write = c.op, false
	s.Request(f, &p.req)
	p.inGet = true
	return p.getKeys(b, i, f, s)
}

// getCont continues a long get line.
func (p *Parser) getCont(b []byte, f *decode.Flow, s decode.Sink) int {
	return p.getKeys(b, 0, f, s)
}

// getKeys reports every complete key of a long get line in b from i on and
// returns how far it consumed; an incomplete last token is left for the
// next call.
func (p *Parser) getKeys(b []byte, i int, f *decode.Flow, s decode.Sink) int {
	for {
		for i < len(b) && b[i] == ' ' {
			i++
		}
		start := i
		for i < len(b) && b[i] != ' ' && b[i] != '\n' {
			i++
		}
		if i == len(b) {
			if i-start > maxKeyLen+1 { // +1: a '\r' may end it
				s.Error(f, ReasonKeyTooLong)
				p.lostSync()
				return start
			}
			if start == 0 {
				return needMore
			}
			return start
		}
		end := i
		if b[i] == '\n' && end > start && b[end-1] == '\r' {
			end--
		}
		if end-start > maxKeyLen {
			s.Error(f, ReasonKeyTooLong)
			p.lostSync()
			return i
		}
		if end > start {
			s.Key(f, &p.req, decode.Key{Bytes: b[start:end], Weight: 1})
		}
		if b[i] == '\n' {
			p.inGet = false
			return i + 1
		}
	}
}

// scan checks a non-get line against its command's grammar. It returns the
// key to report (nil for commands without one), the data block length that
// follows the line (-1 when none), and a reason when the line is bad.
func (p *Parser) scan(line []byte, c *command) (key []byte, data int, reason string) {
	data = -1
	if c.kind == kindNoKey {
		return nil, -1, ""
	}
	nt := 0
	for i := 0; ; {
		s, e := nextToken(line, i)
		if s == e {
			break
		}
		if nt == maxTokens {
			return nil, -1, ReasonBadLine
		}
		p.tok[nt] = span{s, e}
		nt++
		i = e
	}
	if nt < 2 {
		return nil, -1, ReasonBadLine
	}
	key = line[p.tok[1].s:p.tok[1].e]
	tok := func(j int) []byte { return line[p.tok[j].s:p.tok[j].e] }
	switch c.kind {
	case kindStore, kindCas:
		want := 5
		if c.kind == kindCas {
			want = 6
		}
		if nt != want && nt != want+1 {
			return nil, -1, ReasonBadLine
		}
		if len(key) > maxKeyLen {
			return nil, -1, ReasonKeyTooLong
		}
		if !isUint(tok(2)) || !isInt(tok(3)) || (c.kind == kindCas && !isUint(tok(5))) {
			return nil, -1, ReasonBadLine
		}
		n, ok := parseLen(tok(4))
		if !ok {
			return nil, -1, ReasonBadLength
		}
		return key, n, ""
	case kindDelete:
		// memcached: "delete <key> [0] [noreply]", nothing else.
		switch {
		case nt == 2:
		case nt == 3 && (string(tok(2)) == "0" || string(tok(2)) == "noreply"):
		case nt == 4 && string(tok(2)) == "0" && string(tok(3)) == "noreply":
		default:
			return nil, -1, ReasonBadLine
		}
	case kindArith:
		if (nt != 3 && nt != 4) || !isUint(tok(2)) {
			return nil, -1, ReasonBadLine
		}
	case kindTouch:
		if (nt != 3 && nt != 4) || !isInt(tok(2)) {
			return nil, -1, ReasonBadLine
		}
	case kindMetaGet, kindMetaKey, kindMetaDebug:
		key, reason = p.metaKey(line, 2, nt)
		if c.kind == kindMetaDebug && reason == "" {
			return nil, -1, ""
		}
		return key, -1, reason
	case kindMetaSet:
		if nt < 3 {
			return nil, -1, ReasonBadLine
		}
		n, ok := parseLen(tok(2))
		if !ok {
			return nil, -1, ReasonBadLength
		}
		key, reason = p.metaKey(line, 3, nt)
		return key, n, reason
	}
	if len(key) > maxKeyLen {
		return nil, -1, ReasonKeyTooLong
	}
	return key, -1, ""
}

// metaKey checks the flags of a meta command (tokens from..nt) and returns
// its key, decoded into p.key when the b flag says it is base64.
func (p *Parser) metaKey(line []byte, from, nt int) ([]byte, string) {
	b64 := false
	for j := from; j < nt; j++ {
		t := line[p.tok[j].s:p.tok[j].e]
		if !isFlag(t[0]) {
			return nil, ReasonBadLine
		}
		if t[0] == 'b' {
			b64 = true
		}
	}
	key := line[p.tok[1].s:p.tok[1].e]
	if len(key) > maxKeyLen {
		return nil, ReasonKeyTooLong
	}
	if !b64 {
		return key, ""
	}
	// Validating first keeps Decode from failing, and its error (a boxed
	// int64) from allocating.
	if !isBase64(key) {
		return nil, ReasonBadBase64
	}
	n, err := base64.StdEncoding.Decode(p.key[:], key)
	if err != nil || n == 0 {
		return nil, ReasonBadBase64
	}
	return p.key[:n], ""
}

// isFlag reports whether c can start a meta flag token: memcached's flags
// are single letters.
func isFlag(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// isBase64 reports whether t is padded standard base64.
func isBase64(t []byte) bool {
	if len(t) == 0 || len(t)%4 != 0 {
		return false
	}
	pad := 0
	for i, c := range t {
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '+', c == '/':
			if pad > 0 {
				return false
			}
		case c == '=' && i >= len(t)-2:
			pad++
		default:
			return false
		}
	}
	return true
}

// isUint reports whether t is a decimal number of at most 20 digits.
func isUint(t []byte) bool {
	if len(t) == 0 || len(t) > 20 {
		return false
	}
	for _, c := range t {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// isInt is isUint with an optional minus sign (exptimes may be negative).
func isInt(t []byte) bool {
	if len(t) > 1 && t[0] == '-' {
		t = t[1:]
	}
	return isUint(t)
}

// parseLen parses a data block length, refusing anything beyond maxValueLen.
func parseLen(t []byte) (int, bool) {
	if len(t) == 0 || len(t) > 10 {
		return 0, false
	}
	n := 0
	for _, c := range t {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n > maxValueLen {
		return 0, false
	}
	return n, true
}

// plausibleGet judges the rest of a get or gat line from offset i (after
// the command name): gat's exptime must be a number, and there must be at
// least one key, none longer than maxKeyLen. With partial set, the line's
// end is not in view, so its last token may be cut short and is not judged.
func plausibleGet(line []byte, i int, c *command, partial bool) verdict {
	if c.kind == kindGat {
		ts, te := nextToken(line, i)
		if (partial && te == len(line)) || !isInt(line[ts:te]) {
			return reject
		}
		i = te
	}
	nk := 0
	for {
		// ks == ke only at the end of the line.
		ks, ke := nextToken(line, i)
		if ks == ke || (partial && ke == len(line)) {
			break
		}
		if ke-ks > maxKeyLen {
			return reject
		}
		nk++
		i = ke
	}
	if nk == 0 {
		return reject
	}
	return accept
}

// textCandidate decides whether b starts at a believable text or meta
// request while resynchronising.
func (p *Parser) textCandidate(b []byte) verdict {
	nl := bytes.IndexByte(b, '\n')
	if nl >= maxLine {
		cs, ce := nextToken(b[:maxLine], 0)
		if c := lookup(b[cs:ce]); c == nil || (c.kind != kindGet && c.kind != kindGat) {
			return reject
		}
	}
	if nl < 0 {
		if len(b) < maxLine {
			return wait
		}
		// Only a multi-get may run past maxLine; believe it when its
		// visible keys are plausible.
		cs, ce := nextToken(b, 0)
		c := lookup(b[cs:ce])
		if c == nil || (c.kind != kindGet && c.kind != kindGat) {
			return reject
		}
		return plausibleGet(b, ce, c, true)
	}
	line := trimCR(b[:nl])
	cs, ce := nextToken(line, 0)
	c := lookup(line[cs:ce])
	if c == nil {
		return reject
	}
	if c.kind == kindGet || c.kind == kindGat {
		return plausibleGet(line, ce, c, false)
	}
	_, data, reason := p.scan(line, c)
	if reason != "" {
		return reject
	}
	if data >= 0 {
		// The block must end in CRLF; when that point is in view, check it.
		end := nl + 1 + data + 2
		if end <= len(b) && (b[end-2] != '\r' || b[end-1] != '\n') {
			return reject
		}
	}
	return accept
}

// quietLine reports whether a text line ends with "noreply" or carries the
// meta "q" flag token.
func quietLine(line []byte) bool {
	if bytes.HasSuffix(line, []byte(" noreply")) {
		return true
	}
	if len(line) < 2 || line[0] != 'm' {
		return false
	}
	for i := 0; i+1 < len(line); i++ {
		if line[i] == ' ' && line[i+1] == 'q' && (i+2 == len(line) || line[i+2] == ' ') {
			return true
		}
	}
	return false
}
