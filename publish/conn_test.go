package publish_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/client"
	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
)

func TestParseURL(t *testing.T) {
	good := []struct {
		url     string
		cluster bool
		addrs   string
		db      int
		user    string
		tls     bool
	}{
		{url: "redis://127.0.0.1:6379/0", addrs: "127.0.0.1:6379"},
		{url: "redis://cache:7000/3", addrs: "cache:7000", db: 3},
		{url: "redis://alice:s3cret@cache:7000", addrs: "cache:7000", user: "alice"},
		{url: "rediss://cache:6380", addrs: "cache:6380", tls: true},
		{url: "redis://a:7000?cluster=true", cluster: true, addrs: "a:7000"},
		{url: "redis://a:7000?addr=b:7001&addr=c:7002", cluster: true, addrs: "a:7000,b:7001,c:7002"},
		{url: "rediss://u:p@a:7000?cluster=1&dial_timeout=1s", cluster: true, addrs: "a:7000", user: "u", tls: true},
	}
	for _, c := range good {
		tg, err := publish.ParseURL(c.url)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if tg.Cluster != c.cluster {
			t.Errorf("%s: cluster %v", c.url, tg.Cluster)
			continue
		}
		if c.cluster {
			o := tg.ClusterOpts
			if strings.Join(o.Addrs, ",") != c.addrs || o.Username != c.user || (o.TLSConfig != nil) != c.tls {
				t.Errorf("%s: %+v", c.url, o)
			}
		} else {
			o := tg.Single
			if o.Addr != c.addrs || o.DB != c.db || o.Username != c.user || (o.TLSConfig != nil) != c.tls {
				t.Errorf("%s: %+v", c.url, o)
			}
		}
	}
	bad := map[string]string{
		"":                                      "empty",
		"http://x:1":                            "scheme must be redis:// or rediss://",
		"redis://:6379":                         "missing host",
		"redis://h:99999":                       "bad port",
		"redis://h:1/x":                         "invalid database number",
		"redis://h:1?cluster=maybe":             "cluster must be true or false",
		"redis://h:1/2?cluster=true":            "a cluster has no database 2",
		"redis://h:1?bogus=1":                   "unexpected option: bogus",
		"redis://u:hunter2@h:1?addr=nope":       "unable to parse addr param",
		"redis://u:hunter2@h:1?dial_timeout=xx": "invalid dial_timeout duration",
		"redis://u:hunter2@h\x7f:1":             "parse redis url",
	}
	for url, want := range bad {
		_, err := publish.ParseURL(url)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want it to say %q", url, err, want)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error leaks the password or spans lines: %v", url, err)
		}
	}
	if _, err := publish.Dial("redis://h:1", publish.TLSOptions{CAFile: "x"}); err == nil || !strings.Contains(err.Error(), "need a rediss:// URL") {
		t.Errorf("TLS options on redis://: %v", err)
	}
	if _, err := publish.Dial("rediss://h:1", publish.TLSOptions{CAFile: "/nonexistent"}); err == nil || !strings.Contains(err.Error(), "read CA file") {
		t.Errorf("missing CA file: %v", err)
	}
}

func TestACLUser(t *testing.T) {
	r := testutil.StartRedis(t, "--user", "default", "off", "--user", "pub", "on", ">s3cret", "~hk*", "&hk*", "+@all")
	ctx := context.Background()
	rdb := dial(t, "redis://pub:s3cret@"+r.Addr, publish.TLSOptions{})
	msgs := subscribe(t, rdb, "hk", false)
	p := newPublisher(t, rdb, publish.Options{Channel: "hk", Node: "n1"})
	p.Emit(hot("acl"))
	got := receive(t, msgs, 1, 3*time.Second)
	if !strings.Contains(got[0], `"key":"acl"`) {
		t.Errorf("got %s", got[0])
	}
	waitSnapshot(t, rdb, "hk", 3*time.Second, func(s *event.Snapshot) bool { return len(s.Keys) == 1 })

	bad := dial(t, "redis://pub:wrong@"+r.Addr, publish.TLSOptions{})
	err := bad.Ping(ctx).Err()
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("wrong password: %v", err)
	}
	// The ACL user may not touch other keys: the publisher's keys are all
	// under the channel name, so ~<channel>* suffices.
	if err := rdb.Set(ctx, "other", "x", 0).Err(); err == nil {
		t.Error("ACL not in force")
	}
}

