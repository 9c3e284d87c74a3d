package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/capture/tunnel"
	"github.com/hotsniff/hotsniff/decode"
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/publish"
	"github.com/hotsniff/hotsniff/stream"
)

// EnvPrefix starts every environment variable hotsniff reads:
// HOTSNIFF_HOT_QPS for --hot-qps.
const EnvPrefix = "HOTSNIFF_"

// ConfigFlag is the flag (and HOTSNIFF_CONFIG) naming the YAML file.
const ConfigFlag = "config"

// Error is a configuration error: the user's to fix, one line saying how.
type Error struct{ msg string }

func (e *Error) Error() string { return e.msg }

func errorf(format string, a ...any) error { return &Error{fmt.Sprintf(format, a...)} }

// Register adds the named settings to fs as flags bound to c, with c's
// current values (Default()'s, normally) as their defaults. It also adds
// --config. Names not in the table are a programming error.
func Register(fs *pflag.FlagSet, c *Config, names ...string) {
	if fs.Lookup(ConfigFlag) == nil {
		fs.StringVar(&c.File, ConfigFlag, "", "YAML file holding any of the flags (by name) plus detection rules; flags override it, HOTSNIFF_* variables override the file")
	}
	for _, n := range names {
		s := lookup(n)
		if s == nil {
			panic("config: no setting " + n)
		}
		switch p := s.field(c).(type) {
		case *string:
			fs.StringVar(p, s.name, *p, s.usage)
		case *bool:
			fs.BoolVar(p, s.name, *p, s.usage)
		case *int:
			fs.IntVar(p, s.name, *p, s.usage)
		case *float64:
			fs.Float64Var(p, s.name, *p, s.usage)
		case *time.Duration:
			fs.DurationVar(p, s.name, *p, s.usage)
		case *[]string:
			fs.StringArrayVar(p, s.name, *p, s.usage)
		default:
			panic(fmt.Sprintf("config: setting %s has an unsupported type %T", s.name, p))
		}
	}
}

// Load fills the flags of fs the user did not set from, in rising
// precedence, the YAML file (--config or HOTSNIFF_CONFIG) and HOTSNIFF_*
// environment variables, reads the rules and ignore lists of the file,
// then validates the sections whose settings fs carries. The file is read
// once. Keys of the file and variables that no command knows are errors
// (file) or warnings (environment: other tools share the prefix less
// often than people misspell it), returned for the caller to log.
//
// commandFlags names the flags commands register themselves (not settings
// of the table): the file and the environment may set those too, so they
// are known keys.
func Load(fs *pflag.FlagSet, c *Config, environ, commandFlags []string) (warnings []string, err error) {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, EnvPrefix) {
			env[k] = v
		}
	}
	if c.File == "" {
		c.File = env[EnvPrefix+"CONFIG"]
	}
	file, rules, ignore, err := readFile(c.File, commandFlags)
	if err != nil {
		return nil, err
	}
	var errs []string
	fromFile := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == ConfigFlag || f.Name == "help" {
			return
		}
		name := EnvName(f.Name)
		// fs.Set, not f.Value.Set: the flag is then marked as set, so a
		// command can tell a setting given anywhere from its default.
		if v, ok := env[name]; ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Sprintf("%s=%q: %s", name, v, Expects(f)))
			}
			return
		}
		v, ok := file[f.Name]
		if !ok {
			return
		}
		fromFile[f.Name] = true
		vals := []any{v}
		if l, isList := v.([]any); isList {
			vals = l
		}
		for _, x := range vals {
			if err := fs.Set(f.Name, fmt.Sprint(x)); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %s: %q: %s", c.File, f.Name, fmt.Sprint(x), Expects(f)))
			}
		}
	})
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, errorf("config: %s", strings.Join(errs, "; "))
	}
	for name := range env {
		if !knownEnv(name, commandFlags) {
			warnings = append(warnings, fmt.Sprintf("environment variable %s is not a hotsniff setting and is ignored%s", name, suggestEnv(name)))
		}
	}
	sort.Strings(warnings)
	c.Detect.Rules, c.Detect.Ignore = rules, ignore
	if fs.Lookup("node") != nil && c.Detect.Node == "" {
		c.Detect.Node, _ = os.Hostname()
	}
	if err := c.validate(fs, fromFile); err != nil {
		return warnings, err
	}
	if w := c.kernelBytesWarning(); w != "" {
		warnings = append(warnings, w)
	}
	return warnings, nil
}

