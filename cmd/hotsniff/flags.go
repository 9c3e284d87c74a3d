package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/hotsniff/hotsniff/stream"
)

// streamFlags are the flags every command that reads traffic shares.
type streamFlags struct {
	ports      []string
	configPath string
	progress   string
	cfg        stream.Config
}

func (s *streamFlags) register(cmd *cobra.Command) {
	s.cfg = stream.DefaultConfig()
	// Captures and AF_PACKET carry replies: pair them with requests so reply
	// bytes can be attributed to keys.
	s.cfg.Replies = true
	f := cmd.Flags()
	f.StringArrayVar(&s.ports, "port", nil, "server port to protocol, PROTO=PORT (repeatable; default redis=6379, memcache=11211, tair=5191)")
	f.StringVar(&s.configPath, "config", "", "YAML file holding any of the flags (by name) plus detection rules; flags override it")
	f.StringVar(&s.progress, "progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), always, never")
	f.IntVar(&s.cfg.MaxFlows, "max-flows", s.cfg.MaxFlows, "connections tracked at once")
	f.IntVar(&s.cfg.MaxBufferBytes, "max-buffer-bytes", s.cfg.MaxBufferBytes, "bytes buffered across all connections (unparsed tails, out-of-order data)")
	f.IntVar(&s.cfg.MaxFlowBuffer, "max-flow-buffer", s.cfg.MaxFlowBuffer, "bytes buffered per connection direction")
	f.IntVar(&s.cfg.MaxOutOfOrder, "max-out-of-order", s.cfg.MaxOutOfOrder, "out-of-order segments held per connection direction")
	f.DurationVar(&s.cfg.IdleTimeout, "idle-timeout", s.cfg.IdleTimeout, "forget connections idle this long (packet time)")
	f.DurationVar(&s.cfg.GapTimeout, "gap-timeout", s.cfg.GapTimeout, "wait this long (packet time) for a missing segment before declaring a gap")
}

func (s *streamFlags) build() (*stream.Ports, stream.Config, error) {
	ports := stream.DefaultPorts()
	if len(s.ports) > 0 {
		p, err := stream.ParsePorts(s.ports)
		if err != nil {
			return nil, s.cfg, usageError{err}
		}
		ports = p
	}
	if err := s.cfg.Validate(); err != nil {
		return nil, s.cfg, usageError{err}
	}
	switch s.progress {
	case "auto", "always", "never":
	default:
		return nil, s.cfg, usagef("--progress %q: want auto, always or never", s.progress)
	}
	return ports, s.cfg, nil
}

// applyConfig fills flags the user did not set from, in rising precedence,
// the YAML file at path and HOTSNIFF_* environment variables (HOTSNIFF_HOT_QPS
// for --hot-qps). Keys of the file are flag names; lists set repeatable flags.
// Keys that are not flags are left to the command (rules, ignore).
func applyConfig(cmd *cobra.Command, path string) error {
	fromFile := map[string]any{}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return usagef("read config: %v", err)
		}
		if err := yaml.Unmarshal(b, &fromFile); err != nil {
			return usagef("parse config %s: %v", path, err)
		}
		if fromFile, err = normalizeConfig(path, fromFile); err != nil {
			return err
		}
	}
	var errs []string
	if err := checkConfigKeys(cmd, path, fromFile); err != nil {
		return err
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "config" || f.Name == "help" {
			return
		}
		env := "HOTSNIFF_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Sprintf("%s=%q: %s", env, v, expects(f)))
			}
			return
		}
		v, ok := fromFile[f.Name]
		if !ok {
			return
		}
		vals := []any{v}
		if l, isList := v.([]any); isList {
			vals = l
		}
		for _, x := range vals {
			if err := f.Value.Set(fmt.Sprint(x)); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %s: %q: %s", path, f.Name, fmt.Sprint(x), expects(f)))
			}
		}
	})
	if len(errs) > 0 {
		sort.Strings(errs)
		return usagef("config: %s", strings.Join(errs, "; "))
	}
	return nil
}

// nonFlagKeys are the config file keys that are not flags.
var nonFlagKeys = map[string]bool{"rules": true, "ignore": true}

// checkConfigKeys rejects keys no command knows, so a typo ("hot_qps",
// "ifaces") is an error rather than a setting silently ignored. Keys of other
// commands' flags are accepted: one file can serve run, replay and top.
func checkConfigKeys(cmd *cobra.Command, path string, file map[string]any) error {
	known := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { known[f.Name] = true })
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cmd.Root())
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
		return usagef("config %s: %s", path, strings.Join(bad, "; "))
	}
	return nil
}
