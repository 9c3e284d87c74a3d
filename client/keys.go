package client

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// writesJSON is the table of written keys the three shims share, generated
// from redis-server's COMMAND key specs (tools/gen/shimwrites; a test in the
// daemon's module keeps it current). Embedded, so the shim needs nothing of
// the daemon.
//
//go:embed writes.json
var writesJSON []byte

// writeSpec is one key spec that writes, as the table states it (the rules
// to read it are writespec's, the generator's package).
type writeSpec struct {
	Begin     string `json:"begin"`
	Index     int    `json:"index"`
	Keyword   string `json:"keyword"`
	StartFrom int    `json:"startfrom"`
	Find      string `json:"find"`
	LastKey   int    `json:"lastkey"`
	Step      int    `json:"step"`
	Limit     int    `json:"limit"`
	KeyNumIdx int    `json:"keynumidx"`
	FirstKey  int    `json:"firstkey"`
}

type writeCommand struct {
	All       bool        `json:"all"`
	SortStore bool        `json:"sort_store"`
	Specs     []writeSpec `json:"specs"`
}

// writeTable maps a lower-case command name to what it writes; commands
// that write no key are absent.
var writeTable = func() map[string]writeCommand {
	var doc struct {
		Commands map[string]writeCommand `json:"commands"`
	}
	if err := json.Unmarshal(writesJSON, &doc); err != nil {
		panic(fmt.Sprintf("client: embedded writes.json: %v", err))
	}
	m := make(map[string]writeCommand, len(doc.Commands))
	for name, c := range doc.Commands {
		m[strings.ToLower(name)] = c
	}
	return m
}()

// writtenKeys appends to dst the keys a command may modify, from redis-server's own
// key specs (the table above): every key whose spec is not read-only. That
// covers DEL, SET, HSET, EXPIRE, RENAME (both keys), MSET (every key),
// SUNIONSTORE (the destination only), EVAL/FCALL (their declared keys) and
// PFCOUNT (it rewrites its HLL's cached count), without a hand-kept list.
// all is true when the keys cannot be told (FLUSHDB, FLUSHALL, SWAPDB: a
// write with no key spec), so every cached value must go. Commands the table
// does not know (modules, containers such as CLIENT) are passed by: the shim
// only caches strings and hashes, which they do not write.
func writtenKeys(args []any, dst []string) (keys []string, all bool) {
	if len(args) == 0 {
		return dst, false
	}
	name, ok := args[0].(string)
	if !ok {
		return dst, false
	}
	c, ok := writeTable[name]
	if !ok {
		// go-redis writes names in lower case; anything else is rare.
		if c, ok = writeTable[strings.ToLower(name)]; !ok {
			return dst, false
		}
	}
	if c.All {
		return dst, true
	}
	argc := len(args)
	if c.SortStore {
		if p := keywordPos(args, "STORE", 2); p >= 0 && p+1 < argc {
			dst = append(dst, argString(args[p+1]))
		}
	}
	for i := range c.Specs {
		ks := &c.Specs[i]
		first := -1
		switch ks.Begin {
		case "index":
			first = ks.Index
		case "keyword":
			first = keywordPos(args, ks.Keyword, ks.StartFrom)
			if first < 0 {
				continue // the optional keyword is absent: no key
			}
			first++
		default:
			return dst, true
		}
		if first <= 0 || first >= argc {
			continue
		}
		step := max(ks.Step, 1)
		last := first
		switch ks.Find {
		case "range":
			switch {
			case ks.LastKey >= 0:
				last = first + ks.LastKey
			case ks.Limit > 0:
				last = first + (argc-first)/ks.Limit - 1
			default:
				last = argc + ks.LastKey
			}
		case "keynum":
			ni := first + ks.KeyNumIdx
			if ni >= argc {
				continue
			}
			n, err := strconv.Atoi(argString(args[ni]))
			if err != nil || n < 0 {
				continue
			}
			first += ks.FirstKey
			last = first + (n-1)*step
		default:
			return dst, true
		}
		last = min(last, argc-1)
		for i := first; i <= last; i += step {
			dst = append(dst, argString(args[i]))
		}
	}
	return dst, false
}

// keywordPos finds keyword (case-insensitively) as key specs search it:
// forward from start, or backwards from argc+start when start is negative.
func keywordPos(args []any, keyword string, start int) int {
	if start >= 0 {
		for i := max(start, 1); i < len(args); i++ {
			if s, ok := args[i].(string); ok && strings.EqualFold(s, keyword) {
				return i
			}
		}
		return -1
	}
	for i := len(args) + start; i >= 1; i-- {
		if s, ok := args[i].(string); ok && strings.EqualFold(s, keyword) {
			return i
		}
	}
	return -1
}

// argString is the key bytes go-redis writes for an argument.
func argString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	default:
		return fmt.Sprint(v)
	}
}
