package publish

import (
	"math"

	"github.com/hotsniff/hotsniff/event"
)

// rateChange is the relative change of a rate that rewrites the snapshot.
const rateChange = 0.2

// UpdateRates refreshes the measurements (qps, write_qps, absorbed_qps,
// bytes_ps, value_bytes, and the sampling rate they were scaled from) of keys already in this node's hot set from the
// detector's current view, without publishing anything: the channel stays
// quiet, and the snapshot, which `hotsniff top --redis-url` and reloading
// subscribers read, shows current rates. Only a change of more than 20 %
// marks the section for rewriting (at most once per SnapshotInterval), so
// steady keys cost no snapshot writes. Types, verdicts and seqs stay those
// of the messages published: they change only through the channel.
func (p *Publisher) UpdateRates(hot []event.Event) { p.updateRates(hot, rateChange) }

// FinalRates is UpdateRates for the end of the input (replay): every rate
// that changed at all is written, so the snapshot left behind holds the
// rates measured at the last packet.
func (p *Publisher) FinalRates(hot []event.Event) { p.updateRates(hot, 0) }

func (p *Publisher) updateRates(hot []event.Event, change float64) {
	moved := func(a, b float64) bool { return movedBy(a, b, change) }
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range hot {
		m := &hot[i]
		id := entryID(m)
		en, ok := p.set.m[id]
		if !ok || en.ev.Source == event.SourceManual {
			continue
		}
		old := en.ev
		if !moved(old.QPS, m.QPS) && !moved(old.WriteQPS, m.WriteQPS) && !moved(old.AbsorbedQPS, m.AbsorbedQPS) &&
			!moved(old.BytesPS, m.BytesPS) && !moved(old.ValueBytes, m.ValueBytes) &&
			!sampleMoved(old.Sample, m.Sample) && old.QPSLowerBound == m.QPSLowerBound {
			continue
		}
		c := *old // stored events are shared with snapshots: copy
		c.QPS, c.WriteQPS, c.AbsorbedQPS, c.BytesPS, c.ValueBytes = m.QPS, m.WriteQPS, m.AbsorbedQPS, m.BytesPS, m.ValueBytes
		// A new sampling rate changes what the rates are (counts or
		// estimates): readers of the snapshot must see it at once.
		c.Sample = m.Sample
		// A first event's floor is replaced by the measured rate: the
		// mark goes with it.
		c.QPSLowerBound = m.QPSLowerBound
		en.ev = &c
		p.set.m[id] = en
		p.dirty = true
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// sampleMoved reports a change of the sampling rate that readers must see:
// sampling starting or stopping, or its rate moving by more than 20 %
// (a rate adjusted finely by the budget does not rewrite the snapshot on
// every step).
func sampleMoved(a, b float64) bool {
	return (a > 0 && a < 1) != (b > 0 && b < 1) || movedBy(a, b, rateChange)
}

func movedBy(a, b, change float64) bool {
	return math.Abs(a-b) > change*math.Max(math.Abs(a), math.Abs(b))
}
