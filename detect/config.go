package detect

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/hotsniff/hotsniff/decode"
)

// Detector names accepted in Config.Detector.
const (
	DetectorDefault = "default"
	DetectorTair    = "tair"
)

// Config tunes a Detector. Zero values take the defaults listed on each
// field (DefaultConfig returns them all).
type Config struct {
	// HotQPS is the default threshold: a key is hot when its weighted request
	// rate at one server reaches HotQPS per second. Required.
	HotQPS float64
	// HotBytes, when set, also makes a key hot when the reply bytes
	// attributed to it at one server reach HotBytes per second (the
	// default detector only). 0: off.
	HotBytes float64
	// Detector selects the algorithm: "default" (windowed buckets, sound) or
	// "tair" (Tair's server-side pipeline, kept for comparison).
	Detector string
	// TTL is the event ttl_ms: how long a client may treat a key as hot
	// without a refresh, and the lifetime of a hot key seen no more. 60s.
	TTL time.Duration
	// RefreshEvery rate-limits refreshes (type hot again) of a key that stays
	// hot. TTL/2.
	RefreshEvery time.Duration
	// Window is the span over which rates are measured. 0 picks it so that a
	// key at HotQPS contributes about 800 requests per window (Poisson noise
	// ±3.5 %), between 400ms and 20s. It is cut into 8 sliding sub-windows;
	// a key newly located is judged after half a window at the earliest.
	Window time.Duration
	// ColdRatio is the hysteresis: a hot key turns cold when its rate falls
	// below ColdRatio × its threshold. 0.7.
	ColdRatio float64
	// Buckets is the number of hash buckets of the default detector (a power
	// of two). 4096. Recall is guaranteed while the traffic of one bucket
	// (total rate / Buckets) stays below 8 × the lowest threshold.
	Buckets int
	// MaxHot caps the hot list; when full, the least recently seen hot key is
	// evicted (and announced cold). 1024.
	MaxHot int
	// InvalidateGap merges identical invalidates of one key closer than this;
	// the first is always sent, and a merged one is sent after the gap, so
	// a key gets at most one invalidate per gap and its last write is
	// always invalidated. 10ms.
	InvalidateGap time.Duration
	// LocalTTL is the client shims' local expiry (their LocalTTL, 50ms by
	// default): the cacheable verdict is judged against it.
	LocalTTL time.Duration
	// UncacheableWrites: a hot key whose write rate reaches this many writes
	// per LocalTTL is published "cacheable":false (shims stop caching it, its
	// writes stop producing invalidates); it turns cacheable again below
	// half of it. 1 (docs/detection.md derives it). Negative: never.
	UncacheableWrites float64
	// AbsorbedCap bounds the demand client shims can report for one hot
	// key: at most AbsorbedCap × its threshold per second is credited,
	// however many reports arrive. 1000.
	AbsorbedCap float64
	// AbsorbedClientCap bounds what one client (one address: every
	// connection from it) can report for one key: at most this × its
	// threshold per second. 16.
	AbsorbedClientCap float64
	// AbsorbedHold is how long one client's reports alone may keep a key
	// hot (the key would be cold without them): then that client's reports
	// for the key stop counting until the key has gone cold and been
	// detected again on the wire. 2m.
	AbsorbedHold time.Duration
	// Rules are per-key-pattern thresholds; the first match wins.
	Rules []Rule
	// Ignore lists key patterns that are never reported.
	Ignore []string
	// Tair tunes the "tair" detector.
	Tair TairConfig
}

// Rule overrides the threshold for keys matching Pattern.
//
// Patterns are matched against the raw key bytes: '*' matches any run of
// bytes (including '/' and ':', unlike path.Match), '?' matches one byte,
// every other byte matches itself. "session:*" is thus a prefix match (and
// is matched without backtracking); a pattern without wildcards matches one
// key exactly.
type Rule struct {
	Pattern string
	// HotQPS is the threshold for matching keys; 0 keeps the default. The
	// window is sized for the default threshold, so keys under a much lower
	// one are judged on a longer view of their own reads (bytes.go): found
	// later near the threshold, never on too few reads.
	// The lowest threshold also sets how many buckets are located, so a
	// very low one costs speed, never accuracy.
	HotQPS float64
	// HotBytes is the reply-bytes threshold (per second) for matching keys;
	// 0 keeps the default (Config.HotBytes).
	HotBytes float64
	// Proto limits the rule to one protocol ("redis", "memcache", "tair");
	// empty means all.
	Proto string
}

