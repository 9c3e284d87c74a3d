//go:build !unix

package detect

// cpuTime is unavailable here; the cpu-ns/op metric then reads 0.
func cpuTime() int64 { return 0 }
