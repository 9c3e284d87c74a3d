package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// GoBin is the go command: on PATH, else where CI installs it (a root
// shell may not have /usr/local/go/bin on PATH).
func GoBin() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

// BuildHotsniff builds ./cmd/hotsniff into dir and returns its path, or
// returns $HOTSNIFF_BIN when set (to run the tests against another build).
func BuildHotsniff(dir string) (string, error) {
	if bin := os.Getenv("HOTSNIFF_BIN"); bin != "" {
		return bin, nil
	}
	bin := filepath.Join(dir, "hotsniff")
	cmd := exec.Command(GoBin(), "build", "-o", bin, "./cmd/hotsniff")
	cmd.Dir = RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/hotsniff: %v: %s", err, out)
	}
	return bin, nil
}
