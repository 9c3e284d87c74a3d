package publish

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/event/envelope"
)

// Channel messages are bounded and, with a shared secret, signed
// (docs/channel-protocol.md, "Trust model"): every subscriber rejects a
// message over event.MaxMessageBytes before parsing it, so the publisher
// never sends one. A v2 batch is split by bytes as well as by events; a
// single event too long for any message (a key of hundreds of KiB, once
// escaped) is dropped and counted (Stats.Oversize), never sent.

// MaxSecretBytes bounds a channel secret file: it is a key, not a document.
const MaxSecretBytes = 4096

// LoadSecret reads a channel secret file: its bytes, one trailing newline
// stripped, are the HMAC key.
func LoadSecret(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read channel secret: %w", err)
	}
	defer f.Close()
	b := make([]byte, MaxSecretBytes+2)
	n, err := f.Read(b)
	if err != nil && n == 0 {
		return nil, fmt.Errorf("read channel secret %s: empty file", path)
	}
	if n > MaxSecretBytes+1 {
		return nil, fmt.Errorf("read channel secret %s: longer than %d bytes", path, MaxSecretBytes)
	}
	b = b[:n]
	if n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("read channel secret %s: empty file", path)
	}
	return b, nil
}

// errOversize: one event longer than any message may be.
var errOversize = errors.New("event longer than a channel message may be")

// seal signs body when a secret is set.
func seal(secret, body []byte) []byte {
	if secret == nil {
		return body
	}
	return envelope.Sign(secret, body)
}

// room is the most bytes of an unsigned message body.
func room(secret []byte) int {
	if secret == nil {
		return event.MaxMessageBytes
	}
	return event.MaxMessageBytes - envelope.Overhead
}

// encodeMessages turns events into channel messages, each at most
// event.MaxMessageBytes once sealed: one event per message (v1), or
// batches of at most maxBatch events split by bytes (v2). sent[i] says
// whether evs[i] went into a message (false: oversize).
func encodeMessages(evs []*event.Event, format, node string, maxBatch int, secret []byte, sent []bool) ([][]byte, error) {
	lim := room(secret)
	var msgs [][]byte
	if format != FormatV2 {
		for i, e := range evs {
			b, err := e.MarshalJSON()
			if err != nil {
				return nil, fmt.Errorf("encode event: %w", err)
			}
			if sent[i] = len(b) <= lim; sent[i] {
				msgs = append(msgs, seal(secret, b))
			}
		}
		return msgs, nil
	}
	nodeJSON, _ := json.Marshal(node)
	var head []byte
	head = append(head, `{"v":`...)
	head = fmt.Appendf(head, "%d", event.BatchVersion)
	head = append(head, `,"node":`...)
	head = append(head, nodeJSON...)
	head = append(head, `,"events":[`...)
	const tail = "]}"
	var cur bytes.Buffer
	n := 0
	flush := func() {
		if n == 0 {
			return
		}
		cur.WriteString(tail)
		msgs = append(msgs, seal(secret, bytes.Clone(cur.Bytes())))
		cur.Reset()
		n = 0
	}
	for i, e := range evs {
		b, err := e.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("encode event: %w", err)
		}
		if len(head)+len(b)+len(tail) > lim {
			sent[i] = false
			continue
		}
		if n > 0 && (n >= maxBatch || cur.Len()+1+len(b)+len(tail) > lim) {
			flush()
		}
		if n == 0 {
			cur.Write(head)
		} else {
			cur.WriteByte(',')
		}
		cur.Write(b)
		n++
		sent[i] = true
	}
	flush()
	return msgs, nil
}
