package client

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Absorbed-demand reports. Once the shim serves a hot key from memory, the
// server sees only its refresh reads, and a daemon measuring the key on the
// wire alone would declare it cold: every shim would drop it and the full
// load would return, about once a second. So on each refresh read the shim
// tells the daemon how many reads it served locally, in-band, on the same
// connection, pipelined right after the read:
//
//	ECHO "hotsniff:absorbed:1 <hits> <window_ms> <key>"
//
// <hits> the reads of key served locally since the previous report (no
// ECHO when 0), <window_ms> the milliseconds since that report (or since the
// key was cached). The daemon counts it only right after a read of the same
// key on the same connection (docs/channel-protocol.md). If the server
// refuses ECHO (an ACL without it, a proxy that does not know it), the shim
// logs once and stops reporting; the read's own result is never affected.

// reportPrefix starts every report; "1" is the report's version.
const reportPrefix = "hotsniff:absorbed:1 "

// absorbed is a cached key's local-read count since its last report. A hit
// adds one with a single atomic (no allocation); the refresh that reports
// takes the count.
type absorbed struct {
	hits atomic.Uint64
	last atomic.Int64 // shim clock of the previous report, or when caching began
}

// countHit counts one read of e served locally, for the next report.
func (s *Shim) countHit(e *cacheEntry) {
	if !s.opt.DisableAbsorbedReports {
		e.rep.hits.Add(1)
	}
}

// fetch sends the refresh read cmd for e's key, with a report of the local
// hits when there are any.
func (s *Shim) fetch(ctx context.Context, e *cacheEntry, cmd redis.Cmder, next redis.ProcessHook) error {
	if s.opt.DisableAbsorbedReports || s.noReport.Load() {
		return next(ctx, cmd)
	}
	now := nanotime()
	last := e.rep.last.Load()
	if last == 0 {
		// The first fetch of a newly cached key: the window starts now.
		e.rep.last.CompareAndSwap(0, now)
		return next(ctx, cmd)
	}
	hits := e.rep.hits.Swap(0)
	if hits == 0 {
		return next(ctx, cmd)
	}
	win := max((now-last)/1e6, 1)
	e.rep.last.Store(now)
	msg := make([]byte, 0, len(reportPrefix)+42+len(e.key))
	msg = append(msg, reportPrefix...)
	msg = strconv.AppendUint(msg, hits, 10)
	msg = append(msg, ' ')
	msg = strconv.AppendInt(msg, win, 10)
	msg = append(msg, ' ')
	msg = append(msg, e.key...)
	echo := redis.NewStringCmd(ctx, "echo", string(msg))
	// The read, then the report right after it, on one connection of the
	// server holding the key (sameconn.go), past local serving.
	err := s.readThen(ctx, e.key, cmd, echo, next)
	var rerr redis.Error
	switch eerr := echo.Err(); {
	case eerr == nil:
		s.m.reports.Add(1)
		s.m.reportedHits.Add(hits)
	case errors.As(eerr, &rerr) && !errors.Is(eerr, redis.Nil):
		// The server answered with an error: it will never take reports.
		if s.noReport.CompareAndSwap(false, true) {
			s.log.Warn("absorbed-demand reports disabled: the server refused ECHO; hot keys this client serves locally may be reported cold and flap",
				"err", eerr)
		}
	default:
		// Not sent (connection error): the reads stay to be reported.
		e.rep.hits.Add(hits)
	}
	// The read's own result, whatever became of the report.
	return err
}
