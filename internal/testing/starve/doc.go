// Package starve holds hotsniff's starvation tests: the real `hotsniff run`
// binary (tc capture, default copy path, and --kernel-count, with a key hot
// by its reads or by its reply bytes) inside a network namespace, a real
// redis-server, redis-benchmark as load, and the daemon kept off the CPU
// (stopped for a second every five, or CPU hogs at a higher priority on
// every core). They check the product rule that a key
// is never announced cold without evidence of low demand, that no key is
// reported hot that is not, and that what the capture did not see is
// counted where an operator can alert on it.
//
// They need root (they skip without it, and fail under CI=true); each run
// lasts under a minute.
package starve