// kernelBytesWarning says which ports lose hot-by-bandwidth detection
// under kernel counting: the programs frame only Redis replies, so the
// keys of memcached and Tair ports can be hot by their reads only. Not an
// error: a node with Redis and memcached ports may want the cheaper
// counting for both and bandwidth for Redis alone.
func (c *Config) kernelBytesWarning() string {
	if !c.Capture.KernelCounting() {
		return ""
	}
	set := HotBytesSet(c.Detect.Config)
	if set == "" {
		return ""
	}
	ports, err := c.Stream.PortMap()
	if err != nil {
		return ""
	}
	var others []string
	for _, p := range ports.List() {
		if pr := ports.Lookup(p); pr == decode.ProtoMemcache || pr == decode.ProtoTair {
			others = append(others, fmt.Sprintf("%s=%d", pr, p))
		}
	}
	if len(others) == 0 {
		return ""
	}
	return fmt.Sprintf("--kernel-count measures reply bytes on Redis ports only: keys on %s can be hot by their reads but not by their bytes (%s); set --kernel-count=false to measure them, or list only Redis ports with --port",
		strings.Join(others, ", "), set)
}

// EnvName is the environment variable of a setting: HOTSNIFF_HOT_QPS.
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// otherEnv are variables of the project's own that are not settings: the
// config file, and the switches of its test and measurement harnesses
// (docs/performance.md), which a developer may have exported while
// running the daemon.
var otherEnv = func() []string {
	out := []string{EnvPrefix + "CONFIG"}
	for _, n := range []string{"ROUNDS", "FIGURES", "REPLIES", "COST", "RUN_ARGS", "FANOUT", "FANOUT_ROWS", "FANOUT_CLUSTER",
		"NODE_CLIENT", "MEMTEST", "MEASURE", "FLEET_SECONDS", "FLEET_APP", "FLEET_REPORT", "COUNT_RSS_KEYS", "COUNT_KEYS",
		"BIN_BEFORE", "BIN", "FORCE_CLSACT", "CONFORMANCE_SHIMS", "CONFORMANCE_ADAPTER", "MODES", "CHILD_NS", "CHILD_MODE",
		"CHILD_IFACE", "BUDGET_NICE", "BUDGET_DURATION", "BUDGET_EVENTS", "ARTIFACTS", "PYTHON",
		"RESTART_APP", "RESTART_ROUNDS", "RESTART_VARIANTS", "MEASURE_START", "NODE_DIR", "NODE_DIST"} {
		out = append(out, EnvPrefix+n)
	}
	return out
}()

// knownEnv reports whether a HOTSNIFF_ variable names a setting or a flag
// of any command (commands register their own flags too).
func knownEnv(name string, commandFlags []string) bool {
	if slices.Contains(otherEnv, name) || strings.HasPrefix(name, EnvPrefix+"TEST_") {
		return true
	}
	for _, s := range settings {
		if EnvName(s.name) == name {
			return true
		}
	}
	for _, n := range commandFlags {
		if EnvName(n) == name {
			return true
		}
	}
	return false
}

