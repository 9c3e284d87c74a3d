package config

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/hotsniff/hotsniff/capture/ifwatch"
	"github.com/hotsniff/hotsniff/publish"
)

// Section names group the settings (and the validation each needs).
const (
	SecCapture = "capture"
	SecStream  = "stream"
	SecDetect  = "detect"
	SecPublish = "publish"
	SecHTTP    = "http"
)

// setting is one row of the table: its name (the flag, the file key, and
// HOTSNIFF_<NAME> in the environment), its section, its help, and where its
// value lives. The default is whatever Default() puts there.
type setting struct {
	name, section, usage string
	field                func(*Config) any // a pointer to the field
}

// settings is the table of every setting.
var settings = []setting{
	// stream
	{"port", SecStream, "server port to protocol, PROTO=PORT (repeatable; default redis=6379, memcache=11211, tair=5191)", func(c *Config) any { return &c.Stream.Ports }},
	{"progress", SecStream, "progress bar on stderr: auto (when stderr is a terminal), always, never", func(c *Config) any { return &c.Stream.Progress }},
	{"max-flows", SecStream, "connections tracked at once", func(c *Config) any { return &c.Stream.MaxFlows }},
	{"max-buffer-bytes", SecStream, "bytes buffered across all connections (unparsed tails, out-of-order data)", func(c *Config) any { return &c.Stream.MaxBufferBytes }},
	{"max-flow-buffer", SecStream, "bytes buffered per connection direction", func(c *Config) any { return &c.Stream.MaxFlowBuffer }},
	{"max-out-of-order", SecStream, "out-of-order segments held per connection direction", func(c *Config) any { return &c.Stream.MaxOutOfOrder }},
	{"idle-timeout", SecStream, "forget connections idle this long (packet time)", func(c *Config) any { return &c.Stream.IdleTimeout }},
	{"gap-timeout", SecStream, "wait this long (packet time) for a missing segment before declaring a gap", func(c *Config) any { return &c.Stream.GapTimeout }},

	// detect
	{"hot-qps", SecDetect, "a key is hot when its weighted request rate at one server reaches this per second", func(c *Config) any { return &c.Detect.HotQPS }},
	{"hot-bytes", SecDetect, "also hot when the reply bytes attributed to a key at one server reach this per second (0: off)", func(c *Config) any { return &c.Detect.HotBytes }},
	{"detector", SecDetect, "detection algorithm: default, or tair (Tair's server-side pipeline, for comparison)", func(c *Config) any { return &c.Detect.Detector }},
	{"ttl", SecDetect, "how long a client may treat a key as hot without a refresh (ttl_ms), and the lifetime of a hot key no longer read", func(c *Config) any { return &c.Detect.TTL }},
	{"refresh-every", SecDetect, "send a key that stays hot again (a refresh) at most this often (0: ttl/2)", func(c *Config) any { return &c.Detect.RefreshEvery }},
	{"window", SecDetect, "rate measurement window (0: chosen from --hot-qps, 800/hot-qps seconds within [400ms, 20s])", func(c *Config) any { return &c.Detect.Window }},
	{"cold-ratio", SecDetect, "a hot key turns cold when its rate falls below this fraction of its threshold, in (0, 1]", func(c *Config) any { return &c.Detect.ColdRatio }},
	{"buckets", SecDetect, "hash buckets of the default detector, a power of two in [16, 2^20]; raise it above total reads/s ÷ (8 × hot-qps)", func(c *Config) any { return &c.Detect.Buckets }},
	{"max-hot", SecDetect, "most keys hot at once (the least recently read is dropped, announced cold)", func(c *Config) any { return &c.Detect.MaxHot }},
	{"invalidate-gap", SecDetect, "at most one invalidate per key per gap: writes within it are merged into one more, sent when it ends (the last write is always invalidated)", func(c *Config) any { return &c.Detect.InvalidateGap }},
	{"local-ttl", SecDetect, "the client shims' local TTL; the cacheable verdict is judged against it", func(c *Config) any { return &c.Detect.LocalTTL }},
	{"uncacheable-writes", SecDetect, "publish a hot key cacheable:false when its writes per local-ttl reach this (shims stop caching it, its writes stop producing invalidates; negative: never)", func(c *Config) any { return &c.Detect.UncacheableWrites }},
	{"absorbed-cap", SecDetect, "reads that client shims report having served locally are credited to a key up to this many times its threshold per second", func(c *Config) any { return &c.Detect.AbsorbedCap }},
	{"absorbed-client-cap", SecDetect, "reads that one client (one address) reports having served locally are credited to a key up to this many times its threshold per second", func(c *Config) any { return &c.Detect.AbsorbedClientCap }},
	{"absorbed-hold", SecDetect, "longest one client's reports alone may keep a key hot; then its reports for that key stop counting until the key is detected again on the wire", func(c *Config) any { return &c.Detect.AbsorbedHold }},
	{"tair-buckets", SecDetect, "--detector tair: hash buckets", func(c *Config) any { return &c.Detect.Tair.Buckets }},
	{"tair-sample-max", SecDetect, "--detector tair: reads sampled per round", func(c *Config) any { return &c.Detect.Tair.SampleMax }},
	{"tair-sigma-n", SecDetect, "--detector tair: a round locates a bucket when the counts' standard deviation exceeds this × their mean", func(c *Config) any { return &c.Detect.Tair.SigmaN }},
	{"tair-reap-max", SecDetect, "--detector tair: reads of a located bucket collected before picking its key", func(c *Config) any { return &c.Detect.Tair.ReapMax }},
	{"output", SecDetect, "event format on stdout: jsonl or text", func(c *Config) any { return &c.Detect.Output }},
	{"node", SecDetect, "node name in events (default: the host name)", func(c *Config) any { return &c.Detect.Node }},

	// publish
	{"redis-url", SecPublish, "Redis to use: redis://[user:pass@]host:port/db, rediss:// for TLS, ?cluster=true (or addr=host:port...) for Redis Cluster", func(c *Config) any { return &c.Publish.RedisURL }},
	{"channel", SecPublish, "pub/sub channel; the snapshot is at <channel>:snapshot", func(c *Config) any { return &c.Publish.Channel }},
	{"redis-ca-file", SecPublish, "PEM CA bundle to verify a rediss:// server", func(c *Config) any { return &c.Publish.CAFile }},
	{"redis-cert-file", SecPublish, "PEM client certificate for rediss://", func(c *Config) any { return &c.Publish.CertFile }},
	{"redis-key-file", SecPublish, "PEM client key for rediss://", func(c *Config) any { return &c.Publish.KeyFile }},
	{"redis-insecure-skip-verify", SecPublish, "do not verify the rediss:// server certificate (testing only)", func(c *Config) any { return &c.Publish.InsecureSkipVerify }},
	{"channel-secret-file", SecPublish, "shared secret (the file's bytes, one trailing newline stripped): publishers sign every channel message and the snapshot with HMAC-SHA256, subscribers accept only signed ones; every daemon, subscriber and shim of the channel needs the same secret", func(c *Config) any { return &c.Publish.SecretFile }},
	{"channel-format", SecPublish, "channel messages: v1 (one event each, read by every subscriber) or v2 (batches of events; needs subscribers that read batches)", func(c *Config) any { return &c.Publish.Format }},
	{"channel-budget", SecPublish, "most channel messages this node sends per second (0: no cap); beyond it refreshes are shed and other events wait, batched", func(c *Config) any { return &c.Publish.Budget }},

	// capture
	{"iface", SecCapture, "interface name or pattern to capture on (repeatable; patterns such as 'cali*' are followed as interfaces appear and go; default: the physical interfaces that are up plus pods' interfaces: " + strings.Join(ifwatch.DefaultPodPatterns, " ") + ")", func(c *Config) any { return &c.Capture.Ifaces }},
	{"capture", SecCapture, "capture mode: auto (cgroup when cgroup v2 is mounted and no --iface is given, else XDP on physical NICs and TC on veth and loopback; AF_PACKET when eBPF is unavailable), cgroup, xdp, tc, afpacket", func(c *Config) any { return &c.Capture.Mode }},
	{"cgroup-path", SecCapture, "cgroup v2 hierarchy the cgroup mode attaches to (default: /sys/fs/cgroup, else /sys/fs/cgroup/unified; in a container, the host's hierarchy mounted in)", func(c *Config) any { return &c.Capture.CgroupPath }},
	{"ring-size", SecCapture, "eBPF ring buffer size per CPU (or AF_PACKET ring per interface) in bytes; 0: 2 MiB per online CPU for eBPF (at most 64 MiB in all, at least 512 KiB each; small rings stay in the CPU cache; offline CPUs get one page), 32 MiB for AF_PACKET", func(c *Config) any { return &c.Capture.RingSize }},
	{"max-copy", SecCapture, "most payload bytes copied from one packet by eBPF (GRO/GSO super-packets); the rest is counted as truncated", func(c *Config) any { return &c.Capture.MaxCopy }},
	{"capture-replies", SecCapture, "eBPF: copy server replies whole (exact reply bytes whatever the traffic; replies are most of the bytes)", func(c *Config) any { return &c.Capture.Replies }},
	{"reply-copy", SecCapture, "eBPF without --capture-replies: copy at most this many bytes of each reply segment, enough to read reply headers and attribute reply bytes to keys (0: copy no reply payload; no reply bytes, so refused with --hot-bytes)", func(c *Config) any { return &c.Capture.ReplyCopy }},
	{"decap", SecCapture, "overlay tunnels followed to the inner segment on interfaces (xdp, tc, afpacket): auto (the VXLAN, Geneve and IP-in-IP devices on the node, to or from their local endpoints), off, or a list such as vxlan:4789,vxlan:8472/1,geneve:6081,ipip (PORT/VNI; to or from the node's addresses), which may include auto; a UDP datagram that is not such a tunnel is never decoded", func(c *Config) any { return &c.Capture.Decap }},
	{"kernel-count", SecCapture, "eBPF, experimental: count reads in the kernel and copy only the requests of located buckets, writes to hot keys, session commands and what the programs cannot parse; with a reply-bytes threshold, Redis reply bytes are counted there too (memcached and Tair keys are then hot by reads only) and only the replies of copied requests are copied; refused with --capture-replies", func(c *Config) any { return &c.Capture.KernelCount }},
	// One pipeline goroutine does the work; the publisher and HTTP are
	// light. More Ps only add threads that the runtime wakes to look for
	// work on every ring wakeup: in profiles of `run` on 2 vCPUs that was a
	// third of the daemon's CPU, and on a 64-core node it is worse.
	{"gomaxprocs", SecCapture, "threads running Go code at once (GOMAXPROCS); 0 keeps Go's default (the GOMAXPROCS variable, else the CPU count or limit)", func(c *Config) any { return &c.Capture.Procs }},
	{"nice", SecCapture, "CPU priority of the daemon's threads, -20 (highest) to 19: by default it yields to the cache server when the CPU is saturated (a daemon started at a higher nice value keeps it)", func(c *Config) any { return &c.Capture.Nice }},
	{"no-traffic-warn", SecCapture, "warn once when capture has seen no segment on the server ports this long after it started (check --port and --iface); 0: never", func(c *Config) any { return &c.Capture.NoTrafficWarn }},
	{"max-cpu", SecCapture, "CPU budget as a share of one core (0.05: 5 %), the eBPF programs' run time included: above it the programs copy only part of the connections (in steps of 4 %) and counts are scaled back, thresholds staying in true requests per second; 0: no budget", func(c *Config) any { return &c.Capture.MaxCPU }},

	// http
	{"listen", SecHTTP, "address for / (web view), /metrics, /hotkeys, /healthz, /readyz (empty: none)", func(c *Config) any { return &c.HTTP.Listen }},
	{"health-listen", SecHTTP, "also serve /healthz and /readyz alone, in plain HTTP without the web configuration, on this address (e.g. 127.0.0.1:9465, for the kubelet's probes when --web-config asks for credentials)", func(c *Config) any { return &c.HTTP.Health }},
	{"web-config", SecHTTP, "web configuration file (Prometheus exporter format: tls_server_config, basic_auth_users) for TLS, client certificates and basic auth on every --listen endpoint; re-read on each request", func(c *Config) any { return &c.HTTP.WebConfig }},
	{"http-max-conns", SecHTTP, "most connections held open on --listen: at the bound the longest-idle connection is closed to admit a new one, so /healthz keeps answering", func(c *Config) any { return &c.HTTP.MaxConns }},
	{"http-idle-timeout", SecHTTP, "close a keep-alive HTTP connection after this long without a request", func(c *Config) any { return &c.HTTP.IdleTimeout }},
	{"pprof", SecHTTP, "also serve Go profiling at /debug/pprof/ on --listen", func(c *Config) any { return &c.HTTP.Pprof }},
}

