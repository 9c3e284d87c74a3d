package pipeline

import (
	"strings"
	"testing"
	"time"
)

func TestNoTraffic(t *testing.T) {
	t0 := time.Unix(1000, 0)
	n := NoTraffic{After: 30 * time.Second}
	if _, ok := n.Check(t0, 0, []uint16{6379}, nil); ok {
		t.Fatal("warned at start")
	}
	if _, ok := n.Check(t0.Add(29*time.Second), 0, []uint16{6379}, nil); ok {
		t.Fatal("warned early")
	}
	msg, ok := n.Check(t0.Add(30*time.Second), 0, []uint16{6379}, []string{"eth0"})
	if !ok || !strings.Contains(msg, "[6379]") || !strings.Contains(msg, "--port") || !strings.Contains(msg, "--iface") || !strings.Contains(msg, "eth0") {
		t.Fatalf("message %q, %v", msg, ok)
	}
	if _, ok := n.Check(t0.Add(60*time.Second), 0, []uint16{6379}, nil); ok {
		t.Fatal("warned twice")
	}
	// Traffic before the deadline: never a warning.
	m := NoTraffic{After: time.Second}
	m.Check(t0, 0, nil, nil)
	m.Check(t0.Add(500*time.Millisecond), 3, nil, nil)
	if _, ok := m.Check(t0.Add(5*time.Second), 3, nil, nil); ok {
		t.Fatal("warned after traffic")
	}
	if _, ok := (&NoTraffic{}).Check(t0.Add(time.Hour), 0, nil, nil); ok {
		t.Fatal("After 0 warned")
	}
}
