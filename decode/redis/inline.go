package redis

import "bytes"

// inline decodes an inline command (a line of words, as telnet and some
// redis-cli modes send) starting at pos. It returns where the next request
// starts, or pos and more=true when the line is not complete yet.
func (p *parser) inline(b []byte, pos int) (next int, more bool) {
	lim := min(len(b), pos+p.cfg.MaxInlineLen)
	nl := bytes.IndexByte(b[pos:lim], '\n')
	if nl < 0 {
		if len(b)-pos >= p.cfg.MaxInlineLen {
			// redis-server: "too big inline request", connection closed.
			p.fail(ReasonTooLong)
			return pos + 1, false
		}
		return pos, true
	}
	next = pos + nl + 1
	line := b[pos : pos+nl]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	if bytes.IndexByte(line, 0) >= 0 {
		// A NUL ends the C string redis-server would search for '\n'.
		p.fail(ReasonBadInline)
		return next, false
	}
	// First pass: count and validate the words, so key specs that depend on
	// the argument count work as for RESP.
	argc := 0
	for i := 0; ; {
		_, n, st := p.word(line, i)
		if st == wordEnd {
			break
		}
		if st == wordBad {
			// redis-server: "unbalanced quotes in request", connection closed.
			p.fail(ReasonBadInline)
			return next, false
		}
		argc++
		i = n
	}
	if argc == 0 {
		return next, false // empty lines are ignored
	}
	if argc > p.cfg.MaxArrayLen {
		p.fail(ReasonTooLong)
		return next, false
	}
	p.startRequest(argc)
	for i := 0; ; {
		w, n, st := p.word(line, i)
		if st != wordOK {
			break
		}
		p.arg(w, true)
		i = n
	}
	p.st = stIdle
	// A quoted word aliases scratch, which the next quoted word reuses.
	p.settlePairs()
	return next, false
}

const (
	wordOK = iota
	wordEnd
	wordBad
)

// word returns the inline argument starting at or after line[i] and the
// index after it, splitting as redis-server's sdssplitargs does: blanks
// separate words; "..." understands \xHH, \n, \r, \t, \b, \a and \<char>;
// '...' understands \'; a closing quote must be followed by a blank or the
// end. An unquoted word aliases line; a quoted one is unescaped into
// p.scratch and valid until the next call. A NUL (which ends the C string
// redis-server splits) is reported as wordBad.
func (p *parser) word(line []byte, i int) ([]byte, int, int) {
	for i < len(line) && isSpace(line[i]) {
		i++
	}
	if i >= len(line) {
		return nil, i, wordEnd
	}
	start := i
	quoted := false // once a quote is seen the word is built in scratch
	inq, insq := false, false
	for {
		if i >= len(line) {
			if inq || insq {
				return nil, i, wordBad
			}
			break
		}
		c := line[i]
		if c == 0 {
			return nil, i, wordBad
		}
		switch {
		case inq:
			switch {
			case c == '\\' && i+3 < len(line) && line[i+1] == 'x' && isHex(line[i+2]) && isHex(line[i+3]):
				p.scratch = append(p.scratch, unhex(line[i+2])<<4|unhex(line[i+3]))
				i += 4
				continue
			case c == '\\' && i+1 < len(line):
				e := line[i+1]
				switch e {
				case 'n':
					e = '\n'
				case 'r':
					e = '\r'
				case 't':
					e = '\t'
				case 'b':
					e = '\b'
				case 'a':
					e = '\a'
				}
				p.scratch = append(p.scratch, e)
				i += 2
				continue
			case c == '"':
				if i+1 < len(line) && !isSpace(line[i+1]) {
					return nil, i, wordBad
				}
				return p.scratch, i + 1, wordOK
			}
			p.scratch = append(p.scratch, c)
		case insq:
			switch {
			case c == '\\' && i+1 < len(line) && line[i+1] == '\'':
				p.scratch = append(p.scratch, '\'')
				i += 2
				continue
			case c == '\'':
				if i+1 < len(line) && !isSpace(line[i+1]) {
					return nil, i, wordBad
				}
				return p.scratch, i + 1, wordOK
			}
			p.scratch = append(p.scratch, c)
		default:
			switch c {
			case ' ', '\n', '\r', '\t':
				if quoted {
					return p.scratch, i + 1, wordOK
				}
				return line[start:i], i + 1, wordOK
			case '"', '\'':
				if !quoted {
					quoted = true
					p.scratch = append(p.scratch[:0], line[start:i]...)
				}
				inq, insq = c == '"', c == '\''
			default:
				if quoted {
					p.scratch = append(p.scratch, c)
				}
			}
		}
		i++
	}
	if quoted {
		return p.scratch, i, wordOK
	}
	return line[start:i], i, wordOK
}

// isSpace is C's isspace in the "C" locale.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
