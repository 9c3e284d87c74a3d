package client

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons a cached value is invalidated (label "reason").
const (
	invalWrite    = iota // a write through the same client
	invalEvent           // an invalidate message on the channel
	invalTracking        // server-assisted invalidation (CLIENT TRACKING)
	invalCold            // a cold message
	invalSnapshot        // a snapshot reload (gap or reconnect: messages may be lost)
	invalFlush           // FLUSHDB/FLUSHALL/SWAPDB, or tracking lost
	numInval
)

var invalNames = [numInval]string{"write", "event", "tracking", "cold", "snapshot", "flush"}

// Reasons an entry leaves the cache (label "reason").
const (
	evictCapacity = iota // MaxEntries reached
	evictNotHot          // the key is no longer hot
	evictIdle            // not read for a while
	evictModeEnd         // hot-running mode ended
	evictBytes           // MaxBytes reached: a fetched value was not kept
	numEvict
)

var evictNames = [numEvict]string{"capacity", "not_hot", "idle", "mode_end", "bytes"}

type metrics struct {
	hits, staleHits, waitHits, misses, admissions, refreshes, fetchErrors, uncacheable atomic.Uint64
	reports, reportedHits, tooBig                                                      atomic.Uint64
	invalidations                                                                      [numInval]atomic.Uint64
	evictions                                                                          [numEvict]atomic.Uint64

	dHits, dStale, dMisses, dAdmissions, dRefreshes, dFetchErrors, dUncacheable *prometheus.Desc
	dInval, dEvict, dEntries, dHotKeys, dActive, dTracking                      *prometheus.Desc
	dReloads, dGaps, dReconnects, dMessages                                     *prometheus.Desc
	dReports, dReportedHits, dReporting                                         *prometheus.Desc
	dBad, dChannelUp, dWithoutChannel, dBytes, dTooBig                          *prometheus.Desc
}

func (m *metrics) init() {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("hotsniff_client_"+name, help, labels, nil)
	}
	m.dHits = d("hits_total", "Reads of hot keys served from local memory with a fresh value.")
	m.dStale = d("stale_hits_total", "Reads served the previous value while one caller refreshed it (bounded by StaleGrace).")
	m.dMisses = d("misses_total", "Reads of hot keys that went to Redis (first access, refresh, invalidated, not cacheable).")
	m.dAdmissions = d("admissions_total", "Hot keys admitted to the local cache (on their second read).")
	m.dRefreshes = d("refreshes_total", "Fetches of a hot key's value from Redis by the single refreshing caller.")
	m.dFetchErrors = d("fetch_errors_total", "Refreshes that failed (the error went to the caller, nothing was cached).")
	m.dUncacheable = d("uncacheable_total", "Hashes found to have more than MaxHashFields fields (by HLEN, never fetched whole); remembered for a minute.")
	m.dInval = d("invalidations_total", "Cached values dropped, by reason.", "reason")
	m.dEvict = d("evictions_total", "Entries removed from the local cache, by reason.", "reason")
	m.dEntries = d("entries", "Keys in the local cache.")
	m.dHotKeys = d("hot_keys", "Keys hot for this client (its servers and DB).")
	m.dActive = d("hot_mode", "1 while in hot-running mode (reads of hot keys are served locally).")
	m.dTracking = d("tracking", "1 while server-assisted invalidation (CLIENT TRACKING) is established.")
	m.dReloads = d("snapshot_reloads_total", "Snapshot loads by the channel subscriber.")
	m.dGaps = d("seq_gaps_total", "Sequence gaps seen on the channel.")
	m.dReconnects = d("channel_reconnects_total", "Channel subscription reconnects.")
	m.dMessages = d("channel_messages_total", "Messages received on the channel.")
	m.dReports = d("absorbed_reports_total", "Absorbed-demand reports sent (an ECHO after a refresh read).")
	m.dReportedHits = d("absorbed_hits_total", "Local reads reported to the daemon in absorbed-demand reports.")
	m.dBytes = d("bytes", "Bytes of the cached values (keys, values, hash fields, with an estimate of their overhead), bounded by MaxBytes.")
	m.dTooBig = d("too_big_total", "Fetched values larger than MaxValueBytes, not cached.")
	m.dBad = d("bad_messages_total", "Channel messages and snapshot entries rejected, by reason (too_large, out_of_range, undecodable, bad_signature, unconfirmed_seq, flapping).", "reason")
	m.dChannelUp = d("channel_up", "1 while the channel is followed (subscribed and the snapshot read); 0 during an outage, when held keys are served on.")
	m.dWithoutChannel = d("served_without_channel", "Keys held and served while the channel is down (0 while it is up).")
	m.dReporting = d("absorbed_reporting", "1 while absorbed-demand reports are sent (0: disabled, or refused by the server).")
}

