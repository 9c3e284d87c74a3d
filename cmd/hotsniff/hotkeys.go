package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotsniff/hotsniff/config"
	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/publish"
)

// hotkeysFlags are shared by add and remove.
type hotkeysFlags struct {
	cfg          *config.Config // the channel settings
	proto, ns    string
	server, node string
	keyB64       bool
}

func newHotkeysCmd() *cobra.Command {
	var f hotkeysFlags
	cmd := &cobra.Command{
		Use:   "hotkeys",
		Short: "Declare or withdraw hot keys by hand (published with source manual)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("hotkeys needs a subcommand: add or remove")
		},
	}
	pf := cmd.PersistentFlags()
	f.cfg = registerSettings(pf, redisSettings, []string{"output"})
	pf.StringVar(&f.proto, "proto", "redis", "protocol of the key: redis, memcache or tair")
	pf.StringVar(&f.ns, "ns", "", `namespace: Redis DB or Tair area (default "0"; always "" for memcache)`)
	pf.StringVar(&f.server, "server", "", "cache server ip:port the key lives on (default: any)")
	pf.StringVar(&f.node, "node", "", `node name in the message (default "manual@<hostname>")`)
	pf.BoolVar(&f.keyB64, "key-b64", false, "KEY is standard base64 (for keys that are not text)")

	var ttl time.Duration
	add := &cobra.Command{
		Use:   "add KEY",
		Short: "Publish KEY as hot (source manual) and add it to the snapshot for --ttl",
		Args:  oneKey("add"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ttl < 0 {
				return usagef("--ttl must not be negative")
			}
			return f.run(cmd, args[0], event.TypeHot, ttl)
		},
	}
	add.Flags().DurationVar(&ttl, "ttl", 5*time.Minute, "how long the key stays hot; 0 keeps it until removed")
	remove := &cobra.Command{
		Use:   "remove KEY",
		Short: "Publish KEY as cold (source manual) and remove it from the snapshot",
		Args:  oneKey("remove"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(cmd, args[0], event.TypeCold, 0)
		},
	}
	cmd.AddCommand(add, remove)
	return cmd
}

// oneKey checks that `hotkeys add|remove` got exactly one KEY, and says
// how to give it when not.
func oneKey(verb string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		switch len(args) {
		case 1:
			return nil
		case 0:
			return usagef("hotkeys %s needs the key: hotsniff hotkeys %s KEY (--proto, --ns and --server say where it lives; --key-b64 for a key that is not text)", verb, verb)
		}
		return usagef("hotkeys %s takes one key, got %d: quote a key that contains spaces (hotsniff hotkeys %s 'my key'), run it once per key", verb, len(args), verb)
	}
}

func (f *hotkeysFlags) run(cmd *cobra.Command, arg, typ string, ttl time.Duration) error {
	if err := loadSettings(cmd, f.cfg); err != nil {
		return err
	}
	key := []byte(arg)
	if f.keyB64 {
		k, err := base64.StdEncoding.DecodeString(arg)
		if err != nil {
			return usagef("KEY is not valid base64: %v", err)
		}
		key = k
	}
	if len(key) == 0 {
		return usagef("KEY must not be empty")
	}
	ns := f.ns
	switch f.proto {
	case "redis", "tair":
		if ns == "" {
			ns = "0"
		}
	case "memcache":
		if ns != "" {
			return usagef("--ns does not apply to memcache")
		}
	default:
		return usagef("--proto must be redis, memcache or tair, not %q", f.proto)
	}
	if f.server != "" {
		if _, _, err := net.SplitHostPort(f.server); err != nil {
			return usagef("--server must be ip:port: %v", err)
		}
	}
	w, err := publish.NewWriter(cmd.OutOrStdout(), f.cfg.Detect.Output, "")
	if err != nil {
		return usageError{err}
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	secret, err := loadSecret(f.cfg.Publish)
	if err != nil {
		return err
	}
	quietRedisLogs()
	rdb, err := connectRedis(ctx, f.cfg.Publish)
	if err != nil {
		return err
	}
	defer rdb.Close()
	e := &event.Event{
		Type: typ, Proto: f.proto, Server: f.server, NS: ns, Key: key,
		TTLms: ttl.Milliseconds(), TS: time.Now(), Source: event.SourceManual,
	}
	res, err := publish.Manual(ctx, rdb, publish.ManualOptions{Channel: f.cfg.Publish.Channel, Node: f.node, Secret: secret}, e)
	if err != nil {
		return err
	}
	w.Emit(res.Event)
	if err := w.Err(); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "published %s on %s to %d subscriber(s)\n", typ, f.cfg.Publish.Channel, res.Receivers)
	return nil
}
