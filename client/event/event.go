// Package event is the hot-key message (docs/events.md): the same JSON object is
// printed by `hotsniff replay`, published on the pub/sub channel and read by
// client shims. It depends on nothing else in hotsniff so shims can import it.
package event

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// Version is the schema version carried in "v".
const Version = 1

// Types of event.
const (
	TypeHot        = "hot"
	TypeCold       = "cold"
	TypeInvalidate = "invalidate"
)

// Sources of event.
const (
	SourceDetected = "detected"
	SourceManual   = "manual"
)

// Event is one hot-key message.
type Event struct {
	V      int    `json:"v"`
	Seq    uint64 `json:"seq"`
	Type   string `json:"type"`
	Proto  string `json:"proto"`
	Server string `json:"server"`
	NS     string `json:"ns"`
	// Key holds the raw key bytes. It is written as "key" when valid UTF-8,
	// else as "key_b64".
	Key []byte `json:"-"`
	// Display is an optional readable form (Tair Java-client keys).
	Display string `json:"display,omitempty"`
	// Prefix is set for a Tair pkey reported for prefix reads.
	Prefix bool `json:"prefix,omitempty"`
	// QPS is the measured weighted rate; absent on invalidate.
	QPS   float64   `json:"qps,omitempty"`
	TTLms int64     `json:"ttl_ms"`
	TS    time.Time `json:"ts"`
	// Source is "detected" or "manual".
	Source string `json:"source"`
	Node   string `json:"node"`

	// Optional fields: zero means absent on the wire, and absent means the
	// default, so subscribers that predate them keep working.

	// AbsorbedQPS is the part of QPS that client shims served locally and
	// reported; QPS is total demand (what reached the server plus this).
	AbsorbedQPS float64 `json:"-"`
	// WriteQPS is the measured write rate to the key at that server.
	WriteQPS float64 `json:"-"`
	// Uncacheable is sent as "cacheable":false: writes make local caching
	// useless, shims must not cache the key.
	Uncacheable bool `json:"-"`
	// BytesPS is the reply bytes per second attributed to the key.
	BytesPS float64 `json:"-"`
	// ValueBytes is the mean reply size for the key, in bytes.
	ValueBytes float64 `json:"-"`
	// Reason says why the key is hot: "qps", "bytes" or "qps,bytes".
	Reason string `json:"-"`
	// Sample is the capture's sampling rate when the event was made (0.25:
	// one in four); 0 or 1 means everything was seen and is not sent.
	Sample float64 `json:"-"`
	// Capped is sent as "capped":true when the demand shims reported was
	// cut to a bound in the last window: QPS is then a lower bound.
	Capped bool `json:"-"`
	// QPSLowerBound is sent as "qps_lower_bound":true when QPS is a lower
	// bound, not a measurement: the key was caught within milliseconds of
	// its first reads, faster than its rate can be timed (a key far above
	// the threshold is first reported at 32 × the threshold). A later
	// refresh carries the measured rate.
	QPSLowerBound bool `json:"-"`
}

// Reasons a key is hot.
const (
	ReasonQPS      = "qps"
	ReasonBytes    = "bytes"
	ReasonQPSBytes = "qps,bytes"
)

// wire is Event as it travels, with the key split into its two forms.
type wire struct {
	V       int      `json:"v"`
	Seq     uint64   `json:"seq"`
	Type    string   `json:"type"`
	Proto   string   `json:"proto"`
	Server  string   `json:"server"`
	NS      string   `json:"ns"`
	Key     *string  `json:"key,omitempty"`
	KeyB64  *string  `json:"key_b64,omitempty"`
	Display string   `json:"display,omitempty"`
	Prefix  bool     `json:"prefix,omitempty"`
	QPS     *float64 `json:"qps,omitempty"`
	TTLms   int64    `json:"ttl_ms"`
	TS      string   `json:"ts"`
	Source  string   `json:"source"`
	Node    string   `json:"node"`

	AbsorbedQPS float64 `json:"absorbed_qps,omitempty"`
	WriteQPS    float64 `json:"write_qps,omitempty"`
	Cacheable   *bool   `json:"cacheable,omitempty"`
	BytesPS     float64 `json:"bytes_ps,omitempty"`
	ValueBytes  float64 `json:"value_bytes,omitempty"`
	Reason      string  `json:"reason,omitempty"`
	Sample      float64 `json:"sample,omitempty"`
	Capped      bool    `json:"capped,omitempty"`

	QPSLowerBound bool `json:"qps_lower_bound,omitempty"`
}

// TSFormat is the event time format: RFC 3339 UTC with microseconds.
const TSFormat = "2006-01-02T15:04:05.000000Z07:00"

