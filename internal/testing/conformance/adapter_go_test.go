package conformance

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/hotsniff/hotsniff/client"
	"github.com/redis/go-redis/v9"
)

// adapterConfig is the adapter's one command-line argument (JSON), the same
// for every language.
type adapterConfig struct {
	Cache        string   `json:"cache"`
	ChannelAddr  string   `json:"channel_addr"`
	Channel      string   `json:"channel"`
	DB           int      `json:"db,omitempty"`
	Username     string   `json:"username,omitempty"`
	Password     string   `json:"password,omitempty"`
	Servers      []string `json:"servers,omitempty"`
	AnyServer    bool     `json:"any_server,omitempty"`
	LocalTTLms   int      `json:"local_ttl_ms,omitempty"`
	StaleGraceMs int      `json:"stale_grace_ms,omitempty"`
	LingerMs     int      `json:"linger_ms,omitempty"`
	MaxEntries   int      `json:"max_entries,omitempty"`
	// Mode is the client form the adapter drives (each shim lists its
	// modes; empty: its first).
	Mode string `json:"mode,omitempty"`
	// ClusterAddrs are the cluster's nodes in mode "cluster" (Cache is one
	// of them).
	ClusterAddrs []string `json:"cluster_addrs,omitempty"`
	// PoolSize, when set, bounds the client's connection pool (the
	// namespace cases use 1, so that a SELECT reaches every later read).
	PoolSize int `json:"pool_size,omitempty"`
	// ChannelSecret (hex) is the channel's shared secret, if any.
	ChannelSecret string `json:"channel_secret,omitempty"`
	// Tracking turns the Go shim's server-assisted invalidation on (the
	// suite checks what every shim does, so it is off unless asked; the
	// server-cost figures of internal/testing/shimfleet ask). Other
	// adapters ignore it.
	Tracking bool `json:"tracking,omitempty"`
}

// request is one adapter request line; the fields used depend on Op.
type request struct {
	Op      string   `json:"op"`
	Key     string   `json:"key"`
	KeyB64  *string  `json:"key_b64,omitempty"`
	Keys    []string `json:"keys,omitempty"`
	Field   string   `json:"field,omitempty"`
	Fields  []string `json:"fields,omitempty"`
	Value   string   `json:"value,omitempty"`
	Want    *string  `json:"want,omitempty"`
	Args    []string `json:"args,omitempty"`
	N       int      `json:"n,omitempty"`
	Ms      int      `json:"ms,omitempty"`
	Threads int      `json:"threads,omitempty"`
	DB      int      `json:"db,omitempty"`
}

func (r *request) key() string {
	if r.KeyB64 != nil {
		b, _ := base64.StdEncoding.DecodeString(*r.KeyB64)
		return string(b)
	}
	return r.Key
}

