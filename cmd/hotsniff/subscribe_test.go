package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/redis/go-redis/v9"
)

// execute runs the CLI in-process and returns stdout, stderr and the error.
func execute(ctx context.Context, args ...string) (string, string, error) {
	var out, errb bytes.Buffer
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errb)
	err := root.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

// startSubscribe runs `hotsniff subscribe` until the returned stop is called
// and waits until it is subscribed.
func startSubscribe(t *testing.T, rdb *redis.Client, args ...string) (*testutil.Buffer, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &testutil.Buffer{}
	done := make(chan error, 1)
	go func() {
		root := newRootCmd()
		root.SetArgs(append([]string{"subscribe"}, args...))
		root.SetOut(out)
		root.SetErr(out)
		done <- root.ExecuteContext(ctx)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for rdb.PubSubNumSub(context.Background(), "hk").Val()["hk"] == 0 {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("subscribe never subscribed: %v", out.Lines())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return out, func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(3 * time.Second):
			return fmt.Errorf("subscribe did not stop")
		}
	}
}

func waitLines(t *testing.T, b *testutil.Buffer, n int) []string {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for len(b.Lines()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("want %d lines, have %q", n, b.Lines())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return b.Lines()
}

func decodeLine(t *testing.T, line string) *event.Event {
	t.Helper()
	var e event.Event
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	return &e
}

func TestHotkeysAndSubscribe(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	url := "redis://" + r.Addr + "/0"
	ctx := context.Background()

	out, _, err := execute(ctx, "hotkeys", "add", "pre", "--redis-url", url, "--channel", "hk", "--ttl", "1m")
	if err != nil {
		t.Fatal(err)
	}
	pre := decodeLine(t, strings.TrimSpace(out))
	if pre.Type != "hot" || pre.Source != "manual" || pre.TTLms != 60000 || pre.NS != "0" || !strings.HasPrefix(pre.Node, "manual@") {
		t.Errorf("hotkeys add printed %s", out)
	}

	sub, stop := startSubscribe(t, rdb, "--redis-url", url, "--channel", "hk")
	first := decodeLine(t, waitLines(t, sub, 1)[0])
	if string(first.Key) != "pre" || first.Source != "manual" {
		t.Errorf("snapshot entry printed first: %+v", first)
	}

	t.Setenv("HOTSNIFF_REDIS_URL", url) // the flag may come from the environment
	if _, _, err := execute(ctx, "hotkeys", "add", "--channel", "hk", "--proto", "memcache", "--server", "10.0.0.7:11211", "--ttl", "5m", "--key-b64", "/wA="); err != nil {
		t.Fatal(err)
	}
	if _, _, err := execute(ctx, "hotkeys", "remove", "pre", "--channel", "hk"); err != nil {
		t.Fatal(err)
	}
	lines := waitLines(t, sub, 3)
	add, rm := decodeLine(t, lines[1]), decodeLine(t, lines[2])
	if !bytes.Equal(add.Key, []byte{0xff, 0}) || add.Proto != "memcache" || add.NS != "" || add.Server != "10.0.0.7:11211" || add.TTLms != 300000 || add.Type != "hot" {
		t.Errorf("add: %s", lines[1])
	}
	if !strings.Contains(lines[1], `"key_b64":"/wA="`) {
		t.Errorf("non-UTF-8 key not as key_b64: %s", lines[1])
	}
	if string(rm.Key) != "pre" || rm.Type != "cold" || rm.Source != "manual" {
		t.Errorf("remove: %s", lines[2])
	}
	if err := stop(); err != nil {
		t.Errorf("subscribe returned %v on cancel", err)
	}
	// The snapshot now holds only the memcache key.
	doc, _ := rdb.Get(ctx, "hk:snapshot").Result()
	var s event.Snapshot
	if err := json.Unmarshal([]byte(doc), &s); err != nil || len(s.Keys) != 1 || s.Keys[0].Proto != "memcache" {
		t.Errorf("snapshot %s", doc)
	}

	// A fresh subscriber in text form starts from that snapshot.
	sub2, stop2 := startSubscribe(t, rdb, "--redis-url", url, "--channel", "hk", "--output", "text")
	lines = waitLines(t, sub2, 2)
	if !strings.HasPrefix(lines[0], "TIME ") || !strings.Contains(lines[1], ` hot* (snap) `) || !strings.Contains(lines[1], `"\xff\x00"`) {
		t.Errorf("text output %q", lines)
	}
	if err := stop2(); err != nil {
		t.Error(err)
	}
}

func TestExitCodes(t *testing.T) {
	port := testutil.FreePort(t)
	t.Setenv("HOTSNIFF_REDIS_URL", "")
	cases := []struct {
		args []string
		code int
	}{
		{[]string{"subscribe", "--redis-url", fmt.Sprintf("redis://127.0.0.1:%d", port)}, 1},
		{[]string{"subscribe", "--redis-url", "http://x"}, 2},
		{[]string{"subscribe"}, 2},
		{[]string{"subscribe", "--output", "yaml", "--redis-url", "redis://h:1"}, 2},
		{[]string{"hotkeys", "add"}, 2},
		{[]string{"hotkeys", "add", "k", "--proto", "http", "--redis-url", "redis://h:1"}, 2},
		{[]string{"hotkeys", "add", "k", "--ttl", "-1s", "--redis-url", "redis://h:1"}, 2},
		{[]string{"hotkeys", "remove", "k", "--redis-url", fmt.Sprintf("redis://127.0.0.1:%d", port)}, 1},
		{[]string{"hotkeys", "add", "k", "--redis-url", "redis://h:1", "--redis-ca-file", "/x"}, 2},
		{[]string{"hotkeys", "add", "k", "--redis-url", "rediss://h:1", "--redis-ca-file", "/nonexistent"}, 1},
	}
	for _, c := range cases {
		if got := runWith(c.args, io.Discard, io.Discard); got != c.code {
			t.Errorf("%v: exit %d, want %d", c.args, got, c.code)
		}
	}
	_, _, err := execute(context.Background(), "subscribe", "--redis-url", fmt.Sprintf("redis://u:hunter2@127.0.0.1:%d", port))
	if err == nil || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "\n") ||
		!strings.Contains(err.Error(), "connect redis") {
		t.Errorf("unreachable: %v", err)
	}
}

// TestSubscribeSIGTERM sends a real SIGTERM to the test process while
// subscribe runs in it: the command must catch it and return nil (exit 0).
func TestSubscribeSIGTERM(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	done := make(chan int, 1)
	go func() {
		done <- runWith([]string{"subscribe", "--redis-url", "redis://" + r.Addr, "--channel", "hk"}, io.Discard, io.Discard)
	}()
	// Subscribed implies the signal handler is in place.
	deadline := time.Now().Add(5 * time.Second)
	for rdb.PubSubNumSub(context.Background(), "hk").Val()["hk"] == 0 {
		if time.Now().After(deadline) {
			t.Fatal("subscribe never subscribed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d on SIGTERM, want 0", code)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("subscribe did not stop on SIGTERM")
	}
}
