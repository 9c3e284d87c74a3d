package testutil

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterPort returns a free loopback port whose cluster bus port
// (port+10000) is free too.
func ClusterPort(t testing.TB) int {
	t.Helper()
	for range 100 {
		p := FreePort(t)
		if p+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		if err != nil {
			continue
		}
		l.Close()
		return p
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}

// Cluster is a running Redis Cluster of masters only.
type Cluster struct {
	Addrs []string
	Nodes []*Redis
}

// StartCluster starts n cluster-enabled redis-servers on loopback and joins
// them into one cluster with every slot assigned (n masters, no replicas).
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{}
	for range n {
		r := StartRedisOn(t, ClusterPort(t), "--cluster-enabled", "yes", "--cluster-node-timeout", "5000")
		c.Nodes = append(c.Nodes, r)
		c.Addrs = append(c.Addrs, r.Addr)
	}
	CreateCluster(t, c.Addrs)
	return c
}

// CreateCluster joins running cluster-enabled servers into one cluster of
// masters with redis-cli --cluster create, and waits until every node
// reports the cluster ok with all slots assigned.
func CreateCluster(t testing.TB, addrs []string) {
	t.Helper()
	bin := Need(t, "redis-cli")
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		for {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_slots_assigned:16384") &&
				strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(addrs))) {
				break
			}
			if time.Now().After(deadline) {
				rdb.Close()
				t.Fatalf("cluster at %s not ok: %v\n%s", a, err, info)
			}
			time.Sleep(100 * time.Millisecond)
		}
		rdb.Close()
	}
}

// SlotOwner returns the address (as the cluster announces it) of the master
// serving slot.
func SlotOwner(ctx context.Context, anyNode string, slot int) (string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: anyNode})
	defer rdb.Close()
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("cluster slots: %w", err)
	}
	for _, s := range slots {
		if slot >= s.Start && slot <= s.End && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("slot %d not assigned", slot)
}

// MoveSlot reshards one slot from master src to master dst while clients
// keep using it, the way redis-cli --cluster reshard does: IMPORTING on
// dst, MIGRATING on src, MIGRATE of every key, then SETSLOT NODE on every
// master (dst first, so it never refuses the slot it now owns).
func MoveSlot(ctx context.Context, slot int, src, dst string, all []string) error {
	cli := func(a string) *redis.Client { return redis.NewClient(&redis.Options{Addr: a}) }
	s, d := cli(src), cli(dst)
	defer s.Close()
	defer d.Close()
	srcID, err := s.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		return fmt.Errorf("cluster myid %s: %w", src, err)
	}
	dstID, err := d.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		return fmt.Errorf("cluster myid %s: %w", dst, err)
	}
	if err := d.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err(); err != nil {
		return fmt.Errorf("setslot importing: %w", err)
	}
	if err := s.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err(); err != nil {
		return fmt.Errorf("setslot migrating: %w", err)
	}
	host, port, _ := net.SplitHostPort(dst)
	for {
		keys, err := s.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return fmt.Errorf("getkeysinslot: %w", err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", host, port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := s.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	order := []string{dst, src}
	for _, a := range all {
		if a != dst && a != src {
			order = append(order, a)
		}
	}
	for _, a := range order {
		c := cli(a)
		err := c.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err()
		c.Close()
		if err != nil {
			return fmt.Errorf("setslot node on %s: %w", a, err)
		}
	}
	return nil
}

// KeySlot is the cluster hash slot of key, asked of a node.
func KeySlot(ctx context.Context, anyNode, key string) (int, error) {
	rdb := redis.NewClient(&redis.Options{Addr: anyNode})
	defer rdb.Close()
	n, err := rdb.ClusterKeySlot(ctx, key).Result()
	return int(n), err
}