// TairConfig holds the parameters of Tair's pipeline; zero values take
// Tair's own constants.
type TairConfig struct {
	Buckets   int     // 1024
	SampleMax int     // 50000
	SigmaN    float64 // 0.8
	ReapMax   int     // 32
}

const (
	defaultTTL      = 60 * time.Second
	defaultBuckets  = 4096
	defaultMaxHot   = 1024
	defaultCold     = 0.7
	defaultInvGap   = 10 * time.Millisecond
	defaultLocalTTL = 50 * time.Millisecond
	minWindow       = 400 * time.Millisecond
	maxWindow       = 20 * time.Second
	// defaultUncacheableWrites: one write per local TTL (docs/detection.md).
	defaultUncacheableWrites = 1
	countsAtHotRate          = 800 // requests a key at the threshold adds per window
)

// defaultAbsorbedCap: a key read locally at 1000× its threshold is far
// beyond any hot key seen in practice; the bound is for broken or forged
// reports, not for real demand.
const defaultAbsorbedCap = 1000

// DefaultConfig returns the tuning defaults (HotQPS, which has none, is
// left 0). The command line shows these as its defaults.
func DefaultConfig() Config {
	return Config{
		Detector:          DetectorDefault,
		TTL:               defaultTTL,
		ColdRatio:         defaultCold,
		Buckets:           defaultBuckets,
		MaxHot:            defaultMaxHot,
		InvalidateGap:     defaultInvGap,
		LocalTTL:          defaultLocalTTL,
		UncacheableWrites: defaultUncacheableWrites,
		AbsorbedCap:       defaultAbsorbedCap,
		AbsorbedClientCap: defaultAbsorbedClientCap,
		AbsorbedHold:      defaultAbsorbedHold,
		Tair:              TairConfig{Buckets: defaultTairBuckets, SampleMax: defaultTairSampleMax, SigmaN: defaultTairSigmaN, ReapMax: defaultTairReapMax},
	}
}

// Tair's own constants.
const (
	defaultTairBuckets   = 1024
	defaultTairSampleMax = 50000
	defaultTairSigmaN    = 0.8
	defaultTairReapMax   = 32

	// defaultAbsorbedClientCap and defaultAbsorbedHold bound one client's
	// reports (docs/detection.md, "What a report is trusted with").
	defaultAbsorbedClientCap = 16
	defaultAbsorbedHold      = 2 * time.Minute
)

