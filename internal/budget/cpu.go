package budget

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// ProcessCPU is the user and system time of this process, all threads, from
// getrusage(RUSAGE_SELF).
func ProcessCPU() (time.Duration, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("read process CPU time: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
