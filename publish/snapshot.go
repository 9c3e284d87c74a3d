package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hotsniff/hotsniff/event"
	"github.com/hotsniff/hotsniff/event/envelope"
	"github.com/redis/go-redis/v9"
)

// SnapshotKey is where the merged snapshot document lives (docs/events.md, docs/channel-protocol.md).
func SnapshotKey(channel string) string { return channel + ":snapshot" }

// SectionsKey is the hash holding each writer's section of the snapshot.
// It must hash to the same cluster slot as SnapshotKey so one script can
// touch both, and it starts with the snapshot key so one ACL key pattern
// (~<channel>:snapshot*) covers both. Without a hash tag in the channel,
// the trailing {<snapshot key>} makes the slot that of the snapshot key;
// with one, that tag decides the slot of both names.
func SectionsKey(channel string) string {
	k := SnapshotKey(channel)
	if hasHashTag(k) {
		return k + ":sections"
	}
	return k + ":sections:{" + k + "}"
}

// hasHashTag mirrors Redis Cluster's rule: the first '{' followed later by
// a '}' with at least one byte between them.
func hasHashTag(k string) bool {
	i := strings.IndexByte(k, '{')
	if i < 0 {
		return false
	}
	j := strings.IndexByte(k[i+1:], '}')
	return j > 0
}

// mergeScript stores one section in the sections hash (or deletes it), drops
// sections whose time is up, and rebuilds the single JSON document at the
// snapshot key from what remains. Sections are opaque JSON text to the
// script, so no number goes through Lua's float formatting. Expiry uses the
// server clock (TIME), so publishers' clock skew cannot age out a live
// section.
//
// A section value is "<expires_unix_ms>\n<node meta JSON or empty>\n<entries>"
// where <entries> is zero or more event objects joined by commas.
//
// KEYS[1] snapshot key, KEYS[2] sections hash.
// ARGV[1] "set" or "del"; ARGV[2] field; ARGV[3] section ttl in ms;
// ARGV[4] meta JSON; ARGV[5] entries; ARGV[6] writer seq (decimal);
// ARGV[7] writer ts; ARGV[8] writer node as a JSON string; ARGV[9] "sign"
// to return the document for signing instead of storing it; ARGV[10] "1" to
// refuse the write when the field holds a section of a higher seq.
//
// Returns the number of node sections merged, or -1 when the write was
// refused: a daemon's seq starts at its start time in microseconds, so a
// section with a higher seq than the writer's is a newer daemon's for the
// same node (a rolling update's new pod), which has taken over.
var mergeScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[10] == '1' then
  local cur = redis.call('HGET', KEYS[2], ARGV[2])
  if cur then
    local a = string.find(cur, '\n', 1, true)
    local exp = a and tonumber(string.sub(cur, 1, a - 1))
    local b = a and string.find(cur, '\n', a + 1, true)
    local seq = b and string.match(string.sub(cur, a + 1, b - 1), '"seq":(%d+)')
    if exp and exp > now and seq and tonumber(seq) > tonumber(ARGV[6]) then
      return -1
    end
  end
end
if ARGV[1] == 'del' then
  redis.call('HDEL', KEYS[2], ARGV[2])
else
  local exp = now + tonumber(ARGV[3])
  redis.call('HSET', KEYS[2], ARGV[2], string.format('%d', exp) .. '\n' .. ARGV[4] .. '\n' .. ARGV[5])
