// Package accuracy measures hot-key detectors against workloads whose truth
// is known: synthetic reads with packet times, fed straight into a
// detect.Detector as decode.Sink calls. cmd/accuracy prints the results and
// detect's tests assert a reduced version of them.
package accuracy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hotsniff/hotsniff/bpf/samplelevel"

	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/event"
)

// Params sizes the workloads.
type Params struct {
	Seed     uint64
	Rate     float64       // background reads per second
	Duration time.Duration // length of the steady workloads
	HotQPS   float64       // detector threshold
	Keys     int           // background key space
	Trials   int           // onsets measured by the step and multi workloads
	// Flow sampling (--max-cpu): reads are spread uniformly over Conns
	// connections, and only the connections the capture keeps at
	// SampleLevel (samplelevel.KeepAt, chosen by a hash of the connection as
	// the eBPF programs do) reach the detector. As in the daemon, the
	// detector is told the fraction of requests really seen (the kept
	// connections' share: the daemon measures it from request bytes) and
	// scales counts back by it. SampleLevel 0: everything is seen.
	SampleLevel uint8
	Conns       int
	// Window is the detector's window (0: its default, 800/HotQPS).
	Window time.Duration
	// Kernel adds the kernel path to Run: the default detector fed as
	// under --kernel-count (DetectorKernel, kernel.go).
	Kernel bool
	// KernelRead is how often the kernel path's reader hands ended
	// sub-windows to the detector: 0 at each sub-window's end, as the
	// daemon does; 100 ms, its tick, is how it read before.
	KernelRead time.Duration
}

// Full is the configuration of the published table.
func Full() Params {
	return Params{Seed: 1, Rate: 1e6, Duration: 5 * time.Second, HotQPS: 2000, Keys: 1_000_000, Trials: 100}
}

// Quick is a reduced configuration for tests (a few seconds in all).
func Quick() Params {
	return Params{Seed: 7, Rate: 5e5, Duration: 2 * time.Second, HotQPS: 2000, Keys: 200_000, Trials: 20}
}

// Result is one workload run on one detector.
type Result struct {
	Workload string
	Detector string
	MustFind int     // keys with true rate >= 1.2 × threshold
	Found    int     // of those, reported hot
	Quiet    int     // keys with true rate <= 0.8 × threshold that got traffic
	FalsePos int     // of those, reported hot
	Near     int     // keys with true rate in [0.5, 0.8] × threshold that got traffic
	NearFP   int     // of those, reported hot
	Events   int     // events emitted in all
	Onsets   int     // onsets measured (step, multi)
	Missed   int     // onsets never reported while on
	P50, P99 float64 // onset-to-event latency in ms of packet time (NaN: none)
	Obs      int     // reads fed to the detector
	Reads    int     // reads made (on the kernel path, most stay in the kernel)
}

// Fed is the share of the reads that reached the detector.
func (r Result) Fed() float64 {
	if r.Reads == 0 {
		return 0
	}
	return float64(r.Obs) / float64(r.Reads)
}

// Recall is Found / MustFind (1 when nothing must be found).
func (r Result) Recall() float64 {
	if r.MustFind == 0 {
		return 1
	}
	return float64(r.Found) / float64(r.MustFind)
}

// FPRate is FalsePos / Quiet.
func (r Result) FPRate() float64 {
	if r.Quiet == 0 {
		return 0
	}
	return float64(r.FalsePos) / float64(r.Quiet)
}

// Workloads lists the workload names in table order.
var Workloads = []string{"zipf-0.99", "zipf-1.2", "band-0.8x-1.2x", "dense-10x", "uniform-1M", "uniform-0.5x", "step-2x", "multi-10x1.5x", "bytes-band-0.8x-1.2x", "rule-band-0.8x-1.2x"}

// BytesWorkload reports whether workload name is hot by reply bytes: its
// truth is bytes per second against a reply-bytes threshold, and only the
// detectors with a bytes stage run it (not Tair's).
func BytesWorkload(name string) bool { return strings.HasPrefix(name, "bytes-") }

