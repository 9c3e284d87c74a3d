package shimtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotsniff/hotsniff/internal/testing/testutil"
)

func runIn(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// TestGoShimFromClone: an application outside this repository depends on
// the Go shim from a clone as docs/client-shim.md says (require + replace),
// builds, and runs it against a real redis-server; the build pulls none of
// the daemon's dependencies.
func TestGoShimFromClone(t *testing.T) {
	goBin := testutil.GoBin()
	srv := testutil.StartRedis(t)
	app := t.TempDir()
	shim, err := filepath.Abs(filepath.Join(testutil.RepoRoot(), "client"))
	if err != nil {
		t.Fatal(err)
	}
	main := `package main

import (
	"fmt"
	"os"

	"github.com/hotsniff/hotsniff/client"
	"github.com/redis/go-redis/v9"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Args[1]})
	shim, err := client.Install(rdb, client.ShimOptions{ChannelClient: redis.NewClient(&redis.Options{Addr: os.Args[1]})})
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	<-shim.Synced()
	shim.Close()
	fmt.Println("installed")
}
`
	if err := os.WriteFile(filepath.Join(app, "main.go"), []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off"}
	runIn(t, app, env, goBin, "mod", "init", "example.com/app")
	runIn(t, app, env, goBin, "mod", "edit", "-require=github.com/hotsniff/hotsniff/client@v0.0.0",
		"-replace=github.com/hotsniff/hotsniff/client="+shim)
	runIn(t, app, env, goBin, "mod", "tidy")
	mods := runIn(t, app, env, goBin, "list", "-m", "all")
	for _, heavy := range []string{"github.com/cilium/ebpf", "github.com/gdamore/tcell", "github.com/prometheus/exporter-toolkit", "github.com/google/gopacket"} {
		if strings.Contains(mods, heavy) {
			t.Errorf("the application pulls %s, a dependency of the daemon, not of the shim", heavy)
		}
	}
	runIn(t, app, env, goBin, "build", "-o", "app", ".")
	if out := runIn(t, app, nil, filepath.Join(app, "app"), srv.Addr); !strings.Contains(out, "installed") {
		t.Errorf("the application printed %q", out)
	}
}

// TestNodeShimPacked: the Node shim installs as its README says (npm pack
// here, npm install of the tarball in the application) into a fresh
// directory, ships only what runs, and installs on an ioredis client.
func TestNodeShimPacked(t *testing.T) {
	npm := testutil.Need(t, "npm")
	node := testutil.Need(t, "node")
	pkg := filepath.Join(testutil.RepoRoot(), "client", "node")
	if _, err := os.Stat(filepath.Join(pkg, "node_modules")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("client/node has no node_modules: run npm ci there (CI does)")
		}
		t.Skip("client/node has no node_modules (npm ci there)")
	}
	srv := testutil.StartRedis(t)
	dist := t.TempDir()
	out := runIn(t, pkg, nil, npm, "pack", "--pack-destination", dist)
	files, _ := filepath.Glob(filepath.Join(dist, "hotsniff-shim-*.tgz"))
	if len(files) != 1 {
		t.Fatalf("npm pack wrote %v\n%s", files, out)
	}
	list := runIn(t, dist, nil, "tar", "-tzf", files[0])
	for _, f := range strings.Fields(list) {
		if strings.Contains(f, "/test/") || strings.Contains(f, "bench") || strings.Contains(f, "conformance") || strings.HasSuffix(f, ".ts") && !strings.HasSuffix(f, ".d.ts") {
			t.Errorf("the package ships %s, which does not run in an application", f)
		}
	}
	app := t.TempDir()
	runIn(t, app, nil, npm, "init", "-y")
	// Peers (ioredis, prom-client) come from the repository's own
	// node_modules rather than the registry: the test stays offline.
	runIn(t, app, nil, npm, "install", "--no-audit", "--no-fund", "--offline", "--legacy-peer-deps", files[0])
	script := `
const { install } = require('hotsniff-shim');
const Redis = require('ioredis');
(async () => {
  const [host, port] = process.argv[2].split(':');
  const r = new Redis({ host, port: +port });
  const ch = new Redis({ host, port: +port });
  const shim = await install(r, { channelClient: ch });
  await shim.close();
  r.disconnect();
  ch.disconnect();
  console.log('installed');
})().catch((e) => { console.error(e); process.exit(1); });
`
	if err := os.WriteFile(filepath.Join(app, "app.js"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"NODE_PATH=" + filepath.Join(pkg, "node_modules")}
	if out := runIn(t, app, env, node, "app.js", srv.Addr); !strings.Contains(out, "installed") {
		t.Errorf("the application printed %q", out)
	}
}
