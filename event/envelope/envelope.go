// Package envelope signs and opens the channel's HMAC envelope
// (docs/channel-protocol.md, "Trust model"). The implementation lives in the
// client module (github.com/hotsniff/hotsniff/client/event/envelope), which
// subscribers use without the daemon; the publisher calls it here.
package envelope

import cenv "github.com/hotsniff/hotsniff/client/event/envelope"

// BodyOffset and Overhead describe the envelope's fixed layout.
const (
	BodyOffset = cenv.BodyOffset
	Overhead   = cenv.Overhead
)

// ErrBadSignature is returned by Open for anything but a good envelope.
var ErrBadSignature = cenv.ErrBadSignature

// Sign wraps body in a signed envelope: {"sig":"<hex HMAC-SHA256>","body":BODY}.
func Sign(secret, body []byte) []byte { return cenv.Sign(secret, body) }

// Open checks msg's envelope and MAC and returns its body.
func Open(secret, msg []byte) ([]byte, error) { return cenv.Open(secret, msg) }

// Unwrap returns an envelope's body without checking the MAC.
func Unwrap(msg []byte) ([]byte, bool) { return cenv.Unwrap(msg) }

// IsEnvelope reports whether msg has the signed form (see the client
// module's).
func IsEnvelope(msg []byte) bool { return cenv.IsEnvelope(msg) }
