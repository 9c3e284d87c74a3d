// Package termtext makes untrusted text safe to print on a terminal.
//
// Event fields (type, proto, server, ns, node, source, key) come from the
// pub/sub channel or a daemon's /hotkeys: anyone who can PUBLISH on the
// channel, or answer in the daemon's place, chooses them. Printed as they
// are, an ESC sequence can move the cursor, recolour or erase lines, set the
// terminal title (OSC), or a newline can forge a whole row. Every
// human-readable output passes such fields through Field or Key.
package termtext

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Field returns s unchanged when it is printable UTF-8 without spaces or
// double quotes (everything an honest hotsniff writes in these fields), and
// Go-quoted otherwise: control characters (ESC, BEL, CR, LF, C1), format
// characters (bidi overrides), invalid bytes and spaces become visible
// escapes inside quotes, so one field stays one column and nothing reaches
// the terminal as a command.
func Field(s string) string {
	if safe(s) {
		return s
	}
	return strconv.Quote(s)
}

// Key is Field for raw key bytes, which may be any bytes. An empty key is
// shown as "".
func Key(k []byte) string {
	if len(k) > 0 && safe(string(k)) {
		return string(k)
	}
	return strconv.Quote(string(k))
}

// Safe reports whether Field would return s unchanged.
func Safe(s string) bool { return safe(s) }

func safe(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			// ASCII fast path: printable, not space, not quote.
			if c <= ' ' || c == '"' || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return false
		}
		if !unicode.IsPrint(r) {
			return false
		}
		i += n
	}
	return true
}

// Strip returns s with every control or format character and invalid
// byte removed, for places where quoting would read badly (a status line
// built from an error message). Spaces stay.
func Strip(s string) string {
	if safeWithSpaces(s) {
		return s
	}
	b := make([]rune, 0, len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		if (r == utf8.RuneError && n == 1) || (r != ' ' && !unicode.IsPrint(r)) {
			continue
		}
		b = append(b, r)
	}
	return string(b)
}

func safeWithSpaces(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || (r != ' ' && !unicode.IsPrint(r)) {
			return false
		}
	}
	return true
}

// Count writes n and the noun, singular for one ("1 key", "2 keys", "0
// keys"); plural is the noun's plural form.
func Count(n int, singular, plural string) string {
	if n == 1 {
		return "1 " + singular
	}
	return strconv.Itoa(n) + " " + plural
}