// withDefaults validates c and fills in the defaults.
func (c Config) withDefaults() (Config, error) {
	if !(c.HotQPS > 0) || math.IsInf(c.HotQPS, 0) {
		return c, fmt.Errorf("check hot-qps: must be a positive number, got %v", c.HotQPS)
	}
	switch c.Detector {
	case "":
		c.Detector = DetectorDefault
	case DetectorDefault, DetectorTair:
	default:
		return c, fmt.Errorf("check detector: %q is not %q or %q", c.Detector, DetectorDefault, DetectorTair)
	}
	if c.HotBytes < 0 || math.IsNaN(c.HotBytes) || math.IsInf(c.HotBytes, 0) {
		return c, fmt.Errorf("check hot_bytes: must be a positive number or 0 (off), got %v", c.HotBytes)
	}
	if c.TTL < 0 || c.RefreshEvery < 0 || c.Window < 0 || c.InvalidateGap < 0 {
		return c, errors.New("check durations: must not be negative")
	}
	if c.TTL == 0 {
		c.TTL = defaultTTL
	}
	if c.RefreshEvery == 0 {
		c.RefreshEvery = c.TTL / 2
	}
	if c.Window == 0 {
		w := time.Duration(countsAtHotRate / c.HotQPS * float64(time.Second))
		c.Window = min(max(w, minWindow), maxWindow)
	}
	if c.Window < numSub*time.Millisecond {
		return c, fmt.Errorf("check window: %v is shorter than %v", c.Window, numSub*time.Millisecond)
	}
	if c.ColdRatio == 0 {
		c.ColdRatio = defaultCold
	}
	if c.ColdRatio < 0 || c.ColdRatio > 1 {
		return c, fmt.Errorf("check cold-ratio: %v is not in (0, 1]", c.ColdRatio)
	}
	if c.AbsorbedCap == 0 {
		c.AbsorbedCap = defaultAbsorbedCap
	}
	if !(c.AbsorbedCap > 0) || math.IsInf(c.AbsorbedCap, 0) {
		return c, fmt.Errorf("check absorbed_cap: must be a positive number, got %v", c.AbsorbedCap)
	}
	if c.AbsorbedClientCap == 0 {
		c.AbsorbedClientCap = defaultAbsorbedClientCap
	}
	if !(c.AbsorbedClientCap > 0) || math.IsInf(c.AbsorbedClientCap, 0) {
		return c, fmt.Errorf("check absorbed_client_cap: must be a positive number, got %v", c.AbsorbedClientCap)
	}
	if c.AbsorbedHold == 0 {
		c.AbsorbedHold = defaultAbsorbedHold
	}
	if c.AbsorbedHold < 0 {
		return c, fmt.Errorf("check absorbed_hold: must be positive, got %v", c.AbsorbedHold)
	}
	if c.Buckets == 0 {
		c.Buckets = defaultBuckets
	}
	if c.Buckets < 16 || c.Buckets > 1<<20 || c.Buckets&(c.Buckets-1) != 0 {
		return c, fmt.Errorf("check buckets: %d is not a power of two in [16, 2^20]", c.Buckets)
	}
	if c.MaxHot == 0 {
		c.MaxHot = defaultMaxHot
	}
	if c.MaxHot < 1 || c.MaxHot > 1<<20 {
		return c, fmt.Errorf("check max-hot: %d is not in [1, 2^20]", c.MaxHot)
	}
	if c.InvalidateGap == 0 {
		c.InvalidateGap = defaultInvGap
	}
	if c.LocalTTL < 0 {
		return c, errors.New("check local-ttl: must not be negative")
	}
	if c.LocalTTL == 0 {
		c.LocalTTL = defaultLocalTTL
	}
	if math.IsNaN(c.UncacheableWrites) || math.IsInf(c.UncacheableWrites, 0) {
		return c, fmt.Errorf("check uncacheable-writes: %v is not a number", c.UncacheableWrites)
	}
	if c.UncacheableWrites == 0 {
		c.UncacheableWrites = defaultUncacheableWrites
	}
	t := &c.Tair
	if t.Buckets == 0 {
		t.Buckets = defaultTairBuckets
	}
	if t.SampleMax == 0 {
		t.SampleMax = defaultTairSampleMax
	}
	if t.SigmaN == 0 {
		t.SigmaN = defaultTairSigmaN
	}
	if t.ReapMax == 0 {
		t.ReapMax = defaultTairReapMax
	}
	if t.Buckets < 2 || t.Buckets > 1<<20 || t.SampleMax < 1 || t.ReapMax < 1 || t.ReapMax > 4096 || t.SigmaN < 0 {
		return c, fmt.Errorf("check tair settings: tair-buckets %d, tair-sample-max %d, tair-reap-max %d, tair-sigma-n %v out of range",
			t.Buckets, t.SampleMax, t.ReapMax, t.SigmaN)
	}
	for i, r := range c.Rules {
		if r.Pattern == "" {
			return c, fmt.Errorf("check rule %d: empty pattern", i)
		}
		if r.HotQPS < 0 || math.IsNaN(r.HotQPS) || math.IsInf(r.HotQPS, 0) {
			return c, fmt.Errorf("check rule %d (%s): hot-qps %v is negative", i, r.Pattern, r.HotQPS)
		}
		if r.HotBytes < 0 || math.IsNaN(r.HotBytes) || math.IsInf(r.HotBytes, 0) {
			return c, fmt.Errorf("check rule %d (%s): hot_bytes %v is negative", i, r.Pattern, r.HotBytes)
		}
		if r.Proto != "" {
			if _, ok := decode.ParseProto(r.Proto); !ok {
				return c, fmt.Errorf("check rule %d (%s): unknown proto %q", i, r.Pattern, r.Proto)
			}
		}
	}
	for i, p := range c.Ignore {
		if p == "" {
			return c, fmt.Errorf("check ignore %d: empty pattern", i)
		}
	}
	return c, nil
}

