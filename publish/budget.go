package publish

import (
	"fmt"
	"time"

	"github.com/hotsniff/hotsniff/event"
)

// Channel formats.
const (
	// FormatV1 sends one event per message: what every subscriber
	// understands. The default until all shims read batches.
	FormatV1 = "v1"
	// FormatV2 sends the events of a batch in one message, as the versioned
	// envelope {"v":2,"node":…,"events":[…]} (event.Batch).
	FormatV2 = "v2"
)

// ParseFormat checks a --channel-format value.
func ParseFormat(s string) (string, error) {
	switch s {
	case "", FormatV1:
		return FormatV1, nil
	case FormatV2:
		return FormatV2, nil
	}
	return "", fmt.Errorf("channel format %q: want v1 (one event per message) or v2 (batches)", s)
}

// budget is a token bucket of channel messages per second: one node may
// not flood the channel every subscriber reads. Tokens may go negative (a
// batch that must go out is sent whole); the next batch then waits until
// the debt is repaid, gathering the events that arrive meanwhile.
type budget struct {
	rate   float64 // messages per second; 0: unlimited
	burst  float64
	tokens float64
	last   time.Time
}

func newBudget(rate float64, now time.Time) budget {
	b := budget{rate: rate, burst: max(1, rate/10), last: now}
	b.tokens = b.burst
	return b
}

func (b *budget) refill(now time.Time) {
	if dt := now.Sub(b.last); dt > 0 {
		b.tokens = min(b.burst, b.tokens+b.rate*dt.Seconds())
		b.last = now
	}
}

// exhausted reports whether no message may go out now.
func (b *budget) exhausted(now time.Time) bool {
	if b.rate <= 0 {
		return false
	}
	b.refill(now)
	return b.tokens < 1
}

// wait is how long until one message may go out.
func (b *budget) wait(now time.Time) time.Duration {
	if b.rate <= 0 {
		return 0
	}
	b.refill(now)
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
}

// take spends n messages.
func (b *budget) take(n int, now time.Time) {
	if b.rate <= 0 {
		return
	}
	b.refill(now)
	b.tokens -= float64(n)
}

// refund gives back n messages taken for a send that failed.
func (b *budget) refund(n int, now time.Time) {
	if b.rate <= 0 {
		return
	}
	b.refill(now)
	b.tokens = min(b.burst, b.tokens+float64(n))
}

// shed leaves e out when the budget is spent, reporting whether it did.
// Only a detected refresh of an entry already in the set with the same
// cacheable verdict may be left out. A first hot, a verdict change, a cold
// and an invalidate always go out (late rather than never), and manual
// events are never shed. A shed refresh extends its entry as the refresh
// would have: the snapshot keeps the entry (with its last published event
// and seq), so subscribers that reload still see the key hot.
func (h *hotSet) shed(e *event.Event, now time.Time) bool {
	if e.Type != event.TypeHot || e.Source == event.SourceManual {
		return false
	}
	id := entryID(e)
	en, ok := h.m[id]
	if !ok || en.ev.Uncacheable != e.Uncacheable {
		return false
	}
	if e.TTLms > 0 {
		en.expires = now.Add(time.Duration(e.TTLms) * time.Millisecond)
	}
	h.m[id] = en
	return true
}

// messages is how many channel messages a batch of n events takes.
func (p *Publisher) messages(n int) int {
	if p.opt.Format != FormatV2 || n == 0 {
		return n
	}
	return (n + p.opt.MaxBatch - 1) / p.opt.MaxBatch
}

// budgetWait is how long the next message must wait for the budget.
func (p *Publisher) budgetWait() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bud.wait(p.opt.Now())
}

// budgetTake spends the messages of a batch of n events. It is called
// before the batch goes to Redis, not after: while the round trip is in
// flight Emit must see the budget spent, or a slow Redis (when shedding
// matters most) makes every refresh look affordable, nothing is shed and
// everything queues instead.
func (p *Publisher) budgetTake(n int) {
	p.mu.Lock()
	p.bud.take(p.messages(n), p.opt.Now())
	p.mu.Unlock()
}

// budgetRefund gives back what budgetTake spent on a batch of n events
// that did not go out.
func (p *Publisher) budgetRefund(n int) {
	p.mu.Lock()
	p.bud.refund(p.messages(n), p.opt.Now())
	p.mu.Unlock()
}

// budgetAllows is how many of n queued events may go out now (at least
// one: waitBudget waited for it). In v2 a batch is one message.
func (p *Publisher) budgetAllows(n int) int {
	if p.opt.Format == FormatV2 || p.opt.Budget <= 0 {
		return n
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bud.refill(p.opt.Now())
	return max(1, min(n, int(p.bud.tokens)))
}

// waitBudget holds batch until the budget allows a message, gathering the
// events that arrive meanwhile into it (in v2 they ride in the same
// message). It reports false when Close was called; batch was then drained.
// Events that waited are counted when sent (Stats.Delayed).
func (p *Publisher) waitBudget(batch *[]queued) (ok, waited bool) {
	d := p.budgetWait()
	if d <= 0 {
		return true, false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		q := p.queue
		if len(*batch) >= p.opt.MaxBatch {
			q = nil // full: only wait
		}
		select {
		case e := <-q:
			*batch = append(*batch, e)
		case <-t.C:
			return true, true
		case ctx := <-p.stop:
			p.drain(ctx, *batch)
			return false, true
		}
	}
}
