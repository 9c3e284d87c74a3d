package httpserve

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/hotsniff/hotsniff/event"
)

// HotkeysLimit bounds a /hotkeys document. Keys may be 64 KiB and JSON
// escapes a byte into up to six: --max-hot such keys made a 400 MB
// document, built whole in memory per request. Keys beyond the bound are
// left out, the hottest kept, and the document says how many
// ("truncated").
const HotkeysLimit = 4 << 20

// HotkeysHead is the /hotkeys document without its keys.
type HotkeysHead struct {
	V      int     `json:"v"`
	Node   string  `json:"node"`
	TS     string  `json:"ts"`
	HotQPS float64 `json:"hot_qps"`
}

// WriteHotkeys writes {"v":..,"node":..,"ts":..,"hot_qps":..,"keys":[...]}
// with as many keys as fit in limit bytes, and "truncated":N when N were
// left out. Memory is one encoded event at a time. keys is reordered when
// they may not all fit.
func WriteHotkeys(w http.ResponseWriter, head HotkeysHead, keys []event.Event, limit int) {
	w.Header().Set("Content-Type", "application/json")
	bw := bufio.NewWriter(w)
	h, _ := json.Marshal(head)
	bw.Write(h[:len(h)-1])
	bw.WriteString(`,"keys":[`)
	size := len(h) + 64
	// An upper bound of the document: if it fits, the order is kept.
	bound := size
	for i := range keys {
		bound += 6*(len(keys[i].Key)+len(keys[i].Display)+len(keys[i].Server)+len(keys[i].Node)) + 512
	}
	if bound > limit {
		slices.SortStableFunc(keys, func(a, b event.Event) int { return cmp.Compare(b.QPS, a.QPS) })
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	left := 0
	n := 0
	for i := range keys {
		buf.Reset()
		if err := enc.Encode(&keys[i]); err != nil {
			left++
			continue
		}
		b := bytes.TrimRight(buf.Bytes(), "\n")
		if size+len(b)+1 > limit {
			left = len(keys) - i + left
			break
		}
		if n > 0 {
			bw.WriteByte(',')
		}
		bw.Write(b)
		size += len(b) + 1
		n++
	}
	bw.WriteByte(']')
	if left > 0 {
		bw.WriteString(`,"truncated":`)
		bw.Write([]byte(itoa(left)))
	}
	bw.WriteString("}\n")
	bw.Flush()
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