// runGoAdapter is the Go shim's adapter: the test binary re-executed with
// HOTSNIFF_CONFORMANCE_ADAPTER=1 runs it instead of the tests.
func runGoAdapter(cfgJSON string, in io.Reader, out io.Writer) error {
	var cfg adapterConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		return fmt.Errorf("parse config: %w", err)
	}
	ctx := context.Background()
	opt := &redis.Options{Addr: cfg.Cache, DB: cfg.DB, Username: cfg.Username, Password: cfg.Password, PoolSize: cfg.PoolSize}
	// installed is the client the shim is installed on; rdb is what the
	// application calls (the client itself, or one Conn of it).
	var installed redis.UniversalClient
	var rdb redis.Cmdable
	var plain redis.Cmdable
	var conn *redis.Conn
	var watch func(ctx context.Context, fn func(*redis.Tx) error, keys ...string) error
	switch cfg.Mode {
	case "", "pool", "conn":
		c := redis.NewClient(opt)
		installed, rdb, watch = c, c, c.Watch
		plain = redis.NewClient(opt)
		if cfg.Mode == "conn" {
			// Installed first: the hook applies to Conns made afterwards.
			defer func() { _ = conn.Close() }()
		}
	case "cluster":
		co := &redis.ClusterOptions{Addrs: cfg.ClusterAddrs, Username: cfg.Username, Password: cfg.Password}
		c := redis.NewClusterClient(co)
		installed, rdb, watch = c, c, c.Watch
		plain = redis.NewClusterClient(co)
	default:
		return fmt.Errorf("unknown mode %q (pool, conn, cluster)", cfg.Mode)
	}
	ch := redis.NewClient(&redis.Options{Addr: cfg.ChannelAddr})
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	so := client.ShimOptions{
		Channel: cfg.Channel, ChannelClient: ch, Servers: cfg.Servers, AnyServer: cfg.AnyServer,
		LocalTTL: ms(cfg.LocalTTLms), StaleGrace: ms(cfg.StaleGraceMs), HotModeLinger: ms(cfg.LingerMs),
		MaxEntries: cfg.MaxEntries,
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, nil)),
		ChannelSecret: func() []byte {
			if cfg.ChannelSecret == "" {
				return nil
			}
			return []byte(cfg.ChannelSecret)
		}(),
		// Server-assisted invalidation is a Go-only extra: the suite checks
		// what every shim does.
		DisableTracking: !cfg.Tracking,
	}
	shim, err := client.Install(installed, so)
	if err != nil {
		return fmt.Errorf("install shim: %w", err)
	}
	if cfg.Mode == "conn" {
		conn = installed.(*redis.Client).Conn()
		rdb = conn
	}
	enc := json.NewEncoder(out)
	select {
	case <-shim.Synced():
	case <-time.After(10 * time.Second):
		return enc.Encode(map[string]any{"error": "snapshot never loaded"})
	}
	if err := enc.Encode(map[string]any{"ready": true}); err != nil {
		return err
	}
	str := func(v string, err error) (any, error) {
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return v, err
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return fmt.Errorf("parse request: %w", err)
		}
		k := req.key()
		res := map[string]any{}
		var err error
		switch req.Op {
		case "get":
			res["value"], err = str(rdb.Get(ctx, k).Result())
		case "mget":
			res["values"], err = rdb.MGet(ctx, req.Keys...).Result()
		case "hget":
			res["value"], err = str(rdb.HGet(ctx, k, req.Field).Result())
		case "hmget":
			res["values"], err = rdb.HMGet(ctx, k, req.Fields...).Result()
		case "hgetall":
			res["hash"], err = rdb.HGetAll(ctx, k).Result()
		case "set":
			err = rdb.Set(ctx, k, req.Value, 0).Err()
		case "hset":
			err = rdb.HSet(ctx, k, req.Field, req.Value).Err()
		case "del":
			err = rdb.Del(ctx, k).Err()
		case "do":
			args := make([]any, len(req.Args))
			for i, a := range req.Args {
				args[i] = a
			}
			c := redis.NewCmd(ctx, args...)
			_ = rdb.(interface {
				Process(context.Context, redis.Cmder) error
			}).Process(ctx, c)
			err = c.Err()
			if errors.Is(err, redis.Nil) {
				err = nil
			}
		case "pipeline_set":
			_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Set(ctx, k, req.Value, 0).Err() })
		case "pipeline_get":
			var c *redis.StringCmd
			_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error { c = p.Get(ctx, k); return nil })
			if err == nil || errors.Is(err, redis.Nil) {
				res["value"], err = str(c.Result())
			}
		case "pipeline_write_read":
			var c *redis.StringCmd
			_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, k, req.Value, 0)
				c = p.Get(ctx, k)
				return nil
			})
			if err == nil {
				res["value"], err = str(c.Result())
			}
		case "multi_get":
			var c *redis.StringCmd
			_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error { c = p.Get(ctx, k); return nil })
			if err == nil || errors.Is(err, redis.Nil) {
				res["value"], err = str(c.Result())
			}
		case "select":
			// Through the client the application uses: on a pool it moves
			// one pooled connection, on a Conn the connection.
			c := redis.NewCmd(ctx, "select", req.DB)
			_ = rdb.(interface {
				Process(context.Context, redis.Cmder) error
			}).Process(ctx, c)
			err = c.Err()
		case "pipeline_select_get":
			var c *redis.StringCmd
			_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Do(ctx, "select", req.DB)
				c = p.Get(ctx, k)
				return nil
			})
			if err == nil || errors.Is(err, redis.Nil) {
				res["value"], err = str(c.Result())
			}
		case "watch_get":
			err = watch(ctx, func(tx *redis.Tx) error {
				v, gerr := str(tx.Get(ctx, k).Result())
				if gerr != nil {
					return gerr
				}
				res["value"] = v
				_, perr := tx.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, k); return nil })
				if errors.Is(perr, redis.Nil) {
					perr = nil
				}
				return perr
			}, k)
		case "burst":
			vals := make([]any, req.N)
			var wg, start sync.WaitGroup
			start.Add(1)
			for i := range req.N {
				wg.Go(func() { start.Wait(); vals[i], _ = str(rdb.Get(ctx, k).Result()) })
			}
			start.Done()
			wg.Wait()
			res["values"] = vals
		case "hburst":
			vals := make([]any, req.N)
			var wg, start sync.WaitGroup
			start.Add(1)
			for i := range req.N {
				wg.Go(func() { start.Wait(); vals[i] = goHashRead(ctx, rdb, k, req.Field, i) })
			}
			start.Done()
			wg.Wait()
			res["values"] = vals
		case "hot":
			res["hot"] = hotFor(shim, k)
		case "stats":
			st := shim.Stats()
			sub := shim.Subscriber().Stats()
			res["entries"], res["hot_keys"], res["hot_mode"] = st.Entries, st.HotKeys, st.HotMode
			res["hits"], res["reloads"], res["messages"] = st.Hits+st.StaleHits, sub.Reloads, sub.Messages
			res["bad_messages"], res["channel_up"] = st.Bad, st.ChannelUp
		case "watch":
			end := time.Now().Add(ms(req.Ms))
			reads, lastBad := 0, int64(0)
			for time.Now().Before(end) {
				start := time.Now().UnixNano()
				v, _ := rdb.Get(ctx, k).Result()
				reads++
				if req.Want == nil || v != *req.Want {
					lastBad = start
				}
			}
			res["reads"], res["last_bad_ns"] = reads, lastBad
		case "load":
			res["reads"], res["bad"] = goLoad(rdb, k, req.Want, ms(req.Ms), max(req.Threads, 1))
		case "trace":
			res["reads"], res["errors"], res["nil"], res["first_error"], res["last_ns"] = goTrace(rdb, k, ms(req.Ms), max(req.Threads, 1))
		case "read_keys":
			reads, errs := 0, 0
			for range max(req.N, 1) {
				for _, key := range req.Keys {
					if err := rdb.Get(ctx, key).Err(); err != nil && !errors.Is(err, redis.Nil) {
						errs++
						continue
					}
					reads++
				}
			}
			res["reads"], res["errors"] = reads, errs
		case "plain_get":
			res["value"], err = str(plain.Get(ctx, k).Result())
		case "close":
			_ = shim.Close()
			return enc.Encode(res)
		default:
			err = fmt.Errorf("unknown op %q", req.Op)
		}
		if err != nil {
			res = map[string]any{"error": err.Error()}
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	return shim.Close()
}

