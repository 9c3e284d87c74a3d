package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/hotsniff/hotsniff/client"
	"github.com/hotsniff/hotsniff/config"
	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/publish"
)

// connectRedis parses the URL (a bad one is a usage error) and checks
// that Redis answers, so an unreachable server is one clear line, not a
// retry loop.
func connectRedis(ctx context.Context, p config.Publish) (redis.UniversalClient, error) {
	if p.RedisURL == "" {
		return nil, usagef("--redis-url is required (or set HOTSNIFF_REDIS_URL)")
	}
	if p.Channel == "" {
		return nil, usagef("--channel must not be empty")
	}
	t, err := publish.ParseURL(p.RedisURL)
	if err != nil {
		return nil, usageError{err}
	}
	to := tlsOptions(p)
	if !to.IsZero() && !t.TLS() {
		return nil, usagef("--redis-ca-file, --redis-cert-file, --redis-key-file and --redis-insecure-skip-verify need a rediss:// URL")
	}
	rdb, err := publish.Connect(t, to)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("connect redis %s: %w", t.Redacted, err)
	}
	return rdb, nil
}

// quietRedisLogs stops go-redis from printing its own reconnect chatter on
// stderr, which would break the one-line error rule; hotsniff logs instead.
func quietRedisLogs() {
	redis.SetLogger(nopLogger{})
}

type nopLogger struct{}

func (nopLogger) Printf(context.Context, string, ...any) {}

func newSubscribeCmd() *cobra.Command {
	var cfg *config.Config
	cmd := &cobra.Command{
		Use:   "subscribe",
		Short: "Print the hot-key snapshot, then every message on the channel",
		Long: `Subscribes to the hot-key channel, reads the snapshot (<channel>:snapshot),
prints its entries, then prints every message as it arrives, one per line.
On a seq gap or a reconnect the snapshot is read and printed again.
Messages over 1 MiB, with values out of range, or (with
--channel-secret-file) not signed with the secret are rejected and counted,
never printed; the counts are printed on stderr when it stops. Stops cleanly
on SIGINT or SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadSettings(cmd, cfg); err != nil {
				return err
			}
			w, err := publish.NewWriter(cmd.OutOrStdout(), cfg.Detect.Output, "")
			if err != nil {
				return usageError{err}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			secret, err := loadSecret(cfg.Publish)
			if err != nil {
				return err
			}
			quietRedisLogs()
			rdb, err := connectRedis(ctx, cfg.Publish)
			if err != nil {
				return err
			}
			defer rdb.Close()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			sub := client.New(rdb, client.Options{
				Channel:       cfg.Publish.Channel,
				Logger:        log,
				ChannelSecret: secret,
				Handler: client.HandlerFuncs{
					OnSnapshot: func(s *event.Snapshot) {
						for _, e := range s.Keys {
							if e != nil {
								w.EmitSnapshot(e)
							}
						}
					},
					OnEvent: w.Emit,
				},
			})
			runErr := sub.Run(ctx)
			reportBad(log, sub.Stats())
			if runErr != nil {
				return runErr
			}
			if err := w.Err(); err != nil && !errors.Is(err, syscall.EPIPE) {
				return err
			}
			return nil
		},
	}
	cfg = registerSettings(cmd.Flags(), redisSettings, []string{"output"})
	return cmd
}

// reportBad prints, when subscribe stops, how many channel messages were
// rejected and why (the bad_message reasons of every subscriber).
func reportBad(log *slog.Logger, st client.Stats) {
	var attrs []any
	var n uint64
	for i, c := range st.Bad {
		if c > 0 {
			attrs = append(attrs, client.BadReasons[i], c)
			n += c
		}
	}
	if n > 0 {
		log.Warn(fmt.Sprintf("rejected %d channel message(s)", n), attrs...)
	}
}
