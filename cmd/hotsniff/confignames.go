package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/hotsniff/hotsniff/detect"
)

// Configuration keys have one documented spelling, the flag name
// (hot-qps, cold-ratio, tair-sample-max), in the file, the environment
// (HOTSNIFF_HOT_QPS) and on the command line. Earlier documents used
// snake_case (hot_qps, refresh_every) and a nested tair: {sample_max: ...}
// block; both are still accepted, so no working file breaks.

// registerTuning adds the detector's tuning flags (every setting of
// docs/detection.md) to fs, with the detector's defaults.
func registerTuning(fs *pflag.FlagSet, c *detect.Config) {
	fs.DurationVar(&c.TTL, "ttl", 60*time.Second, "how long a client may treat a key as hot without a refresh (ttl_ms), and the lifetime of a hot key no longer read")
	fs.DurationVar(&c.RefreshEvery, "refresh-every", 0, "send a key that stays hot again (a refresh) at most this often (0: ttl/2)")
	fs.DurationVar(&c.Window, "window", 0, "rate measurement window (0: chosen from --hot-qps, 800/hot-qps seconds within [400ms, 20s])")
	fs.Float64Var(&c.ColdRatio, "cold-ratio", 0.7, "a hot key turns cold when its rate falls below this fraction of its threshold, in (0, 1]")
	fs.IntVar(&c.Buckets, "buckets", 4096, "hash buckets of the default detector, a power of two in [16, 2^20]; raise it above total reads/s ÷ (8 × hot-qps)")
	fs.IntVar(&c.MaxHot, "max-hot", 1024, "most keys hot at once (the least recently read is dropped, announced cold)")
	fs.DurationVar(&c.InvalidateGap, "invalidate-gap", 10*time.Millisecond, "at most one invalidate per key per gap: writes within it are merged into one more, sent when it ends (the last write is always invalidated)")
	fs.DurationVar(&c.LocalTTL, "local-ttl", 50*time.Millisecond, "the client shims' local TTL; the cacheable verdict is judged against it")
	fs.Float64Var(&c.UncacheableWrites, "uncacheable-writes", 1, "publish a hot key cacheable:false when its writes per local-ttl reach this (shims stop caching it, its writes stop producing invalidates; negative: never)")
	fs.Float64Var(&c.AbsorbedCap, "absorbed-cap", 1000, "reads that client shims report having served locally are credited to a key up to this many times its threshold per second")
	fs.Float64Var(&c.AbsorbedClientCap, "absorbed-client-cap", 16, "reads that one client (one address) reports having served locally are credited to a key up to this many times its threshold per second")
	fs.DurationVar(&c.AbsorbedHold, "absorbed-hold", 2*time.Minute, "longest one client's reports alone may keep a key hot; then its reports for that key stop counting until the key is detected again on the wire")
	fs.IntVar(&c.Tair.Buckets, "tair-buckets", 1024, "--detector tair: hash buckets")
	fs.IntVar(&c.Tair.SampleMax, "tair-sample-max", 50000, "--detector tair: reads sampled per round")
	fs.Float64Var(&c.Tair.SigmaN, "tair-sigma-n", 0.8, "--detector tair: a round locates a bucket when the counts' standard deviation exceeds this × their mean")
	fs.IntVar(&c.Tair.ReapMax, "tair-reap-max", 32, "--detector tair: reads of a located bucket collected before picking its key")
}

// normalizeConfig returns the file's top-level keys in their one spelling:
// underscores become dashes and a nested tair: block becomes tair-* keys.
// The same setting given twice (hot_qps and hot-qps) is an error.
func normalizeConfig(path string, file map[string]any) (map[string]any, error) {
	out := make(map[string]any, len(file))
	from := map[string]string{}
	var dup []string
	put := func(orig, key string, v any) {
		if prev, ok := from[key]; ok {
			dup = append(dup, fmt.Sprintf("%q and %q are the same setting", prev, orig))
			return
		}
		from[key], out[key] = orig, v
	}
	keys := make([]string, 0, len(file))
	for k := range file {
		keys = append(keys, k)
	}
	sort.Strings(keys) // a stable message when a setting is given twice
	for _, k := range keys {
		v := file[k]
		key := strings.ReplaceAll(k, "_", "-")
		if m, ok := v.(map[string]any); ok && key == "tair" {
			tks := make([]string, 0, len(m))
			for tk := range m {
				tks = append(tks, tk)
			}
			sort.Strings(tks) // as above
			for _, tk := range tks {
				put(k+"."+tk, "tair-"+strings.ReplaceAll(tk, "_", "-"), m[tk])
			}
			continue
		}
		put(k, key, v)
	}
	if len(dup) > 0 {
		sort.Strings(dup)
		return nil, usagef("config %s: %s: keep one", path, strings.Join(dup, "; "))
	}
	return out, nil
}

// ruleSpec is a rule as written in the file: hot-qps, or hot_qps as
// earlier documents had it. Unknown fields are errors: a misspelt
// threshold must not silently leave a rule at the default.
type ruleSpec struct {
	Pattern   string   `yaml:"pattern"`
	HotQPS    *float64 `yaml:"hot-qps"`
	HotQPSOld *float64 `yaml:"hot_qps"`
	// HotBytes is the rule's reply-bytes threshold (hot-bytes, or
	// hot_bytes like hot_qps).
	HotBytes    *float64 `yaml:"hot-bytes"`
	HotBytesOld *float64 `yaml:"hot_bytes"`
	Proto       string   `yaml:"proto"`
}