// pattern is a compiled key pattern.
type pattern struct {
	s      string
	prefix bool // s is a plain prefix (pattern "s*")
	exact  bool // s has no wildcard
}

func compilePattern(p string) pattern {
	if !strings.ContainsAny(p, "*?") {
		return pattern{s: p, exact: true}
	}
	if i := strings.IndexAny(p, "*?"); i == len(p)-1 && p[i] == '*' {
		return pattern{s: p[:i], prefix: true}
	}
	return pattern{s: p}
}

func (p *pattern) match(key []byte) bool {
	switch {
	case p.exact:
		return string(key) == p.s
	case p.prefix:
		return len(key) >= len(p.s) && string(key[:len(p.s)]) == p.s
	}
	return globMatch(p.s, key)
}

// globMatch matches '*' (any bytes) and '?' (one byte). It backtracks only to
// the last star, so it runs in O(len(p) × len(key)) at worst.
func globMatch(p string, s []byte) bool {
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && (p[pi] == '?' || (p[pi] != '*' && p[pi] == s[si])):
			pi++
			si++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

type rule struct {
	pat   pattern
	qps   float64
	bytes float64
	proto decode.Proto // ProtoUnknown: any
}

// ruleSet resolves the threshold of a key. It is consulted only when a key
// is about to be promoted, never per observation.
type ruleSet struct {
	def    float64
	defB   float64
	rules  []rule
	ignore []pattern
}

func newRuleSet(c Config) ruleSet {
	rs := ruleSet{def: c.HotQPS, defB: c.HotBytes}
	for _, r := range c.Rules {
		p, _ := decode.ParseProto(r.Proto)
		q := r.HotQPS
		if q == 0 {
			q = c.HotQPS
		}
		b := r.HotBytes
		if b == 0 {
			b = c.HotBytes
		}
		rs.rules = append(rs.rules, rule{pat: compilePattern(r.Pattern), qps: q, bytes: b, proto: p})
	}
	for _, s := range c.Ignore {
		rs.ignore = append(rs.ignore, compilePattern(s))
	}
	return rs
}

// lookup returns the threshold for key, or ignored.
func (rs *ruleSet) lookup(p decode.Proto, key []byte) (qps float64, ignored bool) {
	for i := range rs.ignore {
		if rs.ignore[i].match(key) {
			return 0, true
		}
	}
	for i := range rs.rules {
		r := &rs.rules[i]
		if (r.proto == decode.ProtoUnknown || r.proto == p) && r.pat.match(key) {
			return r.qps, false
		}
	}
	return rs.def, false
}

// lookupBoth returns both thresholds for key (bytes 0: no bytes threshold).
func (rs *ruleSet) lookupBoth(p decode.Proto, key []byte) (qps, bytes float64, ignored bool) {
	for i := range rs.ignore {
		if rs.ignore[i].match(key) {
			return 0, 0, true
		}
	}
	for i := range rs.rules {
		r := &rs.rules[i]
		if (r.proto == decode.ProtoUnknown || r.proto == p) && r.pat.match(key) {
			return r.qps, r.bytes, false
		}
	}
	return rs.def, rs.defB, false
}

// minBytes returns the lowest reply-bytes threshold in use, 0 when none.
func (rs *ruleSet) minBytes() float64 {
	m := rs.defB
	for _, r := range rs.rules {
		if r.bytes > 0 && (m == 0 || r.bytes < m) {
			m = r.bytes
		}
	}
	return m
}

// min returns the lowest threshold any key can have: the bucket stage must
// trigger on it or keys under a low per-pattern threshold would be missed.
func (rs *ruleSet) min() float64 {
	m := rs.def
	for _, r := range rs.rules {
		m = min(m, r.qps)
	}
	return m
}
