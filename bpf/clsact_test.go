package bpf

import (
	"net"
	"os"
	"os/exec"
	"testing"
)

func TestInstanceStale(t *testing.T) {
	me, err := self()
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := parseFilterName(me.filterName("ingress")); !ok || got != me {
		t.Fatalf("parse %q = %+v %v", me.filterName("ingress"), got, ok)
	}
	for _, name := range []string{"hotsniff_ingress", "hotsniff_egress", "cilium_x", "hotsniff_1_2_x_ingress", "hotsniff_1_2_3_4_ingress"} {
		if _, ok := parseFilterName(name); ok {
			t.Errorf("parsed %q as an instance", name)
		}
	}
	if me.stale() {
		t.Error("this process is stale")
	}
	// A process that has exited.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := instance{me.pidNS, uint64(cmd.Process.Pid), 1}
	if !dead.stale() {
		t.Errorf("exited pid %d not stale", cmd.Process.Pid)
	}
	// A live process with another start time: the pid was reused.
	if !(instance{me.pidNS, uint64(os.Getppid()), 0}).stale() {
		t.Error("reused pid not stale")
	}
	// Another pid namespace: judged by its liveness socket alone.
	other := instance{me.pidNS + 1, 4242, 7}
	if !other.stale() {
		t.Error("instance of another pid namespace without a liveness socket not stale")
	}
	l, err := net.Listen("unix", other.livenessName())
	if err != nil {
		t.Fatal(err)
	}
	if other.stale() {
		t.Error("instance holding its liveness socket taken as stale")
	}
	l.Close()
	if !other.stale() {
		t.Error("instance whose liveness socket closed not stale")
	}
}
