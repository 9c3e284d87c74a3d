package envelope

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// TestKnownAnswer: the envelope is exactly the documented bytes, so shims in
// other languages can check against the same vector.
func TestKnownAnswer(t *testing.T) {
	secret, body := []byte("s3cret"), []byte(`{"v":1,"seq":1}`)
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	want := `{"sig":"` + hex.EncodeToString(m.Sum(nil)) + `","body":{"v":1,"seq":1}}`
	got := Sign(secret, body)
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if BodyOffset != 81 || !bytes.Equal(got[81:len(got)-1], body) {
		t.Fatalf("body not at offset 81: %d", BodyOffset)
	}
	b, err := Open(secret, got)
	if err != nil || !bytes.Equal(b, body) {
		t.Fatalf("open: %q %v", b, err)
	}
}

// TestOpenRejects: anything but a well-formed envelope with the right MAC
// is ErrBadSignature; Unwrap takes the body of any well-formed one.
func TestOpenRejects(t *testing.T) {
	secret, body := []byte("k"), []byte(`{"v":1}`)
	good := Sign(secret, body)
	upper := bytes.Clone(good)
	copy(upper[8:72], bytes.ToUpper(upper[8:72]))
	flipped := bytes.Clone(good)
	flipped[len(flipped)-2] ^= 1
	for name, msg := range map[string][]byte{
		"unsigned":      body,
		"other secret":  Sign([]byte("other"), body),
		"body changed":  flipped,
		"uppercase hex": upper,
		"truncated":     good[:len(good)-1],
		"empty":         nil,
		"trailing":      append(bytes.Clone(good), ' '),
	} {
		if _, err := Open(secret, msg); err != ErrBadSignature {
			t.Errorf("%s: %v", name, err)
		}
	}
	if b, ok := Unwrap(Sign([]byte("other"), body)); !ok || !bytes.Equal(b, body) {
		t.Fatalf("unwrap: %q %v", b, ok)
	}
	if _, ok := Unwrap(body); ok {
		t.Fatal("unwrapped an unsigned message")
	}
}

// FuzzOpen: any bytes give a body only when they are a signed envelope of
// exactly that body, never a panic.
func FuzzOpen(f *testing.F) {
	f.Add([]byte("k"), Sign([]byte("k"), []byte(`{"v":1}`)))
	f.Add([]byte(""), []byte(`{"sig":"`+string(bytes.Repeat([]byte("0"), 64))+`","body":}`))
	f.Add([]byte("k"), []byte(`{"v":1,"seq":2}`))
	f.Fuzz(func(t *testing.T, secret, msg []byte) {
		body, err := Open(secret, msg)
		if err != nil {
			if body != nil {
				t.Fatal("body with an error")
			}
			return
		}
		if !bytes.Equal(Sign(secret, body), msg) {
			t.Fatalf("opened %q but signing its body gives another message", msg)
		}
		if b, ok := Unwrap(msg); !ok || !bytes.Equal(b, body) {
			t.Fatal("Open and Unwrap disagree")
		}
	})
}