// goHashRead is read i of an hburst: HGET, HMGET or HGETALL of k in turn;
// its value of field (nil if missing), or the error's text.
func goHashRead(ctx context.Context, rdb redis.Cmdable, k, field string, i int) any {
	switch i % 3 {
	case 0:
		v, err := rdb.HGet(ctx, k, field).Result()
		if errors.Is(err, redis.Nil) {
			return nil
		} else if err != nil {
			return err.Error()
		}
		return v
	case 1:
		vs, err := rdb.HMGet(ctx, k, field).Result()
		if err != nil {
			return err.Error()
		}
		return vs[0]
	default:
		h, err := rdb.HGetAll(ctx, k).Result()
		if err != nil {
			return err.Error()
		}
		if v, ok := h[field]; ok {
			return v
		}
		return nil
	}
}

// hotFor reports whether a live entry makes key hot and cacheable in DB 0
// (the Go shim keeps its own per-client view private; the suite decides
// local-or-remote from Redis's counters, this only paces the live test).
func hotFor(s *client.Shim, key string) bool {
	for _, e := range s.Subscriber().HotSet() {
		if string(e.Key) == key && e.Proto == "redis" && e.NS == "0" && !e.Prefix && !e.Uncacheable {
			return true
		}
	}
	return false
}

// goTrace reads k for d from threads loops and returns, for each value
// seen, the wall-clock start (Unix ns) of the last read that returned it;
// errors (other than a missing key) are counted, the first one kept.
func goTrace(rdb redis.Cmdable, k string, d time.Duration, threads int) (reads, errs, nils int, first string, last map[string]int64) {
	ctx := context.Background()
	end := time.Now().Add(d)
	last = map[string]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range threads {
		wg.Go(func() {
			mine := map[string]int64{}
			n, e, z, f := 0, 0, 0, ""
			for time.Now().Before(end) {
				start := time.Now().UnixNano()
				v, err := rdb.Get(ctx, k).Result()
				switch {
				case errors.Is(err, redis.Nil):
					n++
					z++
				case err != nil:
					e++
					if f == "" {
						f = err.Error()
					}
				default:
					n++
					mine[v] = start
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for v, ns := range mine {
				last[v] = max(last[v], ns)
			}
			reads, errs, nils = reads+n, errs+e, nils+z
			if first == "" {
				first = f
			}
		})
	}
	wg.Wait()
	return reads, errs, nils, first, last
}

func goLoad(rdb redis.Cmdable, k string, want *string, d time.Duration, threads int) (int, int) {
	ctx := context.Background()
	end := time.Now().Add(d)
	var mu sync.Mutex
	reads, bad := 0, 0
	var wg sync.WaitGroup
	for range threads {
		wg.Go(func() {
			n, b := 0, 0
			for time.Now().Before(end) {
				v, _ := rdb.Get(ctx, k).Result()
				n++
				if want != nil && v != *want {
					b++
				}
			}
			mu.Lock()
			reads += n
			bad += b
			mu.Unlock()
		})
	}
	wg.Wait()
	return reads, bad
}