end
local all = redis.call('HGETALL', KEYS[2])
local metas, keys, maxexp = {}, {}, 0
for i = 1, #all, 2 do
  local v = all[i + 1]
  local a = string.find(v, '\n', 1, true)
  local b = a and string.find(v, '\n', a + 1, true)
  local exp = a and tonumber(string.sub(v, 1, a - 1))
  if not b or not exp or exp <= now then
    redis.call('HDEL', KEYS[2], all[i])
  else
    if exp > maxexp then maxexp = exp end
    local meta = string.sub(v, a + 1, b - 1)
    if meta ~= '' then metas[#metas + 1] = meta end
    local ks = string.sub(v, b + 1)
    if ks ~= '' then keys[#keys + 1] = ks end
  end
end
local doc = '{"v":1,"seq":' .. ARGV[6] .. ',"ts":"' .. ARGV[7] .. '","node":' .. ARGV[8] ..
  ',"nodes":[' .. table.concat(metas, ',') .. '],"keys":[' .. table.concat(keys, ',') .. ']}'
local ttl = maxexp - now
if ttl <= 0 then ttl = tonumber(ARGV[3]) end
if ttl <= 0 then ttl = 60000 end
if #all > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
if ARGV[9] == 'sign' then
  local gen = redis.call('INCR', KEYS[3])
  redis.call('PEXPIRE', KEYS[3], ttl)
  return {doc, ttl, gen}
end
redis.call('SET', KEYS[1], doc, 'PX', ttl)
return #metas
`)

// storeSignedScript stores a signed snapshot document only if no writer
// merged since the document was built (the generation counter is still
// the one merge returned): a later writer's document includes every
// section this one had, and is stored by that writer.
//
// KEYS[1] snapshot key, KEYS[2] generation key.
// ARGV[1] generation; ARGV[2] signed document; ARGV[3] ttl in ms.
var storeSignedScript = redis.NewScript(`
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
`)

// GenKey counts the merges of the snapshot, for signed documents; same
// slot and prefix as the snapshot key (see SectionsKey).
func GenKey(channel string) string {
	k := SnapshotKey(channel)
	if hasHashTag(k) {
		return k + ":gen"
	}
	return k + ":gen:{" + k + "}"
}

// forever stands for "no expiry" in a section: a manual key added with
// --ttl 0 stays until removed (a century is as good as never).
const forever = 100 * 365 * 24 * time.Hour

// section is one writer's contribution to the snapshot.
type section struct {
	field string
	del   bool
	ttl   time.Duration
	meta  *event.SnapshotNode // nil for manual entries
	keys  []*event.Event
	// writer identity for the document header
	seq  uint64
	ts   time.Time
	node string
	// guard refuses the write when the field holds a newer writer's
	// section (errSuperseded).
	guard bool
}

// errSuperseded: a newer daemon for the same node has written its section.
var errSuperseded = errors.New("a newer daemon for this node has taken over its snapshot section")

// writeSection runs the merge script for s.
// With a secret the document is signed (sign.go).
func writeSection(ctx context.Context, rdb redis.UniversalClient, channel string, s *section, secret []byte) error {
	var meta []byte
	if s.meta != nil {
		var err error
		if meta, err = json.Marshal(s.meta); err != nil {
			return fmt.Errorf("encode snapshot section: %w", err)
		}
	}
	var ents bytes.Buffer
	for i, e := range s.keys {
		b, err := e.MarshalJSON()
		if err != nil {
			return fmt.Errorf("encode snapshot entry: %w", err)
		}
		if i > 0 {
			ents.WriteByte(',')
		}
		ents.Write(b)
	}
	node, _ := json.Marshal(s.node)
	op := "set"
	if s.del {
		op = "del"
	}
	ttl := s.ttl
	if ttl <= 0 || ttl > forever {
		ttl = forever
	}
	mode := ""
	if secret != nil {
		// The document is built by the script from every writer's
		// section; it is signed here, where the secret is, and stored
		// unless another writer merged meanwhile.
		mode = "sign"
	}
	guard := "0"
	if s.guard {
		guard = "1"
	}
	keys := []string{SnapshotKey(channel), SectionsKey(channel), GenKey(channel)}
	res, err := mergeScript.Run(ctx, rdb, keys,
		op, s.field, strconv.FormatInt(ttl.Milliseconds(), 10), string(meta), ents.String(),
		strconv.FormatUint(s.seq, 10), s.ts.UTC().Format(event.TSFormat), string(node), mode, guard).Result()
	if err != nil {
		return fmt.Errorf("write snapshot %s: %w", SnapshotKey(channel), err)
	}
	if n, ok := res.(int64); ok && n < 0 {
		return errSuperseded
	}
	if secret == nil {
		return nil
	}
	r, ok := res.([]any)
	if !ok || len(r) != 3 {
		return fmt.Errorf("write snapshot %s: unexpected merge reply %T", SnapshotKey(channel), res)
	}
	doc, _ := r[0].(string)
	ttlMS, _ := r[1].(int64)
	gen, _ := r[2].(int64)
	err = storeSignedScript.Run(ctx, rdb, []string{SnapshotKey(channel), GenKey(channel)},
		strconv.FormatInt(gen, 10), seal(secret, []byte(doc)), strconv.FormatInt(max(ttlMS, 1), 10)).Err()
	if err != nil {
		return fmt.Errorf("write snapshot %s: %w", SnapshotKey(channel), err)
	}
	return nil
}

// maxSection bounds a section read back at start (the channel's snapshot
// document bound).
const maxSection = 64 << 20

// Section is a publisher's own section of the snapshot, read back by the
// next daemon for the same node.
type Section struct {
	Seq  uint64
	Keys []*event.Event
}

// ReadSection reads node's live section of the snapshot; ok is false when
// there is none (never written, or aged out). Entries that do not decode
// are skipped and counted in bad.
func ReadSection(ctx context.Context, rdb redis.UniversalClient, channel, node string) (sec Section, ok bool, bad int, err error) {
	v, err := rdb.HGet(ctx, SectionsKey(channel), "n:"+node).Bytes()
	if err == redis.Nil {
		return Section{}, false, 0, nil
	}
	if err != nil {
		return Section{}, false, 0, fmt.Errorf("read snapshot section of %s: %w", node, err)
	}
	if len(v) > maxSection {
		return Section{}, false, 1, nil
	}
	a := bytes.IndexByte(v, '\n')
	if a < 0 {
		return Section{}, false, 1, nil
	}
	b := bytes.IndexByte(v[a+1:], '\n')
	if b < 0 {
		return Section{}, false, 1, nil
	}
	b += a + 1
	// An expired section is one the script has not yet deleted; expiry is
	// on the server's clock.
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return Section{}, false, 0, fmt.Errorf("read snapshot section of %s: %w", node, err)
	}
	if exp, perr := strconv.ParseInt(string(v[:a]), 10, 64); perr != nil || exp <= now.UnixMilli() {
		return Section{}, false, 0, nil
	}
	var meta event.SnapshotNode
	if err := json.Unmarshal(v[a+1:b], &meta); err != nil {
		return Section{}, false, 1, nil
	}
	sec.Seq = meta.Seq
	var raw []json.RawMessage
	if err := json.Unmarshal(append(append([]byte{'['}, v[b+1:]...), ']'), &raw); err != nil {
		return sec, true, 1, nil
	}
	for _, r := range raw {
		e := new(event.Event)
		if err := json.Unmarshal(r, e); err != nil || e.Type != event.TypeHot {
			bad++
			continue
		}
		sec.Keys = append(sec.Keys, e)
	}
	return sec, true, bad, nil
}

// ReadSnapshot reads the merged snapshot; a missing key is an empty snapshot
// with ok false.
func ReadSnapshot(ctx context.Context, rdb redis.UniversalClient, channel string) (s *event.Snapshot, ok bool, err error) {
	b, err := rdb.Get(ctx, SnapshotKey(channel)).Bytes()
	if err == redis.Nil {
		return &event.Snapshot{V: event.Version}, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read snapshot %s: %w", SnapshotKey(channel), err)
	}
	if body, ok := envelope.Unwrap(b); ok {
		b = body // signed: read unverified (subscribers verify)
	}
	s = new(event.Snapshot)
	if err := json.Unmarshal(b, s); err != nil {
		return nil, false, fmt.Errorf("decode snapshot %s: %w", SnapshotKey(channel), err)
	}
	return s, true, nil
}