// MarshalJSON writes the contract form.
func (e *Event) MarshalJSON() ([]byte, error) {
	w := wire{
		V: e.V, Seq: e.Seq, Type: e.Type, Proto: e.Proto, Server: e.Server, NS: e.NS,
		Display: e.Display, Prefix: e.Prefix, TTLms: e.TTLms,
		TS: e.TS.UTC().Format(TSFormat), Source: e.Source, Node: e.Node,
		AbsorbedQPS: e.AbsorbedQPS, WriteQPS: e.WriteQPS, BytesPS: e.BytesPS,
		ValueBytes: e.ValueBytes, Reason: e.Reason, Capped: e.Capped,
		QPSLowerBound: e.QPSLowerBound && e.Type != TypeInvalidate,
	}
	if e.Uncacheable {
		f := false
		w.Cacheable = &f
	}
	if e.Sample > 0 && e.Sample < 1 {
		w.Sample = e.Sample
	}
	if w.V == 0 {
		w.V = Version
	}
	if utf8.Valid(e.Key) {
		s := string(e.Key)
		w.Key = &s
	} else {
		s := base64.StdEncoding.EncodeToString(e.Key)
		w.KeyB64 = &s
	}
	if e.Type != TypeInvalidate {
		q := e.QPS
		w.QPS = &q
	}
	return json.Marshal(&w)
}

// UnmarshalJSON reads the contract form, accepting either key field. A
// field outside its range (docs/channel-protocol.md, "Bad messages") is an
// error wrapping ErrOutOfRange: a publisher is untrusted input.
func (e *Event) UnmarshalJSON(b []byte) error {
	var w wireIn
	if err := json.Unmarshal(b, &w); err != nil {
		return classify(b, err)
	}
	*e = Event{Type: w.Type, Proto: w.Proto, Server: w.Server, NS: w.NS,
		Display: w.Display, Prefix: w.Prefix, Source: w.Source, Node: w.Node, Reason: w.Reason,
		Capped: w.Capped, QPSLowerBound: w.QPSLowerBound}
	var err error
	if e.V, err = version(w.V); err != nil {
		return err
	}
	if e.Seq, err = seqOf(w.Seq); err != nil {
		return err
	}
	if e.TTLms, err = ttlOf(w.TTLms); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		in   json.Number
		out  *float64
	}{
		{"qps", w.QPS, &e.QPS}, {"absorbed_qps", w.AbsorbedQPS, &e.AbsorbedQPS},
		{"write_qps", w.WriteQPS, &e.WriteQPS}, {"bytes_ps", w.BytesPS, &e.BytesPS},
		{"value_bytes", w.ValueBytes, &e.ValueBytes},
	} {
		if *f.out, err = rate(f.name, f.in); err != nil {
			return err
		}
	}
	if w.Sample != "" {
		v, err := strconv.ParseFloat(string(w.Sample), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 || v > 1 {
			return fmt.Errorf("sample %.40s: %w", w.Sample, ErrOutOfRange)
		}
		e.Sample = v
	}
	if w.Cacheable != nil && !*w.Cacheable {
		e.Uncacheable = true
	}
	switch {
	case w.Key != nil:
		if len(*w.Key) > MaxKeyBytes {
			return fmt.Errorf("key of %d bytes: %w", len(*w.Key), ErrOutOfRange)
		}
		e.Key = []byte(*w.Key)
	case w.KeyB64 != nil:
		if base64.StdEncoding.DecodedLen(len(*w.KeyB64)) > MaxKeyBytes+2 {
			return fmt.Errorf("key_b64 of %d bytes: %w", len(*w.KeyB64), ErrOutOfRange)
		}
		k, err := base64.StdEncoding.DecodeString(*w.KeyB64)
		if err != nil {
			return fmt.Errorf("decode key_b64: %w", err)
		}
		if len(k) > MaxKeyBytes {
			return fmt.Errorf("key of %d bytes: %w", len(k), ErrOutOfRange)
		}
		e.Key = k
	}
	if w.TS != "" {
		t, err := time.Parse(time.RFC3339Nano, w.TS)
		if err != nil {
			return fmt.Errorf("parse ts: %w", err)
		}
		e.TS = t
	}
	return nil
}