func suggestEnv(name string) string {
	want := strings.TrimPrefix(name, EnvPrefix)
	best, bestD := "", 3
	for _, s := range settings {
		k := strings.TrimPrefix(EnvName(s.name), EnvPrefix)
		if d := editDistance(want, k); d < bestD {
			best, bestD = EnvName(s.name), d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// readFile reads the YAML file once: its flag keys (normalised to their
// one spelling), its rules and its ignore list.
func readFile(path string, commandFlags []string) (flags map[string]any, rules []detect.Rule, ignore []string, err error) {
	flags = map[string]any{}
	if path == "" {
		return flags, nil, nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, nil, errorf("read config: %v (check the path given to --config)", err)
	}
	raw := map[string]any{}
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, nil, nil, errorf("parse config %s: %v", path, err)
	}
	if flags, err = normalize(path, raw); err != nil {
		return nil, nil, nil, err
	}
	if err := checkKeys(path, flags, commandFlags); err != nil {
		return nil, nil, nil, err
	}
	rules, ignore, err = decodeRules(path, b)
	if err != nil {
		return nil, nil, nil, err
	}
	delete(flags, "rules")
	delete(flags, "ignore")
	return flags, rules, ignore, nil
}

// nonFlagKeys are the config file keys that are not flags.
var nonFlagKeys = map[string]bool{"rules": true, "ignore": true}

// checkKeys rejects keys no command knows, so a typo ("hot_qps" is fine,
// "ifaces" is not) is an error rather than a setting silently ignored.
// Keys of other commands' flags are accepted: one file can serve run,
// replay and top.
func checkKeys(path string, file map[string]any, commandFlags []string) error {
	known := map[string]bool{}
	for _, s := range settings {
		known[s.name] = true
	}
	for _, n := range commandFlags {
		known[n] = true
	}
	var bad []string
	for k := range file {
		if known[k] || nonFlagKeys[k] {
			continue
		}
		msg := fmt.Sprintf("unknown key %q", k)
		if alt := strings.ReplaceAll(strings.ToLower(k), "_", "-"); known[alt] {
			msg += fmt.Sprintf(" (did you mean %q?)", alt)
		}
		bad = append(bad, msg)
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return errorf("config %s: %s", path, strings.Join(bad, "; "))
	}
	return nil
}

// Configuration keys have one documented spelling, the flag name
// (hot-qps, cold-ratio, tair-sample-max), in the file, the environment
// (HOTSNIFF_HOT_QPS) and on the command line. Earlier documents used
// snake_case (hot_qps, refresh_every) and a nested tair: {sample_max: ...}
// block; both are still accepted, so no working file breaks.

// normalize returns the file's top-level keys in their one spelling:
// underscores become dashes and a nested tair: block becomes tair-* keys.
// The same setting given twice (hot_qps and hot-qps) is an error.
func normalize(path string, file map[string]any) (map[string]any, error) {
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
		return nil, errorf("config %s: %s: keep one", path, strings.Join(dup, "; "))
	}
	return out, nil
}

// ruleSpec is a rule as written in the file: hot-qps, or hot_qps as
// earlier documents had it. Unknown fields are errors: a misspelt
// threshold must not silently leave a rule at the default.
type ruleSpec struct {
	Pattern     string   `yaml:"pattern"`
	HotQPS      *float64 `yaml:"hot-qps"`
	HotQPSOld   *float64 `yaml:"hot_qps"`
	HotBytes    *float64 `yaml:"hot-bytes"`
	HotBytesOld *float64 `yaml:"hot_bytes"`
	Proto       string   `yaml:"proto"`
}

// rulesFile is the part of the file that is not flags.
type rulesFile struct {
	Rules  []ruleSpec     `yaml:"rules"`
	Ignore []string       `yaml:"ignore"`
	Flags  map[string]any `yaml:",inline"`
}

func decodeRules(path string, b []byte) ([]detect.Rule, []string, error) {
	var rf rulesFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, errorf("config %s: %s", path, yamlMessage(err))
	}
	rules := make([]detect.Rule, 0, len(rf.Rules))
	for i, r := range rf.Rules {
		dr := detect.Rule{Pattern: r.Pattern, Proto: r.Proto}
		switch {
		case r.HotQPS != nil && r.HotQPSOld != nil:
			return nil, nil, errorf("config %s: rule %d (%s): hot-qps and hot_qps are the same setting: keep one", path, i, r.Pattern)
		case r.HotQPS != nil:
			dr.HotQPS = *r.HotQPS
		case r.HotQPSOld != nil:
			dr.HotQPS = *r.HotQPSOld
		}
		switch {
		case r.HotBytes != nil && r.HotBytesOld != nil:
			return nil, nil, errorf("config %s: rule %d (%s): hot-bytes and hot_bytes are the same setting: keep one", path, i, r.Pattern)
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
	" not found in type config.ruleSpec", " in a rule (want pattern, hot-qps, hot-bytes, proto)",
	"into float64", "into a number",
	"into []config.ruleSpec", "into a list of rules ({pattern: ..., hot-qps: ...})",
	"into config.ruleSpec", "into a rule ({pattern: ..., hot-qps: ...})",
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

// Expects says, in words, what value a flag takes.
func Expects(f *pflag.Flag) string {
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

// validate checks the sections whose settings fs carries: the one
// validation of every setting.
func (c *Config) validate(fs *pflag.FlagSet, fromFile map[string]bool) error {
	has := func(sec string) bool {
		for _, n := range Section(sec) {
			if fs.Lookup(n) != nil {
				return true
			}
		}
		return false
	}
	if has(SecStream) {
		if _, err := c.Stream.PortMap(); err != nil {
			if fromFile["port"] {
				return errorf("config %s: %v", c.File, err)
			}
			return err
		}
		if err := c.Stream.Config.Validate(); err != nil {
			return &Error{err.Error()}
		}
		switch c.Stream.Progress {
		case "auto", "always", "never":
		default:
			return errorf("--progress %q: want auto, always or never", c.Stream.Progress)
		}
	}
	var det *detect.Detector // the settings' detector, once built (kernel counting's checks below)
	if has(SecDetect) && fs.Lookup("hot-qps") != nil {
		if fs.Lookup("output") != nil && c.Detect.Output != publish.FormatJSONL && c.Detect.Output != publish.FormatText {
			return errorf("--output %q: want jsonl or text", c.Detect.Output)
		}
		d, err := detect.New(c.Detect.Config, nil)
		if err != nil {
			return &Error{err.Error()}
		}
		det = d
	}
	if has(SecPublish) {
		if u := c.Publish.RedisURL; u != "" {
			if !strings.Contains(u, "://") {
				return errorf("--redis-url %q: want a URL such as redis://%s (rediss:// for TLS)", u, u)
			}
			if _, err := publish.ParseURL(u); err != nil {
				return &Error{err.Error()}
			}
		}
		if fs.Lookup("channel") != nil && c.Publish.Channel == "" {
			return errorf("--channel must not be empty")
		}
		if fs.Lookup("channel-format") != nil {
			if _, err := publish.ParseFormat(c.Publish.Format); err != nil {
				return errorf("--channel-format: %v", err)
			}
		}
		if c.Publish.Budget < 0 || math.IsNaN(c.Publish.Budget) {
			return errorf("--channel-budget %g: must be 0 (no cap) or positive", c.Publish.Budget)
		}
	}
	if has(SecHTTP) {
		if c.HTTP.MaxConns < 1 {
			return errorf("--http-max-conns %d: must be at least 1", c.HTTP.MaxConns)
		}
		if c.HTTP.IdleTimeout <= 0 {
			return errorf("--http-idle-timeout %s: must be positive", c.HTTP.IdleTimeout)
		}
	}
	if has(SecCapture) {
		k := c.Capture
		if _, err := tunnel.Parse(k.Decap); err != nil {
			return &Error{err.Error()}
		}
		if k.ReplyCopy < 0 {
			return errorf("--reply-copy %d: must be 0 (no reply payload) or a number of bytes", k.ReplyCopy)
		}
		if k.Nice < -20 || k.Nice > 19 {
			return errorf("--nice %d: must be between -20 and 19", k.Nice)
		}
		if k.NoTrafficWarn < 0 {
			return errorf("--no-traffic-warn %v: must not be negative (0: never)", k.NoTrafficWarn)
		}
		if math.IsNaN(k.MaxCPU) || k.MaxCPU < 0 || k.MaxCPU > 1024 {
			return errorf("--max-cpu %g: want a share of one core such as 0.05 (5 %%), or 0 for no budget", k.MaxCPU)
		}
		// With kernel counting the programs copy no reply but those of the
		// requests they copy (a reply of a request kept in the kernel would
		// pair with the wrong request), so --capture-replies would be
		// silently off: refused here, where --config-check sees it too.
		if k.KernelCounting() && k.Replies {
			return errorf("--kernel-count copies no replies, so --capture-replies would do nothing: remove one of them")
		}
		// --reply-copy 0 passes on no reply payload either: on eBPF capture
		// no reply bytes reach keys, and a reply-bytes threshold would be
		// silently off (AF_PACKET copies whole packets and ignores it).
		if has(SecDetect) && !k.KernelCounting() && !k.Replies && k.ReplyCopy == 0 && bpf.Mode(k.Mode) != bpf.ModeAFPacket {
			if set := HotBytesSet(c.Detect.Config); set != "" {
				return errorf("--reply-copy 0 copies no reply payload, so %s would never make a key hot: remove --reply-copy 0 (the default copies reply heads) or the reply-bytes threshold", set)
			}
		}
		if has(SecDetect) && k.KernelCounting() {
			if c.Detect.Detector == detect.DetectorTair {
				return errorf("--kernel-count needs the default detector, not %q: remove --detector or set --kernel-count=false", c.Detect.Detector)
			}
			if det == nil {
				det, _ = detect.New(c.Detect.Config, nil) // invalid: reported by the detection checks
			}
			if d := det; d != nil {
				if b := d.Config().Buckets; b > bpf.KernelBuckets {
					return errorf("--kernel-count counts at most %d buckets: set --buckets %d or less, or --kernel-count=false", bpf.KernelBuckets, bpf.KernelBuckets)
				}
				// A kernel bucket counts at most bpf.KernelMaxBucketCount
				// reads per CPU and sub-window: a key at any threshold
				// must stay below that, so that a saturated bucket is
				// always one far above the threshold (bpf/kcount.h).
				sub := time.Duration(d.SubWindow())
				top := c.Detect.HotQPS
				for _, r := range c.Detect.Rules {
					top = max(top, r.HotQPS)
				}
				if top*sub.Seconds() >= bpf.KernelMaxBucketCount {
					return errorf("--kernel-count counts at most %d reads per bucket in a %s sub-window: a threshold of %s/s needs a shorter --window, or --kernel-count=false",
						bpf.KernelMaxBucketCount, sub, strconv.FormatFloat(top, 'f', -1, 64))
				}
				// The same for reply bytes, counted in units of
				// bpf.KernelByteUnit.
				btop := c.Detect.HotBytes
				for _, r := range c.Detect.Rules {
					btop = max(btop, r.HotBytes)
				}
				if btop > 0 && kernelReplyArch != "amd64" {
					// The programs' reply queues rely on x86's ordering of
					// plain loads and stores between CPUs (bpf/kcount.h).
					return errorf("--kernel-count counts reply bytes only on x86-64 for now, not %s: remove the reply-bytes threshold (%s) or set --kernel-count=false", kernelReplyArch, HotBytesSet(c.Detect.Config))
				}
				if limit := float64(bpf.KernelMaxBucketCount * bpf.KernelByteUnit); btop*sub.Seconds() >= limit {
					return errorf("--kernel-count counts at most %s reply bytes per bucket in a %s sub-window: a reply-bytes threshold of %s/s needs a shorter --window, or --kernel-count=false",
						strconv.FormatFloat(limit, 'f', -1, 64), sub, strconv.FormatFloat(btop, 'f', -1, 64))
				}
			}
		}
	}
	return nil
}

// kernelReplyArch is the architecture kernel counting of reply bytes is
// checked against (a variable for tests).
var kernelReplyArch = runtime.GOARCH

// HotBytesSet names the first reply-bytes threshold c sets, "" when none.
func HotBytesSet(c detect.Config) string {
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	if c.HotBytes > 0 {
		return "--hot-bytes " + num(c.HotBytes)
	}
	for i, r := range c.Rules {
		if r.HotBytes > 0 {
			return fmt.Sprintf("rule %d (%s) with hot-bytes %s", i, r.Pattern, num(r.HotBytes))
		}
	}
	return ""
}

// PortMap builds the port map (the default one when no --port is given).
func (s *Stream) PortMap() (*stream.Ports, error) {
	if len(s.Ports) == 0 {
		return stream.DefaultPorts(), nil
	}
	p, err := stream.ParsePorts(s.Ports)
	if err != nil {
		return nil, &Error{err.Error()}
	}
	return p, nil
}
