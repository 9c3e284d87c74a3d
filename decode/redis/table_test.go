package redis

import (
	"strings"
	"testing"
)

func TestTable(t *testing.T) {
	for i := range commands {
		c := &commands[i]
		if c.Name != strings.ToUpper(c.Name) {
			t.Errorf("%q not upper case", c.Name)
		}
		if got := lookupFold([]byte(strings.ToLower(c.Name))); got != i {
			t.Errorf("lookup %q = %d, want %d", c.Name, got, i)
		}
		for j := c.SubLo; j < c.SubHi; j++ {
			if !strings.HasPrefix(commands[j].Name, c.Name+"|") {
				t.Errorf("%s lists subcommand %s", c.Name, commands[j].Name)
			}
		}
		if len(c.KeySpecs) > maxKeySpecs {
			t.Errorf("%s has %d key specs", c.Name, len(c.KeySpecs))
		}
	}
	// Facts from the Redis documentation, independent of the generator.
	for _, f := range []struct {
		name  string
		arity int32
		write bool
	}{{"GET", 2, false}, {"SET", -3, true}, {"MGET", -2, false}, {"HMGET", -3, false}, {"CLIENT|SETNAME", 3, false},
		{"OBJECT|ENCODING", 3, false}, {"EVAL", -3, false}, {"XREAD", -4, false}, {"DEL", -2, true}, {"SELECT", 2, false}} {
		c, ok := Lookup([]byte(f.name))
		if !ok {
			t.Errorf("%s missing", f.name)
			continue
		}
		if c.Arity != f.arity || (c.Flags&FlagWrite != 0) != f.write {
			t.Errorf("%s: arity %d write %v", f.name, c.Arity, c.Flags&FlagWrite != 0)
		}
	}
	for _, bad := range []string{"", "GETX", "CLIENT|", strings.Repeat("A", 100)} {
		if _, ok := Lookup([]byte(bad)); ok {
			t.Errorf("Lookup(%q) found something", bad)
		}
	}
	for _, n := range fieldWeighted {
		if lookupFold([]byte(n)) < 0 {
			t.Errorf("field-weighted %s not in the table", n)
		}
	}
}