// Run runs every workload on both detectors, and on the kernel path with
// p.Kernel.
func Run(p Params) ([]Result, error) {
	dets := []string{detect.DetectorDefault, detect.DetectorTair}
	if p.Kernel {
		dets = append(dets, DetectorKernel)
	}
	var out []Result
	for _, w := range Workloads {
		for _, det := range dets {
			if det == detect.DetectorTair && BytesWorkload(w) {
				continue
			}
			r, err := RunOne(p, w, det)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// source is one key with its own arrivals: a Poisson process of rate qps
// while on.
type source struct {
	key      string
	qps      float64
	on, off  int64 // ns since start
	next     int64
	firstHot int64 // -1 until reported
}

// workload is the truth of one run.
type workload struct {
	bgRate  float64
	bg      *alias // background key distribution (nil: none)
	bgProb  []float64
	sources []*source
	dur     int64
	// bgTruth: background keys count toward recall (the steady workloads;
	// the onset workloads measure their sources only).
	bgTruth bool
	// The bytes workloads: each background key's reply size (bytes per
	// read), and the reply-bytes threshold its truth is judged against.
	size     []uint32
	hotBytes float64
	// ruleQPS: every key's threshold is a rule's, this far below the
	// one the window is sized for; truth is judged against it.
	ruleQPS float64
}

const t0 = int64(1_700_000_000) * 1e9 // packet time origin: a realistic epoch

// band is the band workloads' key distribution: keys 0-99 read at 1.2 ×
// rate per second, keys 100-199 at 0.8 ×, the rest of p.Rate uniform over
// the other keys.
func band(p Params, name string, rate float64) ([]float64, error) {
	prob := make([]float64, p.Keys)
	for i := range 100 {
		prob[i] = 1.2 * rate / p.Rate
		prob[100+i] = 0.8 * rate / p.Rate
	}
	rest := (1 - 200*rate/p.Rate) / float64(p.Keys-200)
	if rest < 0 {
		return nil, fmt.Errorf("build %s: rate %v too low for 200 keys near %v/s", name, p.Rate, rate)
	}
	for i := 200; i < p.Keys; i++ {
		prob[i] = rest
	}
	return prob, nil
}

func build(p Params, name string, rng *rand.Rand) (*workload, error) {
	T := p.HotQPS
	dur := p.Duration.Nanoseconds()
	switch name {
	case "zipf-0.99", "zipf-1.2":
		s := 0.99
		if name == "zipf-1.2" {
			s = 1.2
		}
		prob := zipfProb(p.Keys, s)
		return &workload{bgRate: p.Rate, bg: newAlias(prob), bgProb: prob, dur: dur, bgTruth: true}, nil
	case "band-0.8x-1.2x":
		// The edge of the statistics: 100 keys at exactly 1.2× (must be
		// found) and 100 at exactly 0.8× (must not), over a uniform rest.
		prob, err := band(p, name, T)
		if err != nil {
			return nil, err
		}
		return &workload{bgRate: p.Rate, bg: newAlias(prob), bgProb: prob, dur: dur, bgTruth: true}, nil
	case "bytes-band-0.8x-1.2x":
		// The edge of the statistics by reply bytes: 100 keys at exactly
		// 1.2× a reply-bytes threshold (must be found) and 100 at exactly
		// 0.8× (must not), each read at a tenth of the reads threshold or
		// less with a 20 000-byte value, over a uniform rest of 100-byte
		// replies. No key is near the reads threshold.
		const big, small = 20000, 100
		hb := 0.1 * T * big
		prob, err := band(p, name, hb/big)
		if err != nil {
			return nil, err
		}
		size := make([]uint32, p.Keys)
		for i := range size {
			size[i] = small
		}
		for i := range 200 {
			size[i] = big
		}
		return &workload{bgRate: p.Rate, bg: newAlias(prob), bgProb: prob, dur: dur, bgTruth: true, size: size, hotBytes: hb}, nil
	case "rule-band-0.8x-1.2x":
		// band-0.8x-1.2x against a rule's threshold a tenth of --hot-qps
		// (the window is sized for --hot-qps): 100 keys at 1.2× the rule
		// (must be found), 100 at 0.8× (must not), read 96 and 64 times a
		// 400 ms window where the reads stage expects 800.
		prob, err := band(p, name, T/10)
		if err != nil {
			return nil, err
		}
		return &workload{bgRate: p.Rate, bg: newAlias(prob), bgProb: prob, dur: dur, bgTruth: true, ruleQPS: T / 10}, nil
	case "dense-10x":
		// Ten times the rate, uniform over the key space, so that every
		// bucket is located and its Space-Saving table churns, plus 10 keys
		// at 1.2× the threshold; half the duration to bound the run time.
		rate := 10 * p.Rate
		prob := make([]float64, p.Keys)
		for i := range 10 {
			prob[i] = 1.2 * T / rate
		}
		rest := (1 - 12*T/rate) / float64(p.Keys-10)
		for i := 10; i < p.Keys; i++ {
			prob[i] = rest
		}
		return &workload{bgRate: rate, bg: newAlias(prob), bgProb: prob, dur: dur / 2, bgTruth: true}, nil
	case "uniform-1M":
		prob := make([]float64, p.Keys)
		for i := range prob {
			prob[i] = 1 / float64(len(prob))
		}
		return &workload{bgRate: p.Rate, bg: newAlias(prob), bgProb: prob, dur: dur, bgTruth: true}, nil
	case "uniform-0.5x":
		// Every key at half the threshold: the skew a σ test sees, no key hot.
		n := int(p.Rate / (0.5 * T))
		prob := make([]float64, n)
		for i := range prob {
			prob[i] = 1 / float64(n)
		}
		return &workload{bgRate: p.Rate, bg: newAlias(prob), bgProb: prob, dur: dur, bgTruth: true}, nil
	case "step-2x", "multi-10x1.5x":
		// Background Zipf 0.99 at a fifth of the rate (its own hot keys
		// come and stay); onsets of fresh keys one after another, each on
		// for 0.5 s with a random phase, off for 0.5 s so it goes cold.
		per, qps := 1, 2*T
		if name == "multi-10x1.5x" {
			per, qps = 10, 1.5*T
		}
		prob := zipfProb(p.Keys, 0.99)
		w := &workload{bgRate: p.Rate / 5, bg: newAlias(prob), bgProb: prob}
		groups := max(p.Trials/per, 1)
		at := int64(500 * time.Millisecond)
		for g := range groups {
			on := at + rng.Int64N(int64(100*time.Millisecond))
			for i := range per {
				w.sources = append(w.sources, &source{
					key: "x:" + strconv.Itoa(g*per+i), qps: qps,
					on: on, off: on + int64(500*time.Millisecond),
				})
			}
			at += int64(time.Second)
		}
		w.dur = at
		return w, nil
	}
	return nil, fmt.Errorf("find workload %q: unknown", name)
}

type collector struct {
	first  map[string]int64
	events int
}

func (c *collector) Emit(e *event.Event) {
	c.events++
	if e.Type == event.TypeHot {
		if _, ok := c.first[string(e.Key)]; !ok {
			c.first[string(e.Key)] = e.TS.UnixNano() - t0
		}
	}
}

// RunOne runs one workload on one detector (DetectorKernel: the default
// detector on the kernel path).
func RunOne(p Params, name, det string) (Result, error) {
	rng := rand.New(rand.NewPCG(p.Seed, uint64(len(name))))
	w, err := build(p, name, rng)
	if err != nil {
		return Result{}, err
	}
	col := &collector{first: map[string]int64{}}
	cfgDet := det
	if det == DetectorKernel {
		cfgDet = detect.DetectorDefault
	}
	if w.size != nil && det == detect.DetectorTair {
		return Result{}, fmt.Errorf("run %s: the Tair detector has no reply-bytes stage", name)
	}
	cfg := detect.Config{HotQPS: p.HotQPS, HotBytes: w.hotBytes, Detector: cfgDet, Window: p.Window}
	if w.ruleQPS > 0 {
		cfg.Rules = []detect.Rule{{Pattern: "k:*", HotQPS: w.ruleQPS}}
	}
	d, err := detect.New(cfg, col)
	if err != nil {
		return Result{}, fmt.Errorf("run %s: %w", name, err)
	}
	kept := keptConns(p)
	var kern *kernelFeed
	if det == DetectorKernel {
		if kept != nil {
			return Result{}, fmt.Errorf("run %s: the kernel path does not simulate flow sampling", name)
		}
		kern = newKernelFeed(d, p.KernelRead.Nanoseconds())
	}
	if kept != nil {
		rate := samplelevel.Rate(p.SampleLevel)
		n := 0
		for _, k := range kept {
			if k {
				n++
			}
		}
		d.SetSampleRate(rate)
		d.SetSeenFraction(rate, float64(n)/float64(len(kept)))
	}
	flow := decode.Flow{
		Client: netip.MustParseAddrPort("10.0.0.9:40000"),
		Server: netip.MustParseAddrPort("10.0.0.5:6379"),
		Proto:  decode.ProtoRedis,
		// On the kernel path every read that reaches the detector was
		// counted by the programs (the pipeline sets it per record).
		KernelCounted: kern != nil,
	}
	req := decode.Request{Op: "GET", NS: 0}
	seen := make([]bool, len(w.bgProb))
	buf := make([]byte, 0, 32)
	for _, s := range w.sources {
		s.next = s.on + expGap(rng, s.qps)
		s.firstHot = -1
	}
	step := 1e9 / w.bgRate
	obs, reads := 0, 0
	for j := 0; ; j++ {
		ts := int64(float64(j) * step)
		if ts >= w.dur {
			break
		}
		// Sources due before this background read go first, in time order.
		for {
			var s *source
			for _, c := range w.sources {
				if c.next < c.off && c.next <= ts && (s == nil || c.next < s.next) {
					s = c
				}
			}
			if s == nil {
				break
			}
			flow.TS = t0 + s.next
			buf = append(buf[:0], s.key...)
			reads++
			if kern != nil {
				if kern.count(s.next, &flow, req.NS, buf, 1, 0) {
					d.Key(&flow, &req, decode.Key{Bytes: buf, Weight: 1})
					obs++
				}
			} else if kept == nil || kept[rng.IntN(len(kept))] {
				d.Key(&flow, &req, decode.Key{Bytes: buf, Weight: 1})
				obs++
			}
			s.next += expGap(rng, s.qps)
		}
		k := w.bg.sample(rng)
		seen[k] = true
		reads++
		if kept != nil && !kept[rng.IntN(len(kept))] {
			continue
		}
		flow.TS = t0 + ts
		buf = strconv.AppendInt(append(buf[:0], "k:"...), int64(k), 10)
		var size uint32
		if w.size != nil {
			size = w.size[k]
		}
		if kern != nil && !kern.count(ts, &flow, req.NS, buf, 1, size) {
			continue
		}
		d.Key(&flow, &req, decode.Key{Bytes: buf, Weight: 1})
		if size > 0 {
			// The reply, right after its request: user space pairs it
			// and gives its bytes to the key.
			d.ReplyKey(&flow, req.NS, decode.Key{Bytes: buf, Weight: 1}, uint64(size))
		}
		obs++
	}
	if kern != nil {
		kern.advance(w.dur)
	}
	d.Tick(t0 + w.dur)

	r := Result{Workload: name, Detector: det, Events: col.events, Obs: obs, Reads: reads}
	T := p.HotQPS
	switch {
	case w.size != nil:
		T = w.hotBytes
	case w.ruleQPS > 0:
		T = w.ruleQPS
	}
	for k, pk := range w.bgProb {
		rate := pk * w.bgRate
		if w.size != nil {
			rate *= float64(w.size[k]) // bytes per second
		}
		_, hot := col.first["k:"+strconv.Itoa(k)]
		switch {
		case rate >= 1.2*T:
			if !w.bgTruth {
				continue
			}
			r.MustFind++
			if hot {
				r.Found++
			}
		case rate <= 0.8*T && seen[k]:
			r.Quiet++
			if hot {
				r.FalsePos++
			}
			if rate >= 0.5*T {
				r.Near++
				if hot {
					r.NearFP++
				}
			}
		}
	}
	var lat []float64
	for _, s := range w.sources {
		// Sources are on at >= 1.2× threshold: they must be found while on.
		r.MustFind++
		r.Onsets++
		at, ok := col.first[s.key]
		if ok && at < s.off {
			r.Found++
			lat = append(lat, float64(at-s.on)/1e6)
		} else {
			r.Missed++
		}
	}
	for key := range col.first {
		if strings.HasPrefix(key, "x:") || strings.HasPrefix(key, "k:") {
			continue
		}
		return r, fmt.Errorf("run %s: reported unknown key %q", name, key)
	}
	r.P50, r.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return r, nil
}

// keptConns says which of p.Conns connections flow sampling keeps (nil:
// all). As in the eBPF programs, a connection is kept when the top 16 bits
// of a hash of it are below the level's threshold: how many are kept
// varies around Conns × rate, as it does on a real server.
func keptConns(p Params) []bool {
	if p.SampleLevel == 0 {
		return nil
	}
	conns := max(p.Conns, 1)
	kept := make([]bool, conns)
	keep := uint64(samplelevel.KeepAt(p.SampleLevel))
	for i := range kept {
		h := uint64(i)*0x9E3779B97F4A7C15 ^ p.Seed*0xC2B2AE3D27D4EB4F
		h ^= h >> 31
		h *= 0xBF58476D1CE4E5B9
		h ^= h >> 29
		kept[i] = h>>48 < keep
	}
	return kept
}

func expGap(rng *rand.Rand, qps float64) int64 {
	return int64(rng.ExpFloat64() / qps * 1e9)
}

// percentile is the nearest-rank percentile, NaN for no data.
func percentile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	i := int(math.Ceil(q*float64(len(v)))) - 1
	return v[min(max(i, 0), len(v)-1)]
}

// zipfProb returns P(rank k) ∝ (k+1)^-s over n keys.
func zipfProb(n int, s float64) []float64 {
	p := make([]float64, n)
	var sum float64
	for k := range p {
		p[k] = math.Pow(float64(k+1), -s)
		sum += p[k]
	}
	for k := range p {
		p[k] /= sum
	}
	return p
}

// alias samples a discrete distribution in O(1) (Vose's method); Go's
// rand.Zipf needs s > 1 and the s = 0.99 workload is below that.
type alias struct {
	prob  []float64
	alias []int32
}

func newAlias(p []float64) *alias {
	n := len(p)
	a := &alias{prob: make([]float64, n), alias: make([]int32, n)}
	scaled := make([]float64, n)
	var small, large []int32
	for i, x := range p {
		scaled[i] = x * float64(n)
		if scaled[i] < 1 {
			small = append(small, int32(i))
		} else {
			large = append(large, int32(i))
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s, l := small[len(small)-1], large[len(large)-1]
		small = small[:len(small)-1]
		a.prob[s], a.alias[s] = scaled[s], l
		scaled[l] -= 1 - scaled[s]
		if scaled[l] < 1 {
			large = large[:len(large)-1]
			small = append(small, l)
		}
	}
	for _, i := range large {
		a.prob[i] = 1
	}
	for _, i := range small {
		a.prob[i] = 1
	}
	return a
}

func (a *alias) sample(rng *rand.Rand) int {
	i := rng.IntN(len(a.prob))
	if rng.Float64() < a.prob[i] {
		return i
	}
	return int(a.alias[i])
}

// Table formats results as a markdown table, default and tair side by side.
func Table(p Params, rs []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Threshold %.0f req/s, background %.0f req/s, %d keys, seed %d.\n\n", p.HotQPS, p.Rate, p.Keys, p.Seed)
	if p.Kernel {
		b.WriteString(kernelNote(p) + "\n\n")
	}
	b.WriteString("| workload | detector | recall ≥1.2× | false pos ≤0.8× | FP rate | FP at 0.5–0.8× | events | onset p50 | onset p99 | reads to the detector |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %s | %.3f (%d/%d) | %d / %d | %.4f%% | %d / %d | %d | %s | %s | %s |\n",
			r.Workload, r.Detector, r.Recall(), r.Found, r.MustFind, r.FalsePos, r.Quiet,
			100*r.FPRate(), r.NearFP, r.Near, r.Events, ms(r.P50, r.Onsets), ms(r.P99, r.Onsets), pct(r.Fed()))
	}
	return b.String()
}

// pct formats a share as a percentage with the digits a small one needs.
func pct(v float64) string {
	switch {
	case v >= 0.1 || v == 0:
		return fmt.Sprintf("%.0f%%", 100*v)
	case v >= 0.001:
		return fmt.Sprintf("%.2f%%", 100*v)
	default:
		return fmt.Sprintf("%.4f%%", 100*v)
	}
}

func ms(v float64, n int) string {
	if n == 0 {
		return "–"
	}
	if math.IsNaN(v) {
		return "none found"
	}
	return fmt.Sprintf("%.0f ms", v)
}

// SamplingWorkloads are the workloads of the sampling table: the band at
// the statistical edge, a skewed mix, and onsets.
var SamplingWorkloads = []string{"band-0.8x-1.2x", "zipf-0.99", "step-2x", "multi-10x1.5x"}

// SamplingCase is one row of the sampling table.
type SamplingCase struct {
	Level  uint8 // samplelevel.Rate
	Conns  int
	Window time.Duration // 0: the default
}

// RunSampling runs the sampling workloads on the default detector for each
// case.
func RunSampling(p Params, cases []SamplingCase) ([]Result, []SamplingCase, error) {
	var out []Result
	var at []SamplingCase
	for _, c := range cases {
		q := p
		q.SampleLevel, q.Conns, q.Window = c.Level, c.Conns, c.Window
		if c.Window > 0 {
			// Three windows at least, so rates are measured over full ones.
			q.Duration = max(q.Duration, 3*c.Window)
		}
		for _, w := range SamplingWorkloads {
			r, err := RunOne(q, w, detect.DetectorDefault)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, r)
			at = append(at, c)
		}
	}
	return out, at, nil
}

// SamplingTable formats RunSampling's results.
func SamplingTable(p Params, rs []Result, at []SamplingCase) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Default detector, threshold %.0f req/s, background %.0f req/s, %d keys, seed %d; reads spread uniformly over the connections.\n\n", p.HotQPS, p.Rate, p.Keys, p.Seed)
	b.WriteString("| sampling | window | connections | workload | recall ≥1.2× | false pos ≤0.8× | FP at 0.5–0.8× | onset p50 | onset p99 |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for i, r := range rs {
		c := at[i]
		win := "default"
		if c.Window > 0 {
			win = c.Window.String()
		}
		fmt.Fprintf(&b, "| 1/%.4g | %s | %d | %s | %.3f (%d/%d) | %d / %d | %d / %d | %s | %s |\n",
			1/samplelevel.Rate(c.Level), win, c.Conns, r.Workload, r.Recall(), r.Found, r.MustFind, r.FalsePos, r.Quiet,
			r.NearFP, r.Near, ms(r.P50, r.Onsets), ms(r.P99, r.Onsets))
	}
	return b.String()
}
