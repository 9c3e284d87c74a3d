package tair

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"
)

// Java client type headers (spec §3.5): 2 bytes, big-endian, (type << 1);
// keys are never compressed, so the compress bits are zero.
const (
	javaInt       = 1 << 1
	javaString    = 2 << 1
	javaBool      = 3 << 1
	javaLong      = 4 << 1
	javaDate      = 5 << 1
	javaByte      = 6 << 1
	javaFloat     = 7 << 1
	javaDouble    = 8 << 1
	javaByteArray = 9 << 1
	javaMixedKey  = 12 << 1
)

// Display returns a readable form of a key written by the Java client's
// default transcoder: the value without its 2-byte type header (a String
// as text, numbers in decimal, a byte array as 0x-hex, a date in RFC 3339).
// A MixedKey pkey region (00 18 ‖ enc(pkey), what prefix reads report) shows
// as its pkey; a whole MixedKey as "pkey|skey" when it splits unambiguously.
// ok is false when key does not look Java-encoded; the raw bytes remain the
// key's identity either way (a C++ key may happen to start with such bytes),
// so this is presentation only. It allocates; it is not for the hot path.
func Display(key []byte) (string, bool) {
	if len(key) >= 2 && binary.BigEndian.Uint16(key) == javaMixedKey {
		rest := key[2:]
		if s, ok := displayObj(rest); ok {
			return s, true
		}
		// A whole mixed key: enc(pkey) ‖ enc(skey). Try every split and
		// accept it only if exactly one gives two readable objects.
		found, out := 0, ""
		for i := 2; i+2 <= len(rest); i++ {
			a, ok1 := displayObj(rest[:i])
			b, ok2 := displayObj(rest[i:])
			if ok1 && ok2 {
				found++
				out = a + "|" + b
			}
		}
		if found == 1 {
			return out, true
		}
		return "", false
	}
	return displayObj(key)
}

// displayObj renders one enc(x).
func displayObj(b []byte) (string, bool) {
	if len(b) < 2 {
		return "", false
	}
	p := b[2:]
	switch binary.BigEndian.Uint16(b) {
	case javaString:
		if !printable(p) {
			return "", false
		}
		return string(p), true
	case javaInt:
		if len(p) != 4 {
			return "", false
		}
		return strconv.FormatInt(int64(int32(binary.BigEndian.Uint32(p))), 10), true
	case javaLong:
		if len(p) != 8 {
			return "", false
		}
		return strconv.FormatInt(int64(binary.BigEndian.Uint64(p)), 10), true
	case javaDate:
		if len(p) != 8 {
			return "", false
		}
		ms := int64(binary.BigEndian.Uint64(p))
		return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00"), true
	case javaBool:
		if len(p) != 1 || p[0] > 1 {
			return "", false
		}
		return strconv.FormatBool(p[0] == 1), true
	case javaByte:
		if len(p) != 1 {
			return "", false
		}
		return strconv.Itoa(int(int8(p[0]))), true
	case javaFloat:
		if len(p) != 4 {
			return "", false
		}
		return strconv.FormatFloat(float64(math.Float32frombits(binary.BigEndian.Uint32(p))), 'g', -1, 32), true
	case javaDouble:
		if len(p) != 8 {
			return "", false
		}
		return strconv.FormatFloat(math.Float64frombits(binary.BigEndian.Uint64(p)), 'g', -1, 64), true
	case javaByteArray:
		return "0x" + hex.EncodeToString(p), true
	}
	return "", false
}

func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
