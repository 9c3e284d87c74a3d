package publish_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/event/envelope"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
)

// A v2 publisher with long keys never sends a message over 1 MiB: the
// batch is split by bytes, every event arrives once and in order, signed
// with the secret when one is set; the snapshot is signed too. An event no
// message can hold is dropped and counted, not sent.
func TestPublishSplitsAndSigns(t *testing.T) {
	for _, secret := range [][]byte{nil, []byte("k3y")} {
		t.Run(fmt.Sprintf("signed=%v", secret != nil), func(t *testing.T) {
			r := testutil.StartRedis(t)
			rdb := dial(t, "redis://"+r.Addr+"/0", publish.TLSOptions{})
			msgs := subscribe(t, rdb, "hk", false)
			p := newPublisher(t, rdb, publish.Options{Channel: "hk", Node: "n1", Format: publish.FormatV2, StartSeq: 1, Secret: secret,
				BatchWindow: 50 * time.Millisecond, MaxBatch: 4096})
			long := strings.Repeat("\x01", 60<<10) // 360 KiB once escaped
			const n = 40
			for i := range n {
				p.Emit(hot(fmt.Sprintf("%s%03d", long, i)))
			}
			p.Emit(hot(strings.Repeat("\x01", 200<<10))) // 1.2 MiB escaped: no message holds it
			p.Emit(hot("last"))
			var got []*event.Event
			deadline := time.After(10 * time.Second)
			for len(got) < n+1 {
				select {
				case m := <-msgs:
					b := []byte(m.Payload)
					if len(b) > event.MaxMessageBytes {
						t.Fatalf("message of %d bytes", len(b))
					}
					if secret != nil {
						body, err := envelope.Open(secret, b)
						if err != nil {
							t.Fatalf("message not signed: %v", err)
						}
						b = body
					} else if envelope.IsEnvelope(b) {
						t.Fatalf("unsigned publisher sent an envelope")
					}
					evs, err := event.DecodeMessage(nil, b)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, evs...)
				case <-deadline:
					t.Fatalf("%d of %d events received", len(got), n+1)
				}
			}
			for i, e := range got[:n] {
				if !strings.HasSuffix(string(e.Key), fmt.Sprintf("%03d", i)) {
					t.Fatalf("event %d out of order", i)
				}
			}
			if string(got[n].Key) != "last" {
				t.Fatalf("last event %q", got[n].Key[:10])
			}
			if st := p.Stats(); st.Oversize != 1 || st.Messages < 14 {
				t.Errorf("oversize %d (want 1), messages %d (want >= 14: about 2 long keys each)", st.Oversize, st.Messages)
			}
			// The snapshot: signed with the secret, and whole (the
			// oversize key included: subscribers see the seq gap its
			// drop leaves and reload it from there).
			deadline2 := time.Now().Add(5 * time.Second)
			for {
				doc, err := rdb.Get(context.Background(), publish.SnapshotKey("hk")).Bytes()
				if err == nil {
					if secret != nil {
						if doc, err = envelope.Open(secret, doc); err != nil {
							t.Fatalf("snapshot not signed: %v", err)
						}
					}
					snap, bad, err := event.DecodeSnapshot(doc)
					if err == nil && bad == 0 && len(snap.Keys) == n+2 {
						break
					}
				}
				if time.Now().After(deadline2) {
					t.Fatalf("snapshot never held the %d keys signed", n+2)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

func TestLoadSecret(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		content string
		want    string
		err     string
	}{
		{"s3cret\n", "s3cret", ""},
		{"s3cret", "s3cret", ""},
		{"two\n\n", "two\n", ""},
		{"", "", "empty"},
		{"\n", "", "empty"},
		{strings.Repeat("x", 5000), "", "longer"},
	} {
		p := filepath.Join(dir, "s")
		os.WriteFile(p, []byte(c.content), 0o600)
		got, err := publish.LoadSecret(p)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want an error with %q", c.content, err, c.err)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("%q: %q %v, want %q", c.content, got, err, c.want)
		}
	}
	if _, err := publish.LoadSecret(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file: no error")
	}
}
