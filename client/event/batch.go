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
// envelope (v 2). It appends the events to dst and returns it. Its length
// is checked before any parsing (ErrTooLarge), and every field's range
// (ErrOutOfRange): one bad event rejects the whole batch.
func DecodeMessage(dst []*Event, b []byte) ([]*Event, error) {
	if len(b) > MaxMessageBytes {
		return dst, fmt.Errorf("message of %d bytes, at most %d: %w", len(b), MaxMessageBytes, ErrTooLarge)
	}
	var head struct {
		V      json.Number       `json:"v"`
		Events []json.RawMessage `json:"events"`
	}
	// A single event has no "events" field; the cheap check avoids a
	// second parse of every v1 message.
	if !bytes.Contains(b, []byte(`"events"`)) {
		return decodeOne(dst, b, "decode event")
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return dst, fmt.Errorf("decode batch: %w", classify(b, err))
	}
	if head.Events == nil {
		return decodeOne(dst, b, "decode event")
	}
	if _, err := version(head.V); err != nil {
		return dst, fmt.Errorf("decode batch: %w", err)
	}
	if len(head.Events) > MaxBatchEvents {
		return dst, fmt.Errorf("decode batch: %d events, at most %d", len(head.Events), MaxBatchEvents)
	}
	n := len(dst)
	for i, raw := range head.Events {
		var err error
		if dst, err = decodeOne(dst, raw, fmt.Sprintf("decode batch event %d", i)); err != nil {
			clear(dst[n:])
			return dst[:n], err
		}
	}
	return dst, nil
}

func decodeOne(dst []*Event, b []byte, what string) ([]*Event, error) {
	e := new(Event)
	if err := json.Unmarshal(b, e); err != nil {
		return dst, fmt.Errorf("%s: %w", what, classify(b, err))
	}
	if err := CheckVersion(e); err != nil {
		return dst, fmt.Errorf("%s: %w", what, err)
	}
	return append(dst, e), nil
}

// DecodeSnapshot reads a snapshot document. Its length is checked before any
// parsing (ErrTooLarge). An entry that does not decode or is out of range
// is skipped and counted in bad; the rest is applied.
func DecodeSnapshot(b []byte) (snap *Snapshot, bad int, err error) {
	if len(b) > MaxSnapshotBytes {
		return nil, 0, fmt.Errorf("snapshot of %d bytes, at most %d: %w", len(b), MaxSnapshotBytes, ErrTooLarge)
	}
	var raw struct {
		V     json.Number       `json:"v"`
		Seq   json.Number       `json:"seq"`
		TS    string            `json:"ts"`
		Node  string            `json:"node"`
		Nodes []json.RawMessage `json:"nodes"`
		Keys  []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, 0, fmt.Errorf("decode snapshot: %w", classify(b, err))
	}
	snap = &Snapshot{TS: raw.TS, Node: raw.Node}
	if snap.V, err = version(raw.V); err != nil {
		return nil, 0, fmt.Errorf("decode snapshot: %w", err)
	}
	if snap.Seq, err = seqOf(raw.Seq); err != nil {
		return nil, 0, fmt.Errorf("decode snapshot: %w", err)
	}
	for _, r := range raw.Nodes {
		var n struct {
			Node string      `json:"node"`
			Seq  json.Number `json:"seq"`
			TS   string      `json:"ts"`
			Keys json.Number `json:"keys"`
		}
		if json.Unmarshal(r, &n) != nil {
			bad++
			continue
		}
		seq, err := seqOf(n.Seq)
		if err != nil {
			bad++
			continue
		}
		k, _ := n.Keys.Int64()
		snap.Nodes = append(snap.Nodes, SnapshotNode{Node: n.Node, Seq: seq, TS: n.TS, Keys: int(k)})
	}
	snap.Keys = make([]*Event, 0, len(raw.Keys))
	for _, r := range raw.Keys {
		e := new(Event)
		if json.Unmarshal(r, e) != nil || CheckVersion(e) != nil {
			bad++
			continue
		}
		snap.Keys = append(snap.Keys, e)
	}
	return snap, bad, nil
}
