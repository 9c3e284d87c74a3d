package stream

import "testing"

func TestBufPool(t *testing.T) {
	for _, c := range []struct{ n, class int }{{0, 0}, {1, 0}, {256, 0}, {257, 1}, {512, 1}, {513, 2}, {128 << 10, 9}, {128<<10 + 1, -1}} {
		if got := classUp(c.n); got != c.class {
			t.Errorf("classUp(%d) = %d, want %d", c.n, got, c.class)
		}
	}
	p := bufPool{max: 1024}
	b := p.get(300)
	if cap(b) != 512 || len(b) != 0 {
		t.Fatalf("get(300): len %d cap %d", len(b), cap(b))
	}
	p.put(append(b, 1, 2, 3))
	if p.bytes != 512 {
		t.Fatalf("pool holds %d bytes", p.bytes)
	}
	if c := p.get(400); &c[:1][0] != &b[:1][0] || len(c) != 0 {
		t.Error("buffer not reused empty")
	}
	p.put(make([]byte, 0, 1000)) // not a class size: dropped
	p.put(make([]byte, 0, 1024))
	p.put(make([]byte, 0, 1024)) // over max: dropped
	if p.bytes != 1024 {
		t.Errorf("pool holds %d bytes, want 1024", p.bytes)
	}
	if big := p.get(1 << 20); cap(big) != 1<<20 {
		t.Errorf("large get: cap %d", cap(big))
	}
}
