package decode

import (
	"strings"
	"testing"
)

// TestCounterRequests: the op cache counts per (proto, op), whatever the
// mix, including distinct op strings with equal text and colliding slots.
func TestCounterRequests(t *testing.T) {
	c := NewCounter(nil)
	fr := &Flow{Proto: ProtoRedis}
	fm := &Flow{Proto: ProtoMemcache}
	get := "GET"
	dyn := strings.Clone(get) // same text, other bytes: must count as GET too
	ops := []string{"GET", "MGET", "SET", dyn, "GET"}
	for i := 0; i < 1000; i++ {
		for _, op := range ops {
			c.Request(fr, &Request{Op: op})
		}
		c.Request(fm, &Request{Op: "get"})
		c.Request(fm, &Request{Op: "GET"})
	}
	want := map[OpKey]uint64{
		{ProtoRedis, "GET"}: 3000, {ProtoRedis, "MGET"}: 1000, {ProtoRedis, "SET"}: 1000,
		{ProtoMemcache, "get"}: 1000, {ProtoMemcache, "GET"}: 1000,
	}
	got := c.Requests()
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%v = %d, want %d", k, got[k], v)
		}
	}
	if req, _, _, _, _ := c.Totals(); req != 7000 {
		t.Errorf("total %d", req)
	}
	mget := &Request{Op: "MGET"}
	if n := testing.AllocsPerRun(100, func() { c.Request(fr, mget) }); n != 0 {
		t.Errorf("%v allocations per request", n)
	}
}

func BenchmarkCounterRequest(b *testing.B) {
	c := NewCounter(nil)
	f := &Flow{Proto: ProtoRedis}
	r := &Request{Op: "GET"}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		c.Request(f, r)
	}
}
