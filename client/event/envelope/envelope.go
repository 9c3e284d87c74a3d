// Package envelope signs and opens hot-key channel messages and snapshot
// documents with a shared secret (docs/channel-protocol.md, "Trust model"):
//
//	{"sig":"<64 lowercase hex: HMAC-SHA256(secret, BODY)>","body":<BODY>}
//
// BODY is the unsigned JSON message, byte for byte, so it starts at a fixed
// offset and a subscriber checks the envelope by position, without parsing
// JSON before the MAC is known to be good. The daemon's publisher calls
// Sign, subscribers Open (or Unwrap when they have no secret).
package envelope

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

const (
	head = `{"sig":"`
	mid  = `","body":`
	// BodyOffset is where BODY starts in an envelope.
	BodyOffset = len(head) + 2*sha256.Size + len(mid)
	// Overhead is what an envelope adds to its body.
	Overhead = BodyOffset + 1
)

// ErrBadSignature is returned by Open for anything but a well-formed
// envelope whose MAC matches: unsigned messages included.
var ErrBadSignature = errors.New("bad signature")

// Sign wraps body in a signed envelope.
func Sign(secret, body []byte) []byte {
	out := make([]byte, 0, Overhead+len(body))
	out = append(out, head...)
	out = hex.AppendEncode(out, mac(secret, body))
	out = append(out, mid...)
	out = append(out, body...)
	return append(out, '}')
}

// Open checks msg's envelope and MAC (in constant time) and returns its
// body, which aliases msg.
func Open(secret, msg []byte) ([]byte, error) {
	body, sig, ok := split(msg)
	if !ok {
		return nil, ErrBadSignature
	}
	var got [sha256.Size]byte
	if _, err := hex.Decode(got[:], sig); err != nil || !lowerHex(sig) {
		return nil, ErrBadSignature
	}
	if !hmac.Equal(got[:], mac(secret, body)) {
		return nil, ErrBadSignature
	}
	return body, nil
}

// Unwrap returns the body of an envelope without checking its MAC (for a
// subscriber without a secret), or ok false when msg is not an envelope.
func Unwrap(msg []byte) (body []byte, ok bool) {
	body, sig, ok := split(msg)
	if !ok || !lowerHex(sig) {
		return nil, false
	}
	return body, true
}

// IsEnvelope reports whether msg has an envelope's shape.
func IsEnvelope(msg []byte) bool {
	_, ok := Unwrap(msg)
	return ok
}

func split(msg []byte) (body, sig []byte, ok bool) {
	if len(msg) < Overhead+1 || string(msg[:len(head)]) != head ||
		string(msg[BodyOffset-len(mid):BodyOffset]) != mid || msg[len(msg)-1] != '}' {
		return nil, nil, false
	}
	return msg[BodyOffset : len(msg)-1], msg[len(head) : BodyOffset-len(mid)], true
}

func lowerHex(b []byte) bool {
	for _, c := range b {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func mac(secret, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return m.Sum(nil)
}