// wireIn is wire as read: numbers kept as text so that a value no field can
// hold (1e400, 400 digits) is told apart from a malformed message.
type wireIn struct {
	V           json.Number `json:"v"`
	Seq         json.Number `json:"seq"`
	Type        string      `json:"type"`
	Proto       string      `json:"proto"`
	Server      string      `json:"server"`
	NS          string      `json:"ns"`
	Key         *string     `json:"key"`
	KeyB64      *string     `json:"key_b64"`
	Display     string      `json:"display"`
	Prefix      bool        `json:"prefix"`
	QPS         json.Number `json:"qps"`
	TTLms       json.Number `json:"ttl_ms"`
	TS          string      `json:"ts"`
	Source      string      `json:"source"`
	Node        string      `json:"node"`
	AbsorbedQPS json.Number `json:"absorbed_qps"`
	WriteQPS    json.Number `json:"write_qps"`
	Cacheable   *bool       `json:"cacheable"`
	BytesPS     json.Number `json:"bytes_ps"`
	ValueBytes  json.Number `json:"value_bytes"`
	Reason      string      `json:"reason"`
	Sample      json.Number `json:"sample"`
	Capped      bool        `json:"capped"`

	QPSLowerBound bool `json:"qps_lower_bound"`
}

// Limits a subscriber enforces on what it reads (docs/channel-protocol.md).
const (
	// MaxMessageBytes: a longer channel message is rejected unparsed.
	MaxMessageBytes = 1 << 20
	// MaxSnapshotBytes: a longer snapshot document is rejected unparsed.
	MaxSnapshotBytes = 64 << 20
	// MaxKeyBytes: a longer key is out of range.
	MaxKeyBytes = 1 << 20
	// MaxSeq: seq is below 2^53, so a double holds it exactly.
	MaxSeq = 1<<53 - 1
	// MaxTTLms: a hot entry lasts at most a day without a refresh.
	MaxTTLms = 86_400_000
)

// Errors a decoder wraps, so subscribers can count bad messages by reason.
var (
	ErrTooLarge   = errors.New("too large")
	ErrOutOfRange = errors.New("out of range")
)

// classify turns a JSON error caused by a number no JSON decoder should
// accept (Infinity, NaN: some encoders write them) into ErrOutOfRange.
func classify(b []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) && se.Offset > 0 && se.Offset <= int64(len(b)) {
		switch b[se.Offset-1] {
		case 'I', 'N':
			return fmt.Errorf("non-finite number: %w", ErrOutOfRange)
		}
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Value == "number" {
		return fmt.Errorf("%s: %w", te.Field, ErrOutOfRange)
	}
	return err
}

// version reads "v"; absent is 0 here, and a subscriber rejects it
// (CheckVersion), while other readers of the form may not care.
func version(n json.Number) (int, error) {
	switch n {
	case "":
		return 0, nil
	case "1":
		return 1, nil
	case "2":
		return 2, nil
	}
	return 0, fmt.Errorf("v %.40q: %w", n, ErrOutOfRange)
}

// CheckVersion rejects an event whose "v" is not 1 or 2.
func CheckVersion(e *Event) error {
	if e.V != 1 && e.V != 2 {
		return fmt.Errorf("v %d: %w", e.V, ErrOutOfRange)
	}
	return nil
}

func seqOf(n json.Number) (uint64, error) {
	if n == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(string(n), 10, 64)
	if err != nil || v > MaxSeq {
		return 0, fmt.Errorf("seq %.40s: %w", n, ErrOutOfRange)
	}
	return v, nil
}

func ttlOf(n json.Number) (int64, error) {
	if n == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil || v < 0 || v > MaxTTLms {
		return 0, fmt.Errorf("ttl_ms %.40s: %w", n, ErrOutOfRange)
	}
	return v, nil
}

func rate(name string, n json.Number) (float64, error) {
	if n == "" {
		return 0, nil
	}
	v, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("%s %.40s: %w", name, n, ErrOutOfRange)
	}
	return v, nil
}

// Snapshot is the document kept at "<channel>:snapshot": the whole current hot
// set and the seq of the last message it reflects.
//
// Several publishers (one per node) share the document: Seq, TS and Node are
// those of the last writer, Nodes holds every live publisher's own seq, and
// Keys is the union of all their entries (docs/channel-protocol.md).
type Snapshot struct {
	V    int    `json:"v"`
	Seq  uint64 `json:"seq"`
	TS   string `json:"ts"`
	Node string `json:"node"`
	// Nodes lists each publisher whose section is merged in, with the seq
	// its entries reflect: a subscriber's per-node gap check needs it.
	Nodes []SnapshotNode `json:"nodes,omitempty"`
	Keys  []*Event       `json:"keys"`
}

// SnapshotNode is one publisher's section of a Snapshot.
type SnapshotNode struct {
	Node string `json:"node"`
	Seq  uint64 `json:"seq"`
	TS   string `json:"ts"`
	Keys int    `json:"keys"`
}
