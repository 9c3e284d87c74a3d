package publish_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/internal/testing/testutil"
	"github.com/hotsniff/hotsniff/publish"
	"github.com/redis/go-redis/v9"
)

func ev(typ, key string) *event.Event {
	e := &event.Event{Type: typ, Proto: "redis", Server: "10.0.0.5:6379", NS: "0", Key: []byte(key),
		TTLms: 60000, TS: time.Now(), Source: event.SourceDetected}
	if typ == event.TypeHot {
		e.QPS = 1500
	}
	return e
}

// TestBatchFormat: with the v2 format, events emitted together travel in
// one message, each with its own consecutive seq, and decode with
// event.DecodeMessage; the v1 default sends one event per message.
func TestBatchFormat(t *testing.T) {
	srv := testutil.StartRedis(t)
	rdb := dial(t, "redis://"+srv.Addr, publish.TLSOptions{})
	for _, format := range []string{publish.FormatV1, publish.FormatV2} {
		t.Run(format, func(t *testing.T) {
			ch := subscribe(t, rdb, "b-"+format, false)
			p := newPublisher(t, rdb, publish.Options{Channel: "b-" + format, Node: "n1", Format: format, BatchWindow: 20 * time.Millisecond})
			for i := range 50 {
				p.Emit(ev(event.TypeHot, fmt.Sprint("k", i)))
			}
			want := 50
			if format == publish.FormatV2 {
				want = 1
			}
			msgs := receive(t, ch, want, 5*time.Second)
			var evs []*event.Event
			for _, m := range msgs {
				var err error
				if evs, err = event.DecodeMessage(evs, []byte(m)); err != nil {
					t.Fatal(err)
				}
			}
			if len(evs) != 50 {
				t.Fatalf("%d events in %d messages", len(evs), len(msgs))
			}
			for i, e := range evs {
				if string(e.Key) != fmt.Sprint("k", i) || e.Seq != evs[0].Seq+uint64(i) || e.Node != "n1" {
					t.Fatalf("event %d: %+v", i, e)
				}
			}
			select {
			case m := <-ch:
				t.Fatalf("extra message %q", m.Payload)
			case <-time.After(100 * time.Millisecond):
			}
			if st := p.Stats(); st.Messages != uint64(want) {
				t.Fatalf("Stats.Messages %d, want %d", st.Messages, want)
			}
		})
	}
	if _, err := publish.New(rdb, publish.Options{Format: "v3", Logger: quiet}); err == nil {
		t.Fatal("format v3 accepted")
	}
}

