package main

import (
	"bufio"
	"encoding/base64"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/decode/tair"
	"github.com/hotsniff/hotsniff/event"
)

// jsonSink prints one decoded-request object (docs/events.md) per key occurrence. It appends
// into one reused buffer: printing a key allocates nothing.
type jsonSink struct {
	decode.Discard // only keys (and reply bytes) matter here
	w              *bufio.Writer
	buf            []byte
}

func newJSONSink(w *bufio.Writer) *jsonSink { return &jsonSink{w: w, buf: make([]byte, 0, 1024)} }

func (j *jsonSink) Key(f *decode.Flow, r *decode.Request, k decode.Key) {
	b := append(j.buf[:0], `{"ts":"`...)
	b = time.Unix(0, f.TS).UTC().AppendFormat(b, event.TSFormat)
	b = append(b, `","proto":"`...)
	b = append(b, f.Proto.String()...)
	b = append(b, `","server":"`...)
	b = f.Server.AppendTo(b)
	b = append(b, `","client":"`...)
	b = f.Client.AppendTo(b)
	b = append(b, `","ns":"`...)
	b = append(b, decode.NSString(r.NS)...)
	b = append(b, `","op":`...)
	b = appendJSONString(b, r.Op)
	if utf8.Valid(k.Bytes) {
		b = append(b, `,"key":`...)
		b = appendJSONString(b, k.Bytes)
	} else {
		b = append(b, `,"key_b64":"`...)
		b = base64.StdEncoding.AppendEncode(b, k.Bytes)
		b = append(b, '"')
	}
	if f.Proto == decode.ProtoTair {
		if d, ok := tair.Display(k.Bytes); ok {
			b = append(b, `,"display":`...)
			b = appendJSONString(b, d)
		}
	}
	b = append(b, `,"weight":`...)
	b = strconv.AppendUint(b, uint64(k.Weight), 10)
	b = append(b, `,"write":`...)
	b = strconv.AppendBool(b, r.Write)
	if k.Prefix {
		b = append(b, `,"prefix":true`...)
	}
	b = append(b, "}\n"...)
	j.buf = b
	_, _ = j.w.Write(b)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s, which must be valid UTF-8, as a JSON string.
func appendJSONString[T string | []byte](b []byte, s T) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c != 0x7f {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
