package envelope

import (
	"bytes"
	"testing"
)

// FuzzSignOpen: whatever the publisher signs here, a subscriber opens to the
// same body with the same secret and refuses with any other. An envelope's
// body is at least one byte (the publisher signs JSON messages): an empty
// one is refused whatever its MAC, as the Python and Node subscribers do.
func FuzzSignOpen(f *testing.F) {
	f.Add([]byte("k"), []byte(`{"v":1,"seq":1}`))
	f.Add([]byte(""), []byte(`{}`))
	f.Add([]byte("k"), []byte(""))
	f.Fuzz(func(t *testing.T, secret, body []byte) {
		msg := Sign(secret, body)
		got, err := Open(secret, msg)
		if len(body) == 0 {
			if err != ErrBadSignature || IsEnvelope(msg) {
				t.Fatalf("empty body: open %q %v, envelope %v; want bad signature, no envelope", got, err, IsEnvelope(msg))
			}
			return
		}
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("open own envelope: %q %v", got, err)
		}
		if _, err := Open(append([]byte("x"), secret...), msg); err != ErrBadSignature {
			t.Fatalf("another secret opened it: %v", err)
		}
		if len(msg) != Overhead+len(body) || !bytes.Equal(msg[BodyOffset:len(msg)-1], body) {
			t.Fatal("layout")
		}
	})
}
