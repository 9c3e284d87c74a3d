package main

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestNiceToSet(t *testing.T) {
	for _, c := range []struct {
		want     int
		explicit bool
		current  int
		set      int
		ok       bool
	}{
		{10, false, 0, 10, true},  // the default lowers the priority
		{10, false, 10, 0, false}, // already there
		{10, false, 15, 0, false}, // started nicer (nice -n 15): left as it is
		{10, true, 15, 10, true},  // asked for explicitly: applied (may need CAP_SYS_NICE)
		{-5, true, 0, -5, true},   // likewise
		{0, true, 0, 0, true},     // --nice 0 given: applied
		{10, false, -5, 10, true}, // started with a higher priority: the default lowers it
	} {
		if set, ok := niceToSet(c.want, c.explicit, c.current); set != c.set || ok != c.ok {
			t.Errorf("niceToSet(%d, %v, %d) = %d, %v; want %d, %v", c.want, c.explicit, c.current, set, ok, c.set, c.ok)
		}
	}
}

func TestCurrentNice(t *testing.T) {
	// The kernel's own account: field 19 of the thread's stat line.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b, err := os.ReadFile("/proc/thread-self/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	want, err := strconv.Atoi(f[19-3])
	if err != nil {
		t.Fatal(err)
	}
	n, err := currentNice()
	if err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Fatalf("currentNice %d, /proc/thread-self/stat says %d", n, want)
	}
}
