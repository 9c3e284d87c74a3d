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

	"github.com/hotsniff/hotsniff/client"
	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/publish"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// redisFlags are the flags of every command that talks to the channel.
type redisFlags struct {
	url, channel              string
	caFile, certFile, keyFile string
	insecureSkipVerify        bool
	secretFile                string
}

func (f *redisFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.url, "redis-url", "", "Redis to use: redis://[user:pass@]host:port/db, rediss:// for TLS, ?cluster=true (or addr=host:port...) for Redis Cluster (env HOTSNIFF_REDIS_URL)")
	fs.StringVar(&f.channel, "channel", publish.DefaultChannel, "pub/sub channel; the snapshot is at <channel>:snapshot")
	fs.StringVar(&f.caFile, "redis-ca-file", "", "PEM CA bundle to verify a rediss:// server")
	fs.StringVar(&f.certFile, "redis-cert-file", "", "PEM client certificate for rediss://")
	fs.StringVar(&f.keyFile, "redis-key-file", "", "PEM client key for rediss://")
	fs.BoolVar(&f.insecureSkipVerify, "redis-insecure-skip-verify", false, "do not verify the rediss:// server certificate (testing only)")
	fs.StringVar(&f.secretFile, "channel-secret-file", "", "shared secret (the file's bytes, one trailing newline stripped): publishers sign every channel message and the snapshot with HMAC-SHA256, subscribers accept only what is signed with it (env HOTSNIFF_CHANNEL_SECRET_FILE; default: unsigned)")
}

// secret loads --channel-secret-file (or HOTSNIFF_CHANNEL_SECRET_FILE): nil
// when neither is set; a file that cannot be read is a usage error.
func (f *redisFlags) secret() ([]byte, error) {
	path := f.secretFile
	if path == "" {
		path = os.Getenv("HOTSNIFF_CHANNEL_SECRET_FILE")
	}
	if path == "" {
		return nil, nil
	}
	s, err := publish.LoadSecret(path)
	if err != nil {
		return nil, usagef("--channel-secret-file: %v", err)
	}
	return s, nil
}

// connect parses the URL (a bad one is a usage error) and checks that Redis
// answers, so an unreachable server is one clear line, not a retry loop.
func (f *redisFlags) connect(ctx context.Context) (redis.UniversalClient, error) {
	raw := f.url
	if raw == "" {
		raw = os.Getenv("HOTSNIFF_REDIS_URL")
	}
	if raw == "" {
		return nil, usagef("--redis-url is required (or set HOTSNIFF_REDIS_URL)")
	}
	if f.channel == "" {
		return nil, usagef("--channel must not be empty")
	}
	t, err := publish.ParseURL(raw)
	if err != nil {
		return nil, usageError{err}
	}
	to := publish.TLSOptions{
		CAFile: f.caFile, CertFile: f.certFile, KeyFile: f.keyFile, InsecureSkipVerify: f.insecureSkipVerify,
	}
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
	var (
		rf     redisFlags
		output string
	)
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
			w, err := publish.NewWriter(cmd.OutOrStdout(), output, "")
			if err != nil {
				return usageError{err}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			secret, err := rf.secret()
			if err != nil {
				return err
			}
			quietRedisLogs()
			rdb, err := rf.connect(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			sub := client.New(rdb, client.Options{
				Channel:       rf.channel,
				Logger:        log,
				ChannelSecret: secret,
				Handler: client.HandlerFuncs{
					OnSnapshot: func(s *event.Snapshot) {
						for _, e := range s.Keys {
							if e != nil {
								w.Emit(e)
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
	rf.register(cmd.Flags())
	cmd.Flags().StringVar(&output, "output", publish.FormatJSONL, "output format: jsonl or text")
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
