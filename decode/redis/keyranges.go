package redis

import "strings"

// RangeCommand is a command whose keys, if any, one index range describes:
// what a parser that cannot run this package's key-spec logic (the eBPF
// programs' in-kernel counting) needs to find them. The field layout
// matches bpf.RedisCommand, so a value converts directly.
type RangeCommand struct {
	Name  string
	Arity int
	// Complex: the keys are not one index range (several key specs,
	// keywords, numkeys, SORT): only this package can find them.
	Complex bool
	// HasKeys: the keys are args First..Last (negative: from the end) by
	// Step; Write marks writes; FieldWeighted reads are weighted by their
	// fields, as Key reports them (HMGET h f1 f2: weight 2).
	HasKeys           bool
	Write             bool
	First, Last, Step int
	FieldWeighted     bool
}

// KeyRanges derives, from the generated command table, each top-level
// command's keys as one index range where that describes them.
func KeyRanges() []RangeCommand {
	all := Commands()
	var out []RangeCommand
	for i := range all {
		c := &all[i]
		if strings.Contains(c.Name, "|") {
			continue
		}
		rc := RangeCommand{Name: c.Name, Arity: int(c.Arity), Step: 1}
		var specs []KeySpec
		for _, ks := range c.KeySpecs {
			if ks.Flags&KeyNotKey == 0 {
				specs = append(specs, ks)
			}
		}
		switch {
		case c.SubHi > 0:
			for j := c.SubLo; j < c.SubHi; j++ {
				if len(all[j].KeySpecs) > 0 {
					rc.Complex = true
				}
			}
		case len(specs) == 1 && specs[0].Begin == BeginIndex && specs[0].Find == FindRange && specs[0].Limit == 0 && c.Flags&FlagMovableKeys == 0:
			ks := specs[0]
			rc.HasKeys, rc.Write = true, c.Flags&FlagWrite != 0
			rc.First, rc.Last, rc.Step = int(ks.Index), int(ks.LastKey), max(int(ks.KeyStep), 1)
			rc.FieldWeighted = isFieldWeighted[i]
		case len(specs) > 0 || c.Flags&FlagMovableKeys != 0:
			rc.Complex = true
		}
		out = append(out, rc)
	}
	return out
}
