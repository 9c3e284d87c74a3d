package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// setNice gives every thread of the process nice value n. Linux keeps nice
// per thread, and a new thread inherits its creator's: two passes over
// /proc/self/task catch a thread the Go runtime starts during the first.
//
// Why `run` lowers its own priority by default: on a node whose CPU is
// saturated, each cycle the sniffer takes comes out of the cache server's
// time. At nice 10 (weight 110 against 1024) it yields to the server and
// catches up in the gaps, the ring buffer holding the backlog; if the gaps
// never come, the ring overflows and the loss is counted, the cache's
// throughput is not. Under Kubernetes the pod's CPU request (cgroup weight)
// does the same between pods; nice orders threads within one cgroup.
// currentNice is the calling thread's nice value.
func currentNice() (int, error) {
	// The raw syscall returns 20 - nice, so that no value is negative.
	p, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return 0, fmt.Errorf("read nice: %w", err)
	}
	return 20 - p, nil
}

// niceToSet decides what setNice gets: the default only ever lowers the
// priority (a daemon started nicer than that, by a low-priority service
// manager or `nice -n 15`, already yields and stays as it is: raising it
// back would need CAP_SYS_NICE); a value given explicitly is applied.
func niceToSet(want int, explicit bool, current int) (int, bool) {
	if !explicit && current >= want {
		return 0, false
	}
	return want, true
}

func setNice(n int) error {
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("list threads: %w", err)
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.Setpriority(unix.PRIO_PROCESS, tid, n); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("set nice %d: %w", n, err)
			}
		}
	}
	return nil
}