// Describe implements prometheus.Collector.
func (s *Shim) Describe(ch chan<- *prometheus.Desc) {
	m := &s.m
	for _, d := range []*prometheus.Desc{m.dHits, m.dStale, m.dMisses, m.dAdmissions, m.dRefreshes, m.dFetchErrors, m.dUncacheable,
		m.dInval, m.dEvict, m.dEntries, m.dHotKeys, m.dActive, m.dTracking, m.dReloads, m.dGaps, m.dReconnects, m.dMessages,
		m.dReports, m.dReportedHits, m.dReporting, m.dBad, m.dChannelUp, m.dWithoutChannel, m.dBytes, m.dTooBig} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. No key is ever a label.
func (s *Shim) Collect(ch chan<- prometheus.Metric) {
	m := &s.m
	c := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	g := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	c(m.dHits, m.hits.Load())
	c(m.dStale, m.staleHits.Load())
	c(m.dMisses, m.misses.Load())
	c(m.dAdmissions, m.admissions.Load())
	c(m.dRefreshes, m.refreshes.Load())
	c(m.dFetchErrors, m.fetchErrors.Load())
	c(m.dUncacheable, m.uncacheable.Load())
	for i := range m.invalidations {
		c(m.dInval, m.invalidations[i].Load(), invalNames[i])
	}
	for i := range m.evictions {
		c(m.dEvict, m.evictions[i].Load(), evictNames[i])
	}
	s.mu.RLock()
	entries, hot := len(s.entries), len(s.hot)
	s.mu.RUnlock()
	g(m.dEntries, float64(entries))
	g(m.dHotKeys, float64(hot))
	g(m.dActive, b2f(s.active.Load()))
	g(m.dTracking, b2f(s.trackers.established()))
	st := s.sub.Stats()
	c(m.dReloads, st.Reloads)
	c(m.dGaps, st.Gaps)
	c(m.dReconnects, st.Reconnects)
	c(m.dMessages, st.Messages)
	c(m.dReports, m.reports.Load())
	c(m.dReportedHits, m.reportedHits.Load())
	g(m.dReporting, b2f(s.reporting()))
	for i, n := range st.Bad {
		c(m.dBad, n, BadReasons[i])
	}
	g(m.dChannelUp, b2f(st.ChannelUp))
	g(m.dBytes, float64(s.bytes.Load()))
	c(m.dTooBig, m.tooBig.Load())
	without := 0
	if !st.ChannelUp {
		without = hot
	}
	g(m.dWithoutChannel, float64(without))
}

// reporting is whether absorbed-demand reports are sent.
func (s *Shim) reporting() bool { return !s.opt.DisableAbsorbedReports && !s.noReport.Load() }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ShimStats are the shim's counters, for tests and logs.
type ShimStats struct {
	Hits, StaleHits, Misses, Admissions, Refreshes, FetchErrors, Uncacheable uint64
	// WaitHits: of Hits, reads that waited for another caller's fetch of
	// the key (its value had been invalidated) instead of going to Redis.
	WaitHits                 uint64
	Invalidations, Evictions map[string]uint64
	Entries, HotKeys         int
	HotMode, Tracking        bool
	// Reports and ReportedHits count absorbed-demand reports sent and the
	// local reads they carried; Reporting is false once disabled.
	Reports, ReportedHits uint64
	Reporting             bool
	// Bad counts rejected channel messages by reason (BadReasons).
	Bad map[string]uint64
	// ChannelUp is false during a channel outage; ServedWithoutChannel is
	// then the number of keys held and served on.
	ChannelUp            bool
	ServedWithoutChannel int
	// Bytes is the cached values' size; TooBig counts values over
	// MaxValueBytes left uncached.
	Bytes  int64
	TooBig uint64
}

// Stats returns the counters.
func (s *Shim) Stats() ShimStats {
	m := &s.m
	st := ShimStats{
		Hits: m.hits.Load(), StaleHits: m.staleHits.Load(), WaitHits: m.waitHits.Load(), Misses: m.misses.Load(),
		Admissions: m.admissions.Load(), Refreshes: m.refreshes.Load(), FetchErrors: m.fetchErrors.Load(),
		Uncacheable:   m.uncacheable.Load(),
		Invalidations: map[string]uint64{}, Evictions: map[string]uint64{},
		HotMode: s.active.Load(), Tracking: s.trackers.established(),
		Reports: m.reports.Load(), ReportedHits: m.reportedHits.Load(), Reporting: s.reporting(),
	}
	for i := range m.invalidations {
		st.Invalidations[invalNames[i]] = m.invalidations[i].Load()
	}
	for i := range m.evictions {
		st.Evictions[evictNames[i]] = m.evictions[i].Load()
	}
	s.mu.RLock()
	st.Entries, st.HotKeys = len(s.entries), len(s.hot)
	s.mu.RUnlock()
	sub := s.sub.Stats()
	st.Bad = map[string]uint64{}
	for i, n := range sub.Bad {
		st.Bad[BadReasons[i]] = n
	}
	st.ChannelUp = sub.ChannelUp
	st.Bytes, st.TooBig = s.bytes.Load(), m.tooBig.Load()
	if !st.ChannelUp {
		st.ServedWithoutChannel = st.HotKeys
	}
	return st
}
