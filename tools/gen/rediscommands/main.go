// Command rediscommands writes decode/redis/commands_gen.go: the Redis command
// table (names, arity, flags, key specs, subcommands) exactly as a real
// redis-server describes it through COMMAND. Generating the table from the
// server avoids hand-written key positions, the classic source of wrong keys.
//
// Usage:
//
//	go run ./tools/gen/rediscommands -out decode/redis/commands_gen.go
//	go run ./tools/gen/rediscommands -addr 127.0.0.1:6379 -out ...
//
// Without -addr it starts redis-server (from PATH) on a free loopback port
// with persistence off, and kills it afterwards.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"go/format"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

func main() {
	addr := flag.String("addr", "", "address of a running redis-server (default: start one on a free loopback port)")
	out := flag.String("out", "commands_gen.go", "file to write")
	bin := flag.String("redis-server", "redis-server", "redis-server binary used when -addr is empty")
	flag.Parse()
	if err := run(*addr, *out, *bin); err != nil {
		slog.Error("generate redis command table", "err", err)
		os.Exit(1)
	}
}

func run(addr, out, bin string) error {
	if addr == "" {
		a, stop, err := startServer(bin)
		if err != nil {
			return err
		}
		defer stop()
		addr = a
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// RESP2 so COMMAND's maps arrive as flat key/value arrays, the form
	// parseCommand reads.
	c := goredis.NewClient(&goredis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	version, err := serverVersion(ctx, c)
	if err != nil {
		return err
	}
	raw, err := c.Do(ctx, "COMMAND").Slice()
	if err != nil {
		return fmt.Errorf("run COMMAND: %w", err)
	}
	var cmds []command
	for _, r := range raw {
		cmd, err := parseCommand(r)
		if err != nil {
			return err
		}
		cmds = append(cmds, cmd)
	}
	src, err := render(cmds, version)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, src, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	slog.Info("wrote redis command table", "file", out, "commands", len(cmds), "server", version)
	return nil
}

func startServer(bin string) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("find free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "rediscommands")
	if err != nil {
		return "", nil, fmt.Errorf("make temp dir: %w", err)
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--protected-mode", "no")
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("start %s: %w", bin, err)
	}
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("wait for redis-server at %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func serverVersion(ctx context.Context, c *goredis.Client) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("run INFO: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "unknown", nil
}

type command struct {
	name     string
	arity    int64
	flags    []string
	keySpecs []keySpec
	subs     []command
}

type keySpec struct {
	flags []string
	// begin_search
	bsType    string // index, keyword, unknown
	index     int64
	keyword   string
	startFrom int64
	// find_keys
	fkType    string // range, keynum, unknown
	lastKey   int64
	keyStep   int64
	limit     int64
	keyNumIdx int64
	firstKey  int64
}

var errShape = errors.New("unexpected COMMAND reply shape")

func parseCommand(r any) (command, error) {
	a, ok := r.([]any)
	if !ok || len(a) < 10 {
		return command{}, fmt.Errorf("parse command entry: %w", errShape)
	}
	var c command
	c.name, _ = a[0].(string)
	c.arity, _ = a[1].(int64)
	c.flags = strs(a[2])
	if c.name == "" {
		return c, fmt.Errorf("parse command name: %w", errShape)
	}
	specs, _ := a[8].([]any)
	for _, s := range specs {
		ks, err := parseKeySpec(s)
		if err != nil {
			return c, fmt.Errorf("parse key spec of %s: %w", c.name, err)
		}
		c.keySpecs = append(c.keySpecs, ks)
	}
	subs, _ := a[9].([]any)
	for _, s := range subs {
		sc, err := parseCommand(s)
		if err != nil {
			return c, err
		}
		c.subs = append(c.subs, sc)
	}
	return c, nil
}

// kv turns a RESP2 flat [k1 v1 k2 v2 ...] array into a map.
func kv(r any) map[string]any {
	a, _ := r.([]any)
	m := make(map[string]any, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		k, _ := a[i].(string)
		m[k] = a[i+1]
	}
	return m
}

func strs(r any) []string {
	a, _ := r.([]any)
	var s []string
	for _, v := range a {
		if x, ok := v.(string); ok {
			s = append(s, x)
		}
	}
	return s
}

func num(m map[string]any, k string) int64 {
	v, _ := m[k].(int64)
	return v
}

func parseKeySpec(r any) (keySpec, error) {
	m := kv(r)
	ks := keySpec{flags: strs(m["flags"])}
	bs := kv(m["begin_search"])
	ks.bsType, _ = bs["type"].(string)
	bspec := kv(bs["spec"])
	switch ks.bsType {
	case "index":
		ks.index = num(bspec, "index")
	case "keyword":
		ks.keyword, _ = bspec["keyword"].(string)
		ks.startFrom = num(bspec, "startfrom")
	case "unknown":
	default:
		return ks, fmt.Errorf("begin_search type %q: %w", ks.bsType, errShape)
	}
	fk := kv(m["find_keys"])
	ks.fkType, _ = fk["type"].(string)
	fspec := kv(fk["spec"])
	switch ks.fkType {
	case "range":
		ks.lastKey = num(fspec, "lastkey")
		ks.keyStep = num(fspec, "keystep")
		ks.limit = num(fspec, "limit")
	case "keynum":
		ks.keyNumIdx = num(fspec, "keynumidx")
		ks.firstKey = num(fspec, "firstkey")
		ks.keyStep = num(fspec, "keystep")
		if ks.firstKey <= ks.keyNumIdx {
			// The decoder reads numkeys before the keys it counts.
			return ks, fmt.Errorf("keynum spec with firstkey %d <= keynumidx %d: %w", ks.firstKey, ks.keyNumIdx, errShape)
		}
	case "unknown":
	default:
		return ks, fmt.Errorf("find_keys type %q: %w", ks.fkType, errShape)
	}
	if ks.keyStep < 0 {
		return ks, fmt.Errorf("negative keystep: %w", errShape)
	}
	return ks, nil
}

// Flag names as COMMAND reports them, mapped to the Go constants of
// decode/redis. A flag the table does not know fails generation, so a new
// server version cannot silently drop one.
var cmdFlags = map[string]string{
	"write": "FlagWrite", "readonly": "FlagReadonly", "denyoom": "FlagDenyOOM",
	"module": "FlagModule", "admin": "FlagAdmin", "pubsub": "FlagPubSub",
	"noscript": "FlagNoScript", "blocking": "FlagBlocking", "loading": "FlagLoading",
	"stale": "FlagStale", "skip_monitor": "FlagSkipMonitor", "skip_slowlog": "FlagSkipSlowlog",
	"asking": "FlagAsking", "fast": "FlagFast", "no_auth": "FlagNoAuth",
	"may_replicate": "FlagMayReplicate", "sentinel": "FlagSentinel",
	"only_sentinel": "FlagOnlySentinel", "no_mandatory_keys": "FlagNoMandatoryKeys",
	"protected": "FlagProtected", "movablekeys": "FlagMovableKeys",
	"no_async_loading": "FlagNoAsyncLoading", "no_multi": "FlagNoMulti",
	"allow_busy": "FlagAllowBusy",
}

var keyFlags = map[string]string{
	"RO": "KeyRO", "RW": "KeyRW", "OW": "KeyOW", "RM": "KeyRM",
	"access": "KeyAccess", "update": "KeyUpdate", "insert": "KeyInsert", "delete": "KeyDelete",
	"not_key": "KeyNotKey", "incomplete": "KeyIncomplete", "variable_flags": "KeyVariableFlags",
}

func flagExpr(names []string, table map[string]string, what string) (string, error) {
	var parts []string
	for _, n := range names {
		c, ok := table[n]
		if !ok {
			return "", fmt.Errorf("unknown %s flag %q: %w", what, n, errShape)
		}
		parts = append(parts, c)
	}
	if len(parts) == 0 {
		return "0", nil
	}
	return strings.Join(parts, "|"), nil
}

func render(cmds []command, version string) ([]byte, error) {
	// Flatten: containers first, then their subcommands right after, all
	// sorted by name so the output is stable across runs.
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	type entry struct {
		c      command
		name   string
		subLo  int
		subHi  int
		parent int
	}
	var all []entry
	for _, c := range cmds {
		parent := len(all)
		all = append(all, entry{c: c, name: strings.ToUpper(c.name), parent: -1})
		subs := c.subs
		sort.Slice(subs, func(i, j int) bool { return subs[i].name < subs[j].name })
		lo := len(all)
		for _, s := range subs {
			all = append(all, entry{c: s, name: strings.ToUpper(s.name), parent: parent})
		}
		all[parent].subLo, all[parent].subHi = lo, len(all)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by tools/gen/rediscommands from redis-server %s COMMAND; DO NOT EDIT.\n\n", version)
	b.WriteString("package redis\n\n")
	fmt.Fprintf(&b, "// serverVersion is the redis-server version the table was generated from.\nconst serverVersion = %q\n\n", version)
	maxName, maxSpecs := 0, 0
	for _, e := range all {
		maxName = max(maxName, len(e.name))
		maxSpecs = max(maxSpecs, len(e.c.keySpecs))
	}
	fmt.Fprintf(&b, "// maxNameLen is the longest command or \"CONTAINER|SUB\" name in the table.\nconst maxNameLen = %d\n\n", maxName)
	fmt.Fprintf(&b, "// maxKeySpecs is the most key specs any command has.\nconst maxKeySpecs = %d\n\n", maxSpecs)
	b.WriteString("// commands is every command and subcommand, containers followed by their\n// subcommands, sorted by name.\nvar commands = [...]Command{\n")
	for i, e := range all {
		flags, err := flagExpr(e.c.flags, cmdFlags, "command")
		if err != nil {
			return nil, fmt.Errorf("flags of %s: %w", e.name, err)
		}
		fmt.Fprintf(&b, "\t%d: {Name: %q, Arity: %d, Flags: %s", i, e.name, e.c.arity, flags)
		if e.subHi > e.subLo {
			fmt.Fprintf(&b, ", SubLo: %d, SubHi: %d", e.subLo, e.subHi)
		}
		if len(e.c.keySpecs) > 0 {
			b.WriteString(", KeySpecs: []KeySpec{")
			for _, ks := range e.c.keySpecs {
				kf, err := flagExpr(ks.flags, keyFlags, "key spec")
				if err != nil {
					return nil, fmt.Errorf("key spec of %s: %w", e.name, err)
				}
				fmt.Fprintf(&b, "\n\t\t{Flags: %s, ", kf)
				switch ks.bsType {
				case "index":
					fmt.Fprintf(&b, "Begin: BeginIndex, Index: %d, ", ks.index)
				case "keyword":
					fmt.Fprintf(&b, "Begin: BeginKeyword, Keyword: %q, StartFrom: %d, ", ks.keyword, ks.startFrom)
				default:
					b.WriteString("Begin: BeginUnknown, ")
				}
				switch ks.fkType {
				case "range":
					fmt.Fprintf(&b, "Find: FindRange, LastKey: %d, KeyStep: %d, Limit: %d},", ks.lastKey, ks.keyStep, ks.limit)
				case "keynum":
					fmt.Fprintf(&b, "Find: FindKeyNum, KeyNumIdx: %d, FirstKey: %d, KeyStep: %d},", ks.keyNumIdx, ks.firstKey, ks.keyStep)
				default:
					b.WriteString("Find: FindUnknown},")
				}
			}
			b.WriteString("\n\t}")
		}
		b.WriteString("},\n")
	}
	b.WriteString("}\n\n")
	b.WriteString("// lookupUpper returns the index in commands of an upper-case command name\n// (\"GET\", \"CLIENT|SETNAME\"), or -1. A switch, not a map, so the table\n// needs no initialisation at start-up; switching on string(name) neither\n// copies nor allocates.\nfunc lookupUpper(name []byte) int {\n\tswitch string(name) {\n")
	for i, e := range all {
		fmt.Fprintf(&b, "\tcase %q:\n\t\treturn %d\n", e.name, i)
	}
	b.WriteString("\t}\n\treturn -1\n}\n")
	src, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("format generated code: %w", err)
	}
	return src, nil
}
