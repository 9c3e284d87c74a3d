package testutil

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is an io.Writer that a test may read while another goroutine
// writes to it: a child process's stdout or stderr copied by os/exec, a
// logger. It keeps at most Max bytes (0: no limit) and drops the rest, so
// a chatty child cannot fill the test's memory.
type Buffer struct {
	Max int
	mu  sync.Mutex
	b   bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Max <= 0 || s.b.Len() < s.Max {
		s.b.Write(p)
	}
	return len(p), nil
}

// String is what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Lines is what was written so far, split into lines (nil when empty).
func (s *Buffer) Lines() []string {
	t := strings.TrimSuffix(s.String(), "\n")
	if t == "" {
		return nil
	}
	return strings.Split(t, "\n")
}
