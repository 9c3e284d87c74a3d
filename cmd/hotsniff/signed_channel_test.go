package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotsniff/hotsniff/event/envelope"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

// subProc is `hotsniff subscribe` as its own process.
type subProc struct {
	cmd         *exec.Cmd
	out, errOut *testutil.Buffer
}

func startSubscribeProc(t *testing.T, rdb *redis.Client, args ...string) *subProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	before := rdb.PubSubNumSub(context.Background(), "hk").Val()["hk"]
	p := &subProc{cmd: exec.Command(self, append([]string{"subscribe"}, args...)...), out: &testutil.Buffer{}, errOut: &testutil.Buffer{}}
	p.cmd.Env = append(os.Environ(), "HOTSNIFF_TEST_MAIN=1")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.errOut
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	for deadline := time.Now().Add(10 * time.Second); rdb.PubSubNumSub(context.Background(), "hk").Val()["hk"] <= before; {
		if time.Now().After(deadline) {
			t.Fatalf("subscribe never subscribed: %s", p.errOut)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return p
}

// waitKey waits for a printed line naming key.
func (p *subProc) waitKey(t *testing.T, key string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(p.out.String(), `"key":"`+key+`"`); {
		if time.Now().After(deadline) {
			t.Fatalf("subscribe never printed %s: %q\n%s", key, p.out.Lines(), p.errOut)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *subProc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("subscribe exit: %v\n%s", err, p.errOut)
	}
}

// TestSignedChannel runs the channel with a shared secret, every party its
// own process: `hotkeys add` signs its message and the snapshot; a
// `subscribe` given the same secret prints what is signed, and rejects (and
// counts, as bad_signature) an unsigned forged message, an envelope signed
// with another key and an unsigned forged snapshot, and a message over
// 1 MiB (too_large) or with a value out of range (out_of_range) even when
// signed; a `subscribe` without the secret still reads the signed channel.
func TestSignedChannel(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	url := "redis://" + r.Addr + "/0"
	ctx := context.Background()
	secret := filepath.Join(t.TempDir(), "secret")
	writeFile(t, secret, []byte("s3cret-key\n"))
	self, _ := os.Executable()
	hotkeys := func(args ...string) {
		t.Helper()
		cmd := exec.Command(self, append([]string{"hotkeys"}, append(args, "--redis-url", url, "--channel", "hk", "--channel-secret-file", secret)...)...)
		cmd.Env = append(os.Environ(), "HOTSNIFF_TEST_MAIN=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hotkeys %v: %v\n%s", args, err, out)
		}
	}

	hotkeys("add", "pre")
	doc, _ := rdb.Get(ctx, "hk:snapshot").Bytes()
	if _, err := envelope.Open([]byte("s3cret-key"), doc); err != nil {
		t.Fatalf("snapshot not signed with the secret: %v: %.120s", err, doc)
	}

	sub := startSubscribeProc(t, rdb, "--redis-url", url, "--channel", "hk", "--channel-secret-file", secret)
	sub.waitKey(t, "pre") // from the signed snapshot
	forged := func(key string) []byte {
		return []byte(fmt.Sprintf(`{"v":1,"seq":%d,"type":"hot","proto":"redis","server":"10.0.0.5:6379","ns":"0","key":%q,"qps":1,"ttl_ms":60000,"ts":"2026-12-02T00:00:00.000000Z","source":"manual","node":"forger"}`, time.Now().UnixMicro(), key))
	}
	rdb.Publish(ctx, "hk", forged("forged-unsigned"))
	rdb.Publish(ctx, "hk", envelope.Sign([]byte("another-key"), forged("forged-wrong-key")))
	// Over 1 MiB: rejected by its length; signed but out of range: by its
	// values.
	rdb.Publish(ctx, "hk", envelope.Sign([]byte("s3cret-key"), append(forged("forged-large"), make([]byte, 1<<20)...)))
	rdb.Publish(ctx, "hk", envelope.Sign([]byte("s3cret-key"), []byte(strings.Replace(string(forged("forged-range")), `"qps":1`, `"qps":1e400`, 1))))
	hotkeys("add", "real")
	sub.waitKey(t, "real")
	time.Sleep(200 * time.Millisecond)
	if strings.Contains(sub.out.String(), "forged") {
		t.Errorf("subscribe printed a forged message: %q", sub.out.Lines())
	}

	// An unsigned snapshot written by someone without the secret is not
	// applied by a subscriber that starts on it.
	rdb.Set(ctx, "hk:snapshot", `{"v":1,"seq":1,"ts":"2026-12-02T00:00:00.000000Z","node":"forger","keys":[`+string(forged("forged-snapshot"))+`]}`, 0)
	sub2 := startSubscribeProc(t, rdb, "--redis-url", url, "--channel", "hk", "--channel-secret-file", secret)
	// And a subscriber without the secret reads the signed channel.
	plain := startSubscribeProc(t, rdb, "--redis-url", url, "--channel", "hk")
	hotkeys("add", "real2")
	sub2.waitKey(t, "real2")
	plain.waitKey(t, "real2")
	if strings.Contains(sub2.out.String(), "forged") {
		t.Errorf("subscribe with the secret applied a forged snapshot: %q", sub2.out.Lines())
	}
	sub.stop(t)
	sub2.stop(t)
	plain.stop(t)
	if e := sub.errOut.String(); !strings.Contains(e, "rejected 4 channel message(s)") || !strings.Contains(e, "bad_signature=2") ||
		!strings.Contains(e, "too_large=1") || !strings.Contains(e, "out_of_range=1") {
		t.Errorf("subscribe's report of rejected messages: %q", e)
	}
	if e := sub2.errOut.String(); !strings.Contains(e, "bad_signature=1") {
		t.Errorf("forged snapshot not counted: %q", e)
	}
}
