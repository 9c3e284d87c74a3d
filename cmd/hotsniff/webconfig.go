package main

import (
	"errors"
	"os"

	"github.com/hotsniff/hotsniff/internal/httpserve"
)

// checkWebConfig loads the --web-config file (and the certificates it
// names) at start, so a mistake is one line and exit 2 rather than a
// daemon serving nothing.
func checkWebConfig(path string) error {
	if path == "" {
		return nil
	}
	if _, err := os.Stat(path); err != nil {
		return usagef("--web-config %s: %v", path, errors.Unwrap(err))
	}
	if err := httpserve.Validate(path); err != nil {
		return usagef("--web-config %s: %v", path, err)
	}
	return nil
}
