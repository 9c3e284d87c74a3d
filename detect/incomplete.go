package detect

// Unknown is not cold. A hot key turns cold on evidence that its demand
// fell: its measured rate over the window. When the capture did not see
// all requests for a while (a ring buffer that filled and dropped records,
// connections shed under load, a reader of kernel counts that fell behind
// by more than the kernel keeps), the counts of that time are lower bounds,
// and a low count there is no evidence. The pipeline tells the detector
// with Incomplete, and while any of that time is still inside the window,
// hot keys are not turned cold on their rate: the verdict is held
// (Stats.ColdHeld) until the window holds only complete sub-windows again,
// and then judged on what was seen. The lifetime rule (no read at all for
// ttl) still applies, so a key whose traffic really stopped is not held
// forever by a capture that keeps losing data.
//
// A live capture learns of a loss only when it reads its counters, which
// is after the reads around the loss have reached the detector: a reader
// that resumes after a stop decodes its backlog, and crosses sub-window
// boundaries, before it can look. So once the capture confirms its
// evidence (Confirm), a cold verdict is given only on time it has
// confirmed: one reached beyond that waits (Stats.ColdAwaiting) for the
// next Confirm, which comes after the capture has reported what it lost
// meanwhile, and is then judged with the spans known. Replays never call
// Confirm: a file holds everything it holds.

// Incomplete tells the detector that the capture missed requests of packet
// time [from, to) (Unix ns): counts there are lower bounds. Like Key and
// Tick, it runs on the observing goroutine.
func (d *Detector) Incomplete(from, to int64) {
	if to < from {
		return
	}
	d.st.IncompleteSpans++
	if s := max(from, d.incEnd); to > s {
		d.st.IncompleteNs += uint64(to - s)
	}
	d.incEnd = max(d.incEnd, to)
	// A sub-window partly missed is missed: hold until the window has
	// slid past the sub-window holding to, and the scan at its boundary.
	end := (floorDiv(to, d.sub)+1)*d.sub + d.win
	d.holdUntil = max(d.holdUntil, end)
}

// missed marks the sub-window holding packet time ts incomplete: a read of
// it reached the detector too late to be counted there (Stats.Late). One
// span per sub-window, however many late reads it had.
func (d *Detector) missed(ts int64) {
	if ts < d.incEnd {
		return // already marked
	}
	start := floorDiv(ts, d.sub) * d.sub
	d.Incomplete(start, start+d.sub)
}

// Confirm tells the detector that the capture has reported with Incomplete
// everything it missed of packet time up to t, and around every read it
// has already handed on: cold verdicts on that time may be given. From
// the first call on, a cold verdict reached beyond the time confirmed
// waits for the next call. The live pipeline calls it before each Tick,
// after looking at its loss counters; like Tick, it runs on the observing
// goroutine. (The reads handed on count too, so a packet clock ahead of t,
// after the wall clock was stepped back, cannot hold verdicts for as long
// as the step.)
func (d *Detector) Confirm(t int64) {
	d.confirming = true
	d.confirmed = max(d.confirmed, t, d.now)
}

// holdCold reports whether a cold verdict must be held now.
func (d *Detector) holdCold(e *hotEntry) bool {
	if d.confirming && d.now > d.confirmed {
		d.st.ColdAwaiting++
		return true
	}
	if d.now >= d.holdUntil || d.now-e.lastSeen >= d.lifetime {
		return false
	}
	d.st.ColdHeld++
	return true
}
