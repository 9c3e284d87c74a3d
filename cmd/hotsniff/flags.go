package main

import (
	"os"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hotsniff/hotsniff/config"
	"github.com/hotsniff/hotsniff/publish"
)

// Settings by group, as commands take them from the one table
// (config/settings.go): every command that uses a setting registers it
// from there, with the same name, help and default.
var (
	streamSettings  = config.Section(config.SecStream)
	detectSettings  = config.Section(config.SecDetect)
	captureSettings = config.Section(config.SecCapture)
	httpSettings    = config.Section(config.SecHTTP)
	// redisSettings reach the channel's Redis; publishSettings add how a
	// publisher sends.
	redisSettings   = []string{"redis-url", "channel", "redis-ca-file", "redis-cert-file", "redis-key-file", "redis-insecure-skip-verify", "channel-secret-file"}
	publishSettings = append(slices.Clone(redisSettings), "channel-format", "channel-budget")
)

// without returns names less the ones given.
func without(names []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(drop, n) })
}

// registerSettings adds the named settings (and --config) to fs, bound to
// a fresh configuration at its defaults.
func registerSettings(fs *pflag.FlagSet, groups ...[]string) *config.Config {
	c := config.Default()
	for _, g := range groups {
		config.Register(fs, &c, g...)
	}
	return &c
}

// loadSettings applies the file and the environment to the flags the user
// did not set and validates: defaults < file < environment < flags.
// Unknown HOTSNIFF_* variables are warned about on stderr.
func loadSettings(cmd *cobra.Command, c *config.Config) error {
	warnings, err := config.Load(cmd.Flags(), c, os.Environ(), allFlags(cmd.Root()))
	for _, w := range warnings {
		cmd.PrintErrln("hotsniff: warning: " + w)
	}
	if err != nil {
		return usageError{err}
	}
	return nil
}

// tlsOptions are the rediss:// settings.
func tlsOptions(p config.Publish) publish.TLSOptions {
	return publish.TLSOptions{CAFile: p.CAFile, CertFile: p.CertFile, KeyFile: p.KeyFile, InsecureSkipVerify: p.InsecureSkipVerify}
}

// publishOptions are the channel settings of a publisher.
func publishOptions(p config.Publish) (publish.Options, error) {
	f, err := publish.ParseFormat(p.Format)
	if err != nil {
		return publish.Options{}, usagef("--channel-format: %v", err)
	}
	return publish.Options{Channel: p.Channel, Format: f, Budget: p.Budget}, nil
}

// allFlags names every flag of every command: one file (and one
// environment) may serve run, replay and top, so keys of another
// command's flags are not typos.
func allFlags(root *cobra.Command) []string {
	var out []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { out = append(out, f.Name) })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { out = append(out, f.Name) })
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return out
}

// loadSecret reads --channel-secret-file: nil when unset; a file that
// cannot be read is a usage error.
func loadSecret(p config.Publish) ([]byte, error) {
	if p.SecretFile == "" {
		return nil, nil
	}
	s, err := publish.LoadSecret(p.SecretFile)
	if err != nil {
		return nil, usagef("--channel-secret-file: %v", err)
	}
	return s, nil
}
