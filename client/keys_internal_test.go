package client

import (
	"reflect"
	"strings"
	"testing"
)

func TestWrittenKeys(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		keys []string
		all  bool
	}{
		{"get k", nil, false},
		{"mget a b", nil, false},
		{"set k v", []string{"k"}, false},
		{"SET k v EX 10", []string{"k"}, false},
		{"del a b c", []string{"a", "b", "c"}, false},
		{"unlink a", []string{"a"}, false},
		{"mset a 1 b 2", []string{"a", "b"}, false},
		{"hset h f v", []string{"h"}, false},
		{"expire k 10", []string{"k"}, false},
		{"rename a b", []string{"a", "b"}, false},
		{"sunionstore dst a b", []string{"dst"}, false},
		{"eval s 2 k1 k2 arg", []string{"k1", "k2"}, false},
		{"eval s 0", nil, false},
		{"pfcount hll", []string{"hll"}, false},
		{"sort l", nil, false},
		{"sort l by x store dst", []string{"dst"}, false},
		{"xreadgroup group g c streams s1 s2 > >", nil, false},
		{"flushdb", nil, true},
		{"flushall async", nil, true},
		{"swapdb 0 1", nil, true},
		{"publish ch msg", nil, false},
		{"client setname x", nil, false},
		{"json.set k $ 1", nil, false},
	} {
		var args []any
		for _, a := range strings.Fields(tc.cmd) {
			args = append(args, a)
		}
		keys, all := writtenKeys(args, nil)
		if !reflect.DeepEqual(keys, tc.keys) || all != tc.all {
			t.Errorf("%s: keys %q all %v, want %q %v", tc.cmd, keys, all, tc.keys, tc.all)
		}
	}
}
