package detect

import "math"

// numSub is the number of sub-windows a rate window is cut into: the window
// slides by one sub-window at a time, so a burst is seen within W/numSub of
// its start instead of at the next full-window boundary.
const numSub = 8

// window counts weighted observations over the last numSub sub-windows
// (epochs). It is advanced lazily: only when its owner is touched, so a
// quiet bucket costs nothing. 48 bytes.
type window struct {
	epoch int64 // epoch of ring[epoch%numSub], the newest sub-window
	sum   uint64
	ring  [numSub]uint32
}

// advance drops the sub-windows older than numSub epochs before ep.
func (w *window) advance(ep int64) {
	d := ep - w.epoch
	if d <= 0 {
		return
	}
	if d >= numSub {
		w.ring = [numSub]uint32{}
		w.sum = 0
	} else {
		for i := int64(1); i <= d; i++ {
			j := (w.epoch + i) & (numSub - 1)
			w.sum -= uint64(w.ring[j])
			w.ring[j] = 0
		}
	}
	w.epoch = ep
}

// add counts n in epoch ep (never older than w.epoch: the clock is clamped).
func (w *window) add(ep int64, n uint32) {
	if ep != w.epoch {
		w.advance(ep)
	}
	j := ep & (numSub - 1)
	old := w.ring[j]
	v := old + n
	if v < old { // saturate instead of wrapping: a huge weight must not read as zero
		v = math.MaxUint32
	}
	w.ring[j] = v
	w.sum += uint64(v - old)
}

// scaled is w spread to total n: each sub-window gets its share of n by its
// share of w. The bytes stage counts a key's answered reads as one total
// beside its window of bytes; spreading the total the way the bytes fell
// keeps reads and bytes aging out together.
func (w *window) scaled(n uint32) window {
	out := window{epoch: w.epoch}
	if w.sum == 0 {
		if n > 0 {
			out.add(w.epoch, n)
		}
		return out
	}
	for j, c := range w.ring {
		v := uint32(uint64(c) * uint64(n) / w.sum)
		out.ring[j] = v
		out.sum += uint64(v)
	}
	return out
}