// rulesFile is the part of --config that is not flags (those are applied
// by applyConfig).
type rulesFile struct {
	Rules  []ruleSpec     `yaml:"rules"`
	Ignore []string       `yaml:"ignore"`
	Flags  map[string]any `yaml:",inline"`
}

// loadRules reads the rules and the ignore list of the config file.
func loadRules(path string) ([]detect.Rule, []string, error) {
	if path == "" {
		return nil, nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, usagef("read config: %v", err)
	}
	var rf rulesFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, usagef("config %s: %s", path, yamlMessage(err))
	}
	rules := make([]detect.Rule, 0, len(rf.Rules))
	for i, r := range rf.Rules {
		dr := detect.Rule{Pattern: r.Pattern, Proto: r.Proto}
		switch {
		case r.HotQPS != nil && r.HotQPSOld != nil:
			return nil, nil, usagef("config %s: rule %d (%s): hot-qps and hot_qps are the same setting: keep one", path, i, r.Pattern)
		case r.HotQPS != nil:
			dr.HotQPS = *r.HotQPS
		case r.HotQPSOld != nil:
			dr.HotQPS = *r.HotQPSOld
		}
		switch {
		case r.HotBytes != nil && r.HotBytesOld != nil:
			return nil, nil, usagef("config %s: rule %d (%s): hot-bytes and hot_bytes are the same setting: keep one", path, i, r.Pattern)
		case r.HotBytes != nil:
			dr.HotBytes = *r.HotBytes
		case r.HotBytesOld != nil:
			dr.HotBytes = *r.HotBytesOld
		}
		rules = append(rules, dr)
	}
	return rules, rf.Ignore, nil
}

// yamlReplacer words the YAML decoder's type errors for the config file's
// reader, who knows rules and lists, not Go types.
var yamlReplacer = strings.NewReplacer(
	"yaml: unmarshal errors:", "",
	"field ", "unknown field ",
	" not found in type main.ruleSpec", " in a rule (want pattern, hot-qps, proto)",
	"into float64", "into a number",
	"into []main.ruleSpec", "into a list of rules ({pattern: ..., hot-qps: ...})",
	"into main.ruleSpec", "into a rule ({pattern: ..., hot-qps: ...})",
	"into []string", "into a list of patterns",
	"into string", "into text",
	"cannot unmarshal !!str", "cannot read the text",
	"cannot unmarshal !!int", "cannot read the number",
	"cannot unmarshal !!float", "cannot read the number",
	"cannot unmarshal !!map", "cannot read a map",
	"cannot unmarshal !!seq", "cannot read a list",
	"cannot unmarshal !!bool", "cannot read the boolean",
)

func yamlMessage(err error) string {
	return strings.Join(strings.Fields(yamlReplacer.Replace(err.Error())), " ")
}

// pflagInvalid matches pflag's message for a value that does not parse.
var pflagInvalid = regexp.MustCompile(`^invalid argument "(.*)" for "(?:-\w, )?--([\w-]+)" flag: `)

// flagErrorFunc turns pflag's parse errors, which quote Go's strconv
// ("strconv.ParseFloat: parsing ..."), into one line saying what the flag
// expects.
func flagErrorFunc(cmd *cobra.Command, err error) error {
	if m := pflagInvalid.FindStringSubmatch(err.Error()); m != nil {
		if f := cmd.Flags().Lookup(m[2]); f != nil {
			return usagef("--%s %q: %s", m[2], m[1], expects(f))
		}
	}
	return usageError{err}
}

// expects says, in words, what value a flag takes.
func expects(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "float64", "float32":
		return "want a number (e.g. " + exampleOr(f, "1000") + ")"
	case "int", "int64", "int32", "uint", "uint64", "uint32", "uint16", "uint8", "int16", "int8":
		return "want a whole number (e.g. " + exampleOr(f, "1024") + ")"
	case "duration":
		return "want a duration such as 500ms, 30s or 2m (e.g. " + exampleOr(f, "1s") + ")"
	case "bool":
		return "want true or false"
	}
	return "invalid value"
}

func exampleOr(f *pflag.Flag, fallback string) string {
	if d := f.DefValue; d != "" && d != "0" && d != "0s" {
		return d
	}
	return fallback
}

// tuningSummary is one line of every detector setting, for --config-check.
func tuningSummary(c detect.Config) string {
	or := func(d time.Duration, zero string) string {
		if d == 0 {
			return zero
		}
		return d.String()
	}
	hb := ""
	if c.HotBytes > 0 {
		hb = ", hot-bytes " + strconv.FormatFloat(c.HotBytes, 'g', -1, 64)
	}
	return fmt.Sprintf("detector %s: ttl %s, refresh-every %s, window %s, cold-ratio %g, buckets %d, max-hot %d, invalidate-gap %s, tair-buckets %d, tair-sample-max %d, tair-sigma-n %g, tair-reap-max %d%s",
		c.Detector, or(c.TTL, "60s"), or(c.RefreshEvery, "ttl/2"), or(c.Window, "auto"), c.ColdRatio, c.Buckets, c.MaxHot,
		or(c.InvalidateGap, "1ms"), c.Tair.Buckets, c.Tair.SampleMax, c.Tair.SigmaN, c.Tair.ReapMax, hb)
}
