package client

import (
	"fmt"
	"strconv"
	"strings"

	dredis "github.com/hotsniff/hotsniff/decode/redis"
)

// writtenKeys appends to dst the keys a command may modify, from redis-server's own
// key specs (the table decode/redis generated from COMMAND): every key whose
// spec is not read-only. That covers DEL, SET, HSET, EXPIRE, RENAME (both
// keys), MSET (every key), SUNIONSTORE (the destination only), EVAL/FCALL
// (their declared keys) and PFCOUNT (it rewrites its HLL's cached count),
// without a hand-kept list. all is true when the keys cannot be told
// (FLUSHDB, FLUSHALL, SWAPDB: a write with no key spec), so every cached
// value must go. Commands the table does not know (modules) are passed by:
// the shim only caches strings and hashes, which module commands do not
// write.
func writtenKeys(args []any, dst []string) (keys []string, all bool) {
	if len(args) == 0 {
		return dst, false
	}
	name, ok := args[0].(string)
	if !ok {
		return dst, false
	}
	c, ok := dredis.Lookup([]byte(name))
	if !ok || c.SubHi > c.SubLo {
		// Unknown, or a container (CLIENT, CONFIG, OBJECT, ...): none of
		// their subcommands writes a key the shim caches.
		return dst, false
	}
	if len(c.KeySpecs) == 0 {
		return dst, c.Flags&dredis.FlagWrite != 0
	}
	const writes = dredis.KeyRW | dredis.KeyOW | dredis.KeyRM | dredis.KeyInsert | dredis.KeyUpdate | dredis.KeyDelete
	argc := len(args)
	for i := range c.KeySpecs {
		ks := &c.KeySpecs[i]
		if ks.Flags&writes == 0 || ks.Flags&dredis.KeyNotKey != 0 {
			continue
		}
		first := -1
		switch ks.Begin {
		case dredis.BeginIndex:
			first = int(ks.Index)
		case dredis.BeginKeyword:
			first = keywordPos(args, ks.Keyword, int(ks.StartFrom))
			if first < 0 {
				continue // the optional keyword is absent: no key
			}
			first++
		default:
			// Only SORT ... STORE dst has no spec for its written key.
			if strings.EqualFold(name, "sort") {
				if p := keywordPos(args, "STORE", 2); p >= 0 && p+1 < argc {
					dst = append(dst, argString(args[p+1]))
				}
				continue
			}
			return dst, true
		}
		if first <= 0 || first >= argc {
			continue
		}
		step := max(int(ks.KeyStep), 1)
		last := first
		switch ks.Find {
		case dredis.FindRange:
			switch {
			case ks.LastKey >= 0:
				last = first + int(ks.LastKey)
			case ks.Limit > 0:
				last = first + (argc-first)/int(ks.Limit) - 1
			default:
				last = argc + int(ks.LastKey)
			}
		case dredis.FindKeyNum:
			ni := first + int(ks.KeyNumIdx)
			if ni >= argc {
				continue
			}
			n, err := strconv.Atoi(argString(args[ni]))
			if err != nil || n < 0 {
				continue
			}
			first += int(ks.FirstKey)
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
