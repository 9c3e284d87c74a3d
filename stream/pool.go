package stream

import "math/bits"

// Buffer size classes: 256 B << 0..9, i.e. 256 B to 128 KiB. Larger buffers
// are allocated exactly and left to the garbage collector.
const (
	minClassShift = 8
	numClasses    = 10
)

// bufPool recycles tail and out-of-order buffers by power-of-two size class,
// so steady-state reassembly allocates nothing. It is single-goroutine (the
// Assembler's) and holds at most max bytes of idle buffers.
type bufPool struct {
	free  [numClasses][][]byte
	bytes int
	max   int
}

// classUp returns the smallest class holding n bytes, or -1 if none does.
func classUp(n int) int {
	if n <= 1<<minClassShift {
		return 0
	}
	c := bits.Len(uint(n-1)) - minClassShift
	if c >= numClasses {
		return -1
	}
	return c
}

// get returns an empty buffer with capacity at least n.
func (p *bufPool) get(n int) []byte {
	c := classUp(n)
	if c < 0 {
		return make([]byte, 0, n)
	}
	if s := p.free[c]; len(s) > 0 {
		b := s[len(s)-1]
		s[len(s)-1] = nil
		p.free[c] = s[:len(s)-1]
		p.bytes -= cap(b)
		return b[:0]
	}
	return make([]byte, 0, 1<<(c+minClassShift))
}

// put keeps b for reuse when it is exactly a class size and the pool has room.
func (p *bufPool) put(b []byte) {
	c := classUp(cap(b))
	if c < 0 || cap(b) != 1<<(c+minClassShift) || p.bytes+cap(b) > p.max {
		return
	}
	p.free[c] = append(p.free[c], b[:0])
	p.bytes += cap(b)
}
