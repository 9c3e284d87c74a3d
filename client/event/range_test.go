package event

import (
	"errors"
	"strings"
	"testing"
)

// TestDecodeRanges: numbers no field can hold, and oversized messages, are
// told apart from malformed ones, so a subscriber counts them by reason and
// never lets one through (docs/channel-protocol.md, "Bad messages").
func TestDecodeRanges(t *testing.T) {
	ok := `{"v":1,"seq":7,"type":"hot","proto":"redis","server":"","ns":"0","key":"k","qps":1,"ttl_ms":60000,"ts":"2026-11-29T18:00:00.123456Z","source":"manual","node":"n"}`
	if _, err := DecodeMessage(nil, []byte(ok)); err != nil {
		t.Fatalf("valid event: %v", err)
	}
	sub := func(old, new string) string {
		if !strings.Contains(ok, old) {
			t.Fatalf("%q not in the base event", old)
		}
		return strings.Replace(ok, old, new, 1)
	}
	for name, msg := range map[string]string{
		"ttl 400 digits":     sub(`"ttl_ms":60000`, `"ttl_ms":`+strings.Repeat("9", 400)),
		"ttl 1e400":          sub(`"ttl_ms":60000`, `"ttl_ms":1e400`),
		"ttl Infinity":       sub(`"ttl_ms":60000`, `"ttl_ms":Infinity`),
		"ttl negative":       sub(`"ttl_ms":60000`, `"ttl_ms":-1`),
		"ttl over a day":     sub(`"ttl_ms":60000`, `"ttl_ms":86400001`),
		"ttl fraction":       sub(`"ttl_ms":60000`, `"ttl_ms":1.5`),
		"v 1e400":            sub(`"v":1`, `"v":1e400`),
		"v 3":                sub(`"v":1`, `"v":3`),
		"v absent":           sub(`"v":1,`, ``),
		"seq 2^53":           sub(`"seq":7`, `"seq":9007199254740992`),
		"seq negative":       sub(`"seq":7`, `"seq":-7`),
		"qps NaN":            sub(`"qps":1`, `"qps":NaN`),
		"qps -Infinity":      sub(`"qps":1`, `"qps":-Infinity`),
		"qps 1e400":          sub(`"qps":1`, `"qps":1e400`),
		"qps negative":       sub(`"qps":1`, `"qps":-1`),
		"write_qps 1e999":    sub(`"qps":1`, `"qps":1,"write_qps":1e999`),
		"sample 0":           sub(`"qps":1`, `"qps":1,"sample":0`),
		"sample 2":           sub(`"qps":1`, `"qps":1,"sample":2`),
		"value_bytes -5":     sub(`"qps":1`, `"qps":1,"value_bytes":-5`),
		"batch with one bad": `{"v":2,"node":"n","events":[` + ok + `,` + sub(`"ttl_ms":60000`, `"ttl_ms":1e400`) + `]}`,
		"batch v 1e400":      `{"v":1e400,"node":"n","events":[` + ok + `]}`,
	} {
		evs, err := DecodeMessage(nil, []byte(msg))
		if !errors.Is(err, ErrOutOfRange) || len(evs) != 0 {
			t.Errorf("%s: %d events, err %v; want ErrOutOfRange", name, len(evs), err)
		}
	}
	big := `{"v":2,"node":"n","events":[` + strings.Repeat(ok+",", MaxMessageBytes/len(ok)) + ok + `]}`
	if _, err := DecodeMessage(nil, []byte(big)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("message of %d bytes: %v; want ErrTooLarge", len(big), err)
	}
	if _, err := DecodeMessage(nil, []byte(`{"v":1,"seq":"x"}`)); err == nil || errors.Is(err, ErrOutOfRange) {
		t.Errorf("malformed: %v; want a plain decode error", err)
	}
}

// TestDecodeSnapshotSkipsBadEntries: a bad entry is skipped and counted,
// the rest applied; an oversized document is rejected unparsed.
func TestDecodeSnapshotSkipsBadEntries(t *testing.T) {
	e := `{"v":1,"seq":7,"type":"hot","proto":"redis","server":"","ns":"0","key":"%s","qps":1,"ttl_ms":%s,"ts":"2026-11-29T18:00:00.123456Z","source":"manual","node":"n"}`
	doc := `{"v":1,"seq":9,"ts":"","node":"n","nodes":[{"node":"n","seq":9,"ts":"","keys":3},{"node":"m","seq":1e400}],"keys":[` +
		strings.Replace(strings.Replace(e, "%s", "a", 1), "%s", "0", 1) + `,` +
		strings.Replace(strings.Replace(e, "%s", "b", 1), "%s", strings.Repeat("9", 400), 1) + `,` +
		strings.Replace(strings.Replace(e, "%s", strings.Repeat("k", MaxKeyBytes+1), 1), "%s", "0", 1) + `,` +
		strings.Replace(strings.Replace(e, "%s", "c", 1), "%s", "1000", 1) + `]}`
	snap, bad, err := DecodeSnapshot([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if bad != 3 || len(snap.Keys) != 2 || string(snap.Keys[0].Key) != "a" || string(snap.Keys[1].Key) != "c" || len(snap.Nodes) != 1 {
		t.Fatalf("bad %d, keys %d, nodes %+v", bad, len(snap.Keys), snap.Nodes)
	}
	if _, _, err := DecodeSnapshot(make([]byte, MaxSnapshotBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized snapshot: %v", err)
	}
}
