package bpf

import (
	"crypto/sha256"
	"encoding/hex"
)

// ObjectHash identifies the embedded BPF object (`hotsniff version`), so a
// bug report says exactly which programs ran.
func ObjectHash() string {
	sum := sha256.Sum256(_HotsniffBytes)
	return "sha256:" + hex.EncodeToString(sum[:8])
}