func TestTLS(t *testing.T) {
	pk := makePKI(t)
	tlsPort := testutil.FreePort(t)
	srv, err := tryRedisOn(t, testutil.FreePort(t),
		"--tls-port", fmt.Sprint(tlsPort), "--tls-cert-file", pk.ServerCert, "--tls-key-file", pk.ServerKey,
		"--tls-ca-cert-file", pk.CA, "--tls-auth-clients", "optional")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server with TLS: %v", err)
		}
		t.Skipf("redis-server lacks TLS support (%v)", err)
	}
	_ = srv
	url := fmt.Sprintf("rediss://127.0.0.1:%d", tlsPort)
	ctx := context.Background()

	rdb := dial(t, url, publish.TLSOptions{CAFile: pk.CA})
	msgs := subscribe(t, rdb, "hk", false)
	p := newPublisher(t, rdb, publish.Options{Channel: "hk", Node: "n1"})
	p.Emit(hot("tls"))
	if got := receive(t, msgs, 1, 3*time.Second); !strings.Contains(got[0], `"key":"tls"`) {
		t.Errorf("got %s", got[0])
	}
	waitSnapshot(t, rdb, "hk", 3*time.Second, func(s *event.Snapshot) bool { return len(s.Keys) == 1 })

	withCert := dial(t, url, publish.TLSOptions{CAFile: pk.CA, CertFile: pk.ClientCert, KeyFile: pk.ClientKey})
	if err := withCert.Ping(ctx).Err(); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	untrusted := dial(t, url, publish.TLSOptions{})
	if err := untrusted.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("server cert from an unknown CA accepted: %v", err)
	}
	insecure := dial(t, url, publish.TLSOptions{InsecureSkipVerify: true})
	if err := insecure.Ping(ctx).Err(); err != nil {
		t.Errorf("insecure-skip-verify: %v", err)
	}
}

// TestCluster publishes through a three-master cluster: messages go out with
// SPUBLISH and reach SSUBSCRIBE subscribers (a raw one and the client
// package's), and the snapshot and its sections hash share a slot.
func TestCluster(t *testing.T) {
	addrs := startCluster(t)
	url := "redis://" + addrs[0] + "?cluster=true"
	rdb := dial(t, url, publish.TLSOptions{})
	if !publish.IsCluster(rdb) {
		t.Fatal("not a cluster client")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs := subscribe(t, dial(t, url, publish.TLSOptions{}), "hk", true)
	sub := client.New(dial(t, "redis://"+addrs[1]+"?addr="+addrs[2], publish.TLSOptions{}), client.Options{Channel: "hk", Logger: quiet})
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	select {
	case <-sub.Synced():
	case <-time.After(5 * time.Second):
		t.Fatal("client never synced")
	}

	p := newPublisher(t, rdb, publish.Options{Channel: "hk", Node: "n1"})
	for i := 0; i < 50; i++ {
		p.Emit(hot(fmt.Sprintf("c%d", i)))
	}
	got := receive(t, msgs, 50, 5*time.Second)
	if !strings.Contains(got[49], `"key":"c49"`) {
		t.Errorf("last message %s", got[49])
	}
	waitSnapshot(t, rdb, "hk", 3*time.Second, func(s *event.Snapshot) bool { return len(s.Keys) == 50 })
	deadline := time.Now().Add(3 * time.Second)
	for !sub.Hot("redis", "0", []byte("c49")) {
		if time.Now().After(deadline) {
			t.Fatalf("client on the cluster never saw c49: %+v", sub.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := sub.Stats(); st.Gaps != 0 || st.Messages != 50 {
		t.Errorf("client stats %+v", st)
	}
	// A plain SUBSCRIBE does not get sharded messages: the publisher
	// really used SPUBLISH.
	if n := rdb.Publish(ctx, "hk", "x").Val(); n != 0 {
		t.Errorf("PUBLISH reached %d plain subscribers", n)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("run: %v", err)
	}
}
