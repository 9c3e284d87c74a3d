// Package config is hotsniff's one typed configuration: one table of
// settings with one default each, one loader (defaults < file < environment
// < flags, the file read once) and one validation, in sections for capture,
// stream, detect, publish and HTTP. Every command registers the settings it
// uses from the table, so a setting has the same name, help and default
// wherever it appears.
package config

import (
	"time"

	"github.com/hotsniff/hotsniff/capture/tunnel"

	"github.com/hotsniff/hotsniff/bpf"
	"github.com/hotsniff/hotsniff/detect"
	"github.com/hotsniff/hotsniff/internal/httpserve"
	"github.com/hotsniff/hotsniff/publish"
	"github.com/hotsniff/hotsniff/stream"
)

// Config holds every setting.
type Config struct {
	// File is the YAML file the settings were read from ("" for none).
	File    string
	Capture Capture
	Stream  Stream
	Detect  Detect
	Publish Publish
	HTTP    HTTP
}

// Capture chooses how `run` captures.
type Capture struct {
	Ifaces     []string
	Mode       string
	CgroupPath string
	RingSize   int
	MaxCopy    int
	Replies    bool
	ReplyCopy  int
	Procs      int
	Nice       int
	MaxCPU     float64
	// KernelCount counts reads in the eBPF programs (experimental); see
	// KernelCounting.
	KernelCount bool
	// Decap names the tunnels interface captures follow (--decap).
	Decap string
	// NoTrafficWarn: warn once when no segment on the server ports has been
	// seen this long after capture starts (0: never).
	NoTrafficWarn time.Duration
}

// KernelCounting reports whether the eBPF programs would count reads in
// the kernel: --kernel-count with any capture mode but afpacket, which has
// no programs. auto counts too: it falls back to AF_PACKET only when eBPF
// is unavailable, which is not known before capture starts.
func (k Capture) KernelCounting() bool {
	return k.KernelCount && bpf.Mode(k.Mode) != bpf.ModeAFPacket
}

// Stream is the port map and the reassembly bounds.
type Stream struct {
	Ports    []string
	Progress string
	stream.Config
}

// Detect is the detector's configuration (rules and ignore patterns come
// from the file) and how events are printed.
type Detect struct {
	detect.Config
	Output string
	Node   string
}

// Publish is where and how events are published.
type Publish struct {
	RedisURL           string
	Channel            string
	CAFile             string
	CertFile           string
	KeyFile            string
	InsecureSkipVerify bool
	Format             string
	Budget             float64
	// SecretFile holds the channel's shared secret (signed messages).
	SecretFile string
}

// HTTP is what `run` serves.
type HTTP struct {
	Listen      string
	Health      string
	WebConfig   string
	Pprof       bool
	MaxConns    int
	IdleTimeout time.Duration
}

// Default returns every setting at its default: the one place defaults
// are written.
func Default() Config {
	s := stream.DefaultConfig()
	// Captures carry replies: pair them with requests so reply bytes can
	// be attributed to keys.
	s.Replies = true
	d := detect.DefaultConfig()
	d.HotQPS = 1000
	return Config{
		Capture: Capture{
			Mode:      "auto",
			MaxCopy:   256 << 10,
			ReplyCopy: bpf.DefaultReplyCopy,
			Procs:     1,
			Nice:      10,
			Decap:     tunnel.Default,
			// A cache server under any load sends within seconds.
			NoTrafficWarn: 30 * time.Second,
		},
		Stream:  Stream{Progress: "auto", Config: s},
		Detect:  Detect{Config: d, Output: "jsonl"},
		Publish: Publish{Channel: publish.DefaultChannel, Format: publish.FormatV1, Budget: 1000},
		HTTP:    HTTP{Listen: ":9464", MaxConns: httpserve.DefaultMaxConns, IdleTimeout: httpserve.DefaultIdleTimeout},
	}
}
