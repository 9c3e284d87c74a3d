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

// ThreadCPU is the user and system time of the calling OS thread
// (CLOCK_THREAD_CPUTIME_ID). The daemon's pipeline goroutine is locked to
// its thread and calls it from there: the budget then measures the capture
// pipeline alone, so HTTP clients (a login flood: bcrypt costs tens of
// milliseconds per attempt) or the publisher cannot push the capture into
// sampling.
func ThreadCPU() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, fmt.Errorf("read thread CPU time: %w", err)
	}
	return time.Duration(ts.Nano()), nil
}
