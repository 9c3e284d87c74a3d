package main

import (
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hotsniff/hotsniff/config"
)

// TestOneDefaultEverywhere: a setting of the table registered by several
// commands has the same default and help in each (--hot-qps was 1000 on
// run and replay and 0 on top), so `hotsniff COMMAND --help` shows each
// setting once, with one default.
func TestOneDefaultEverywhere(t *testing.T) {
	table := map[string]bool{}
	for _, sec := range []string{config.SecCapture, config.SecStream, config.SecDetect, config.SecPublish, config.SecHTTP} {
		for _, n := range config.Section(sec) {
			table[n] = true
		}
	}
	// hotkeys add --ttl is how long a manual key stays hot, a different
	// thing under a name the command line has always had.
	local := map[string]bool{"hotsniff hotkeys add --ttl": true, "hotsniff hotkeys --node": true}
	seen := map[string]*pflag.Flag{}
	where := map[string]string{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if !table[f.Name] || local[c.CommandPath()+" --"+f.Name] {
				return
			}
			if prev, ok := seen[f.Name]; ok && (prev.DefValue != f.DefValue || prev.Usage != f.Usage) {
				t.Errorf("--%s: default %q in %s, %q in %s (or a different help)", f.Name, prev.DefValue, where[f.Name], f.DefValue, c.CommandPath())
			}
			seen[f.Name], where[f.Name] = f, c.CommandPath()
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCmd())
	for _, n := range []string{"hot-qps", "port", "redis-url", "channel", "ttl"} {
		if seen[n] == nil {
			t.Errorf("no command registers --%s", n)
		}
	}
}