// Section lists the names of a section's settings, in table order.
func Section(sec string) []string {
	var out []string
	for _, s := range settings {
		if s.section == sec {
			out = append(out, s.name)
		}
	}
	return out
}

func lookup(name string) *setting {
	for i := range settings {
		if settings[i].name == name {
			return &settings[i]
		}
	}
	return nil
}

// Summary describes the named settings as they are, one line per section,
// "section: name value, ...", in table order: what --config-check prints.
// A password in the Redis URL is not shown.
func Summary(c *Config, names ...string) []string {
	var lines []string
	for _, sec := range []string{SecCapture, SecStream, SecDetect, SecPublish, SecHTTP} {
		var parts []string
		for _, s := range settings {
			if s.section != sec || !slices.Contains(names, s.name) {
				continue
			}
			parts = append(parts, s.name+" "+show(c, &s))
		}
		if len(parts) > 0 {
			lines = append(lines, sec+": "+strings.Join(parts, ", "))
		}
	}
	return lines
}

func show(c *Config, s *setting) string {
	switch p := s.field(c).(type) {
	case *string:
		v := *p
		if s.name == "redis-url" && v != "" {
			if t, err := publish.ParseURL(v); err == nil {
				v = t.Redacted
			}
		}
		return strconv.Quote(v)
	case *[]string:
		if len(*p) == 0 {
			return "[]"
		}
		return "[" + strings.Join(*p, " ") + "]"
	default:
		return fmt.Sprint(reflect.ValueOf(p).Elem().Interface())
	}
}
