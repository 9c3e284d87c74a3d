// Package event is the hot-key message (docs/events.md). It lives in the
// client module (github.com/hotsniff/hotsniff/client/event), so that the shim
// can be depended on without the daemon; these aliases keep the daemon's
// packages importing it here.
package event

import cevent "github.com/hotsniff/hotsniff/client/event"

// The types are the client module's, not copies: values pass freely.
type (
	Event        = cevent.Event
	Batch        = cevent.Batch
	Snapshot     = cevent.Snapshot
	SnapshotNode = cevent.SnapshotNode
)

// Constants of the schema (docs/events.md).
const (
	Version          = cevent.Version
	BatchVersion     = cevent.BatchVersion
	MaxBatchEvents   = cevent.MaxBatchEvents
	TypeHot          = cevent.TypeHot
	TypeCold         = cevent.TypeCold
	TypeInvalidate   = cevent.TypeInvalidate
	SourceDetected   = cevent.SourceDetected
	SourceManual     = cevent.SourceManual
	ReasonQPS        = cevent.ReasonQPS
	ReasonBytes      = cevent.ReasonBytes
	ReasonQPSBytes   = cevent.ReasonQPSBytes
	TSFormat         = cevent.TSFormat
	MaxMessageBytes  = cevent.MaxMessageBytes
	MaxSnapshotBytes = cevent.MaxSnapshotBytes
	MaxKeyBytes      = cevent.MaxKeyBytes
	MaxSeq           = cevent.MaxSeq
	MaxTTLms         = cevent.MaxTTLms
)

// Errors a decoder wraps (the same values as the client module's).
var (
	ErrTooLarge   = cevent.ErrTooLarge
	ErrOutOfRange = cevent.ErrOutOfRange
)

// DecodeMessage reads one channel message (see the client module's).
func DecodeMessage(dst []*Event, b []byte) ([]*Event, error) { return cevent.DecodeMessage(dst, b) }

// DecodeSnapshot reads a snapshot document (see the client module's).
func DecodeSnapshot(b []byte) (*Snapshot, int, error) { return cevent.DecodeSnapshot(b) }

// CheckVersion rejects an event whose "v" is not 1 or 2.
func CheckVersion(e *Event) error { return cevent.CheckVersion(e) }
