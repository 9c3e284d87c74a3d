package decode

import "unsafe"

// OpKey names one request counter: a protocol and a table op name.
type OpKey struct {
	Proto Proto
	Op    string
}

// ErrKey names one decode-error counter.
type ErrKey struct {
	Proto  Proto
	Reason string
}

// Counter is a Sink that counts what passes through it and forwards every
// call to Next (which may be nil). It backs the stderr summary of `decode`
// and `replay` and the request/key metrics of `run`. It is not safe for
// concurrent use: the pipeline goroutine owns it, readers take Snapshot
// under their own lock.
type Counter struct {
	Next Sink

	// requests holds one counter per (proto, op); ops is a small
	// direct-mapped cache in front of it. Op strings come from fixed tables,
	// so the address of their bytes identifies them: a hit costs no string
	// hashing, which a map keyed by the op name would pay on every request.
	requests map[OpKey]*opCount
	ops      [64]opSlot
	Errors   map[ErrKey]uint64
	// Reads and Writes count key occurrences per protocol.
	Reads  [numProtos]uint64
	Writes [numProtos]uint64
	// ReadWeight sums the weights of read key occurrences.
	ReadWeight [numProtos]uint64
	// ReplyBytes counts reply bytes per protocol (paired or not); Unpaired
	// the part no request could be matched to.
	ReplyBytes [numProtos]uint64
	Unpaired   [numProtos]uint64
}

type opSlot struct {
	name  *byte
	n     int
	proto Proto
	count *opCount
}

// opCount is one (proto, op)'s requests: all of them, and those of
// segments the capture programs had counted already (Flow.KernelCounted:
// copied anyway under --kernel-count), which the programs' own request
// count holds too.
type opCount struct{ all, kernel uint64 }

// NewCounter returns a Counter forwarding to next.
func NewCounter(next Sink) *Counter {
	return &Counter{Next: next, requests: map[OpKey]*opCount{}, Errors: map[ErrKey]uint64{}}
}

// Request counts one request.
func (c *Counter) Request(f *Flow, r *Request) {
	p := unsafe.StringData(r.Op)
	s := &c.ops[(uintptr(unsafe.Pointer(p))>>3^uintptr(f.Proto))&63]
	if s.name != p || s.n != len(r.Op) || s.proto != f.Proto || s.count == nil {
		k := OpKey{f.Proto, r.Op}
		cnt := c.requests[k]
		if cnt == nil {
			cnt = new(opCount)
			c.requests[k] = cnt
		}
		*s = opSlot{p, len(r.Op), f.Proto, cnt}
	}
	s.count.all++
	if f.KernelCounted {
		s.count.kernel++
	}
	if c.Next != nil {
		c.Next.Request(f, r)
	}
}

// Requests returns a copy of the request counts per (proto, op).
func (c *Counter) Requests() map[OpKey]uint64 {
	out := make(map[OpKey]uint64, len(c.requests))
	for k, v := range c.requests {
		out[k] = v.all
	}
	return out
}

// KernelCountedRequests returns, per (proto, op) that has any, how many of
// the requests counted were in segments the capture programs had counted
// themselves already (--kernel-count): the requests counted in all are the
// programs' count plus Requests minus these.
func (c *Counter) KernelCountedRequests() map[OpKey]uint64 {
	var out map[OpKey]uint64
	for k, v := range c.requests {
		if v.kernel != 0 {
			if out == nil {
				out = make(map[OpKey]uint64)
			}
			out[k] = v.kernel
		}
	}
	return out
}

// Key counts one key occurrence.
func (c *Counter) Key(f *Flow, r *Request, k Key) {
	if r.Write {
		c.Writes[f.Proto]++
	} else {
		c.Reads[f.Proto]++
		c.ReadWeight[f.Proto] += uint64(k.Weight)
	}
	if c.Next != nil {
		c.Next.Key(f, r, k)
	}
}

// Error counts one decode error.
func (c *Counter) Error(f *Flow, reason string) {
	c.Errors[ErrKey{f.Proto, reason}]++
	if c.Next != nil {
		c.Next.Error(f, reason)
	}
}

// Totals sums the counters over protocols.
func (c *Counter) Totals() (requests, keys, reads, writes, errors uint64) {
	for _, n := range c.requests {
		requests += n.all
	}
	for p := range c.Reads {
		reads += c.Reads[p]
		writes += c.Writes[p]
	}
	for _, n := range c.Errors {
		errors += n
	}
	return requests, reads + writes, reads, writes, errors
}

// ReplyKey forwards reply bytes attributed to a key.
func (c *Counter) ReplyKey(f *Flow, ns int32, k Key, n uint64) {
	if c.Next != nil {
		c.Next.ReplyKey(f, ns, k, n)
	}
}

// Reply counts reply bytes.
func (c *Counter) Reply(f *Flow, n uint64, paired bool) {
	c.ReplyBytes[f.Proto] += n
	if !paired {
		c.Unpaired[f.Proto] += n
	}
	if c.Next != nil {
		c.Next.Reply(f, n, paired)
	}
}