// TestBudget: a node over its message budget sheds refreshes (counted, no
// seq taken, so subscribers see no gap) and delays everything else, which
// is never lost: every invalidate and cold arrives, in seq order, and the
// message rate stays near the budget.
func TestBudget(t *testing.T) {
	srv := testutil.StartRedis(t)
	rdb := dial(t, "redis://"+srv.Addr, publish.TLSOptions{})
	// The node must really be over its budget. In v1 every event is a
	// message: 840 in 0.2s are 20 times 200/s. In v2 events that queue
	// while a pipeline is in flight ride in the next message, so a writer
	// whose round trips take 5ms (a loaded machine) stays under 200/s by
	// itself and nothing is shed. At 10/s the one-message burst is spent
	// by the first batch, and the refreshes emitted in the next 100ms are
	// shed however slow the round trips are.
	for _, tc := range []struct {
		format string
		budget float64
	}{{publish.FormatV1, 200}, {publish.FormatV2, 10}} {
		format, budget := tc.format, tc.budget
		t.Run(format, func(t *testing.T) {
			ch := subscribe(t, rdb, "bud-"+format, false)
			// The bucket starts full when the publisher is made: the rate
			// is measured from then, not from after the first emits.
			created := time.Now()
			p := newPublisher(t, rdb, publish.Options{Channel: "bud-" + format, Node: "noisy", Format: format, Budget: budget})
			for i := range 20 {
				p.Emit(ev(event.TypeHot, fmt.Sprint("k", i)))
			}
			// 0.2 s of a noisy node: 400 invalidates and 400 refreshes
			// of the same 20 keys, then every key goes cold.
			start := time.Now()
			for i := range 400 {
				p.Emit(ev(event.TypeInvalidate, fmt.Sprint("k", i%20)))
				p.Emit(ev(event.TypeHot, fmt.Sprint("k", i%20)))
				time.Sleep(time.Until(start.Add(time.Duration(i+1) * 500 * time.Microsecond)))
			}
			for i := range 20 {
				p.Emit(ev(event.TypeCold, fmt.Sprint("k", i)))
			}
			var got []*event.Event
			msgs := 0
			deadline := time.After(30 * time.Second)
			for colds := 0; colds < 20; {
				select {
				case m := <-ch:
					msgs++
					n := len(got)
					var err error
					if got, err = event.DecodeMessage(got, []byte(m.Payload)); err != nil {
						t.Fatal(err)
					}
					for _, e := range got[n:] {
						if e.Type == event.TypeCold {
							colds++
						}
					}
				case <-deadline:
					t.Fatalf("colds did not all arrive: %d events in %d messages", len(got), msgs)
				}
			}
			el := time.Since(created)
			st := p.Stats()
			inv := 0
			for i, e := range got {
				if i > 0 && e.Seq != got[i-1].Seq+1 {
					t.Fatalf("seq gap at %d: %d after %d", i, e.Seq, got[i-1].Seq)
				}
				if e.Type == event.TypeInvalidate {
					inv++
				}
			}
			rate := float64(msgs) / el.Seconds()
			t.Logf("%s: %d messages in %v (%.0f/s, budget %.0f/s), %d events, %d invalidates, shed %d refreshes, delayed %d events",
				format, msgs, el.Round(time.Millisecond), rate, budget, len(got), inv, st.Shed, st.Delayed)
			if inv != 400 {
				t.Fatalf("%d of 400 invalidates arrived", inv)
			}
			if st.Shed == 0 {
				t.Fatal("nothing shed")
			}
			if st.Dropped != 0 {
				t.Fatalf("%d events dropped", st.Dropped)
			}
			// The rate plus the burst (a tenth of a second's worth).
			if limit := budget*el.Seconds() + budget/10 + 2; float64(msgs) > limit {
				t.Fatalf("%d messages, budget allows %.0f", msgs, limit)
			}
		})
	}
}

// holdPublish is a go-redis hook that holds every pipeline carrying a
// PUBLISH until release is closed, telling entered when the first one is
// held: a Redis slow to answer, made deterministic.
type holdPublish struct {
	entered chan struct{}
	once    sync.Once
	release chan struct{}
}

func (h *holdPublish) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdPublish) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *holdPublish) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "publish" {
				h.once.Do(func() { close(h.entered) })
				<-h.release
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestBudgetSpentWhileInFlight: the budget a batch uses is spent when the
// batch is sent, not when Redis answers. Before, a refresh emitted during
// a slow round trip saw the budget still available and was queued instead
// of shed; with Redis slower than the budget's message interval (a loaded
// node) nothing was ever shed.
func TestBudgetSpentWhileInFlight(t *testing.T) {
	srv := testutil.StartRedis(t)
	for _, format := range []string{publish.FormatV1, publish.FormatV2} {
		t.Run(format, func(t *testing.T) {
			rdb := dial(t, "redis://"+srv.Addr, publish.TLSOptions{})
			h := &holdPublish{entered: make(chan struct{}), release: make(chan struct{})}
			rdb.AddHook(h)
			released := false
			release := func() {
				if !released {
					released = true
					close(h.release)
				}
			}
			defer release()
			// One message per 100s, burst one: no token comes back
			// during the test, however slowly it runs.
			p := newPublisher(t, rdb, publish.Options{Channel: "inflight-" + format, Node: "n1", Format: format, Budget: 0.01})
			p.Emit(ev(event.TypeHot, "k")) // a first hot: sent, spends the one token
			seq := p.Stats().Seq
			select {
			case <-h.entered:
			case <-time.After(30 * time.Second):
				t.Fatal("the first hot never reached Redis")
			}
			p.Emit(ev(event.TypeHot, "k")) // a refresh while that is in flight
			st := p.Stats()
			release()
			if st.Shed != 1 || st.Seq != seq {
				t.Fatalf("refresh during the round trip: shed %d, seq %d; want shed 1, seq %d (the budget is spent)", st.Shed, st.Seq, seq)
			}
		})
	}
}
