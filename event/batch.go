package event

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// BatchVersion is the "v" of a batch envelope.
const BatchVersion = 2

// Batch is the envelope that carries several events in one channel message:
//
//	{"v":2,"node":"cache-node-3","events":[{event},{event},...]}
//
// Each element is a complete event, with its own seq, exactly as it would
// travel alone. A subscriber applies them in order.
type Batch struct {
	V      int      `json:"v"`
	Node   string   `json:"node"`
	Events []*Event `json:"events"`
}

// MaxBatchEvents bounds how many events one message may carry; a longer
// batch is rejected whole rather than allocated.
const MaxBatchEvents = 4096

// DecodeMessage reads one channel message: a single event (v 1) or a batch
// envelope (v 2). It appends the events to dst and returns it.
func DecodeMessage(dst []*Event, b []byte) ([]*Event, error) {
	var head struct {
		V      int               `json:"v"`
		Events []json.RawMessage `json:"events"`
	}
	// A single event has no "events" field; the cheap check avoids a
	// second parse of every v1 message.
	if !bytes.Contains(b, []byte(`"events"`)) {
		e := new(Event)
		if err := json.Unmarshal(b, e); err != nil {
			return dst, fmt.Errorf("decode event: %w", err)
		}
		return append(dst, e), nil
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return dst, fmt.Errorf("decode batch: %w", err)
	}
	if head.Events == nil {
		e := new(Event)
		if err := json.Unmarshal(b, e); err != nil {
			return dst, fmt.Errorf("decode event: %w", err)
		}
		return append(dst, e), nil
	}
	if len(head.Events) > MaxBatchEvents {
		return dst, fmt.Errorf("decode batch: %d events, at most %d", len(head.Events), MaxBatchEvents)
	}
	for i, raw := range head.Events {
		e := new(Event)
		if err := json.Unmarshal(raw, e); err != nil {
			return dst, fmt.Errorf("decode batch event %d: %w", i, err)
		}
		dst = append(dst, e)
	}
	return dst, nil
}
