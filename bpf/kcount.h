// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// In-kernel counting (--kernel-count): the first stage of hot-key detection
// run in the capture programs. For a request segment that starts on a
// command boundary and holds only whole commands, the programs parse the
// commands (Redis RESP by the generated command table, memcached text
// get/gets/gat/gats and meta mg, memcached binary GET/GETQ/GETK/GETKQ),
// hash every key with the detector's identity (xxhash64(key) XOR a seed of
// server address, port, protocol and namespace: detect/detect.go) and add
// its weight to a per-CPU bucket counter of the sub-window the packet falls
// in (bpf_ktime_get_coarse_ns / kc_sub_ns). User space reads the counts of ended
// sub-windows, locates buckets, and writes the located buckets and the hot
// keys back (kc_located, kc_hot). The segment is then copied to the ring
// only when user space needs it: a read whose bucket is located, a write to
// a hot key, a session command (SELECT, MULTI, ...), an ECHO (absorbed-demand
// reports), or anything the programs could not parse whole; those fallbacks
// are counted by reason (kc_stats) and their keys are left for user space
// to count.
//
// Limits (each a fallback, counted, never a wrong count):
//   KC_SCRATCH  request payload parsed per segment (larger: KR_LARGE)
//   KC_MAX_KEY  key length (longer: KR_LONG_KEY)
//   KC_MAX_KEYS keys per segment (more: KR_KEYS)
//   KC_STEPS    parser steps per segment: one per header byte and per
//               value; a segment of at most KC_SCRATCH bytes never needs more
//   KC_NAME     command name length (longer: KR_UNKNOWN)

// KC_BUCKETS is how many buckets the programs count, whatever the
// detector's bucket count: user space locates on these (detect/kernel.go).
// A bucket is located when its keys' reads together reach a quarter of the
// threshold, so random reads of many keys locate the buckets where a few
// of them meet; the more buckets, the fewer such meetings (a bucket where
// three keys meet is 8 times rarer at twice the buckets), and the fewer
// reads copied for nothing. A per-CPU map value is at most 32 KiB, so a
// slot's counts are KC_PARTS entries of KC_PART buckets.
//
// A count is 16 bits, saturating: a bucket counts at most 65 535 reads on
// one CPU in one sub-window. Twice the buckets in the same lines and the
// same cache footprint as 32-bit counts; a saturated bucket is far above
// any threshold kernel counting accepts (the settings refuse a threshold
// whose reads in a sub-window would pass 65 535), so it is located all
// the same, and its key's demand bound (detect/kernel.go) stays above the
// cold line.
#define KC_BUCKETS 131072
#define KC_PART 16384
#define KC_PART_BITS 14 // log2(KC_PART)
#define KC_PARTS (KC_BUCKETS / KC_PART)
#define KC_SLOTS 8
#define KC_SCRATCH 4096
#define KC_MASK (KC_SCRATCH - 1)
#define KC_MAX_KEY 250
#define KC_MAX_KEYS 128
#define KC_STEPS (KC_SCRATCH + 64)
#define KC_NAME 16
// Reply bytes (kc_bytes):
//   KC_RQ       queue entries per connection (a read key, or a command
//               without one); more outstanding: the replies go unpaired
//               until a quiet point (kc_stats.rq_full)
//   KC_RQ_SEG   entries one request segment pushes (more: as full)
//   KC_RDEPTH   aggregate nesting framed in replies (deeper: KU_DEPTH)
//   KC_RSTEPS   headers and line chunks framed per reply segment
//   KC_QUIET_NS the quiet in both directions after which a connection's
//               pairing starts afresh (decode.DefaultQuietNS)
#define KC_RQ 256
#define KC_RQ_SEG 256
#define KC_RDEPTH 8
#define KC_RSTEPS 4096
#define KC_QUIET_NS 1000000ULL

// Set from Go before loading. kc_on 0: the programs copy every request as
// before (--kernel-count=false).
volatile const __u8 kc_on = 0;
volatile const __u64 kc_sub_ns = 100000000;
// kc_bytes 1: stage 1 of "hot by bandwidth" in the kernel too, for Redis:
// request segments counted here push their commands' read keys on a
// per-connection queue (kc_rflows), the reply programs frame the replies
// and add each reply's bytes to its read keys' buckets (kc_bcounts). See
// "Reply bytes" below. 0: none of that code is verified or run.
volatile const __u8 kc_bytes = 0;
#define KC_SHIFT 47 // 64 - log2(KC_BUCKETS)

// Fallback reasons: the segment is copied and its keys are counted in user
// space. Mirrored in kcount.go.
enum kc_reason {
	KR_SPLIT = 0,    // a command continues past the segment (or began before it)
	KR_LONG_KEY = 1, // a key longer than KC_MAX_KEY
	KR_INLINE = 2,   // a Redis inline command
	KR_MIDSTREAM = 3, // the connection's start was not seen, or a segment out of order
	KR_UNKNOWN = 4,  // a command not in the table
	KR_COMPLEX = 5,  // a command whose keys the programs do not find (EVAL, SORT, XREAD, ...)
	KR_KEYS = 6,     // more keys or elements than the programs parse per segment
	KR_LARGE = 7,    // a segment larger than KC_SCRATCH
	KR_PROTO = 8,    // a port of another protocol (Tair) or none configured
	KR_MALFORMED = 9, // not a well-formed request
	KR_LOAD = 10,    // the payload could not be read
	KR_MAX = 11,
};

// Why reply bytes were attributed to no key (kc_stats.unattr, kc_bytes).
// Mirrored in kcount.go.
enum kc_unattr {
	KU_NOKEY = 0,    // the reply of a command without read keys (writes, PING, EXEC, ...)
	KU_PUSH = 1,     // a RESP3 push: answers no request
	KU_UNSYNCED = 2, // the connection's replies are not paired (after a loss, until a quiet point)
	KU_DEAD = 3,     // after SUBSCRIBE/PSUBSCRIBE/SSUBSCRIBE/MONITOR
	KU_BAD = 4,      // not a RESP2/RESP3 reply (or a length the programs do not take)
	KU_DEPTH = 5,    // aggregates nested deeper than KC_RDEPTH
	KU_UNPAIRED = 6, // a reply with no command queued for it
	KU_GAP = 7,      // reply bytes missing or out of order
	KU_STEPS = 8,    // more headers in one segment than KC_RSTEPS
	KU_NOFLOW = 9,   // a connection the programs keep no queue for
	KU_LOAD = 10,    // the payload could not be read
	KU_RACE = 11,    // the request side started afresh while a reply was framed
	KU_MAX = 12,
};

// Why a parsed segment is copied (bits).
#define KC_COPY_LOCATED 1 // a read in a located bucket
#define KC_COPY_HOT 2     // a write to a hot key
#define KC_COPY_SESSION 4 // SELECT, MULTI, EXEC, DISCARD, RESET, HELLO, ...
#define KC_COPY_REPORT 8  // ECHO (absorbed-demand reports)

// Record flags (rec_hdr.pad2) under kernel counting.
#define KC_REC_COUNTED 1 // this record's reads were counted in the kernel
#define KC_REC_GAP 2     // bytes of the flow before it were counted and not copied
// Reply framing (kc_bytes, Redis; bpf/kcount.go RecFramed...): on a request
// record, its commands' replies are copied (FRAMED), pairing starts at it
// (FRAMED_FROM), or no reply is copied until a FRAMED_FROM (UNFRAMED).
#define KC_REC_FRAMED 8
#define KC_REC_FRAMED_FROM 16
#define KC_REC_UNFRAMED 32

// kc_stats: what every counted request writes comes first, on one line.
struct kc_stats {
	__u64 segments;    // request segments looked at
	__u64 counted;     // parsed whole and counted
	__u64 skipped;     // of those, not copied
	__u64 requests;    // commands counted
	__u64 keys;        // keys counted (reads and writes)
	__u64 reads;       // weighted reads added to buckets
	__u64 copy_located;
	__u64 copy_hot;
	__u64 copy_session;
	__u64 copy_report;
	__u64 duplicate;   // request segments seen again after they were counted, not copied
	__u64 fallback[KR_MAX];
	// kc_bytes: the request side of the reply queues.
	__u64 rq_cmds;     // commands pushed
	__u64 rq_lost;     // request segments not counted whole: the connection's replies unpaired until a quiet point
	__u64 rq_full;     // request segments whose commands did not fit the queue (also unpaired from there)
	__u64 rq_wait;     // counted segments not pushed: the connection waits for a quiet point
	__u64 rq_resync;   // fresh starts after a quiet point
	// kc_bytes: the reply side.
	__u64 rsegments;  // reply segments with payload looked at
	__u64 rbytes;     // their payload bytes
	__u64 rdup;       // reply bytes seen again (cgroup's second view, retransmissions), not counted again
	__u64 rreplies;   // replies attributed to read keys
	__u64 rattr;      // their bytes (each reply once, whatever its key count)
	__u64 runits;     // 64-byte units added to byte buckets (a key's share rounded up)
	__u64 unattr[KU_MAX]; // reply bytes attributed to no key, by reason
	// kc_bytes, reply records.
	__u64 rc_unsent;  // copied request records of framed connections not delivered
	__u64 rc_fail;    // copied replies not delivered whole (range list, ring, framing)
	__u64 rc_records; // reply records emitted
	__u64 rc_bytes;   // their payload bytes
	__u64 rc_elided;  // bulk payload bytes of copied replies left out
};

// The programs' per-CPU state (kc_scratch, kc_counts) is in plain arrays
// indexed by CPU (kc_cpu), not per-CPU arrays: the
// verifier inlines a plain array's lookup to an address computed from
// constants, where a per-CPU array's first loads the map's table of per-CPU
// pointers, and every such table was a cache line a request found evicted
// on a busy node (about a line each under redis-benchmark -P 1). The
// values start on a page (BPF_F_MMAPABLE) and are whole cache lines, so no
// two CPUs write one line; user space reads them through the mapping.
// Sized from Go at load (bpf/kcount.go): possible CPUs × the entries here.
static __always_inline __u32 kc_cpu(void)
{
	return bpf_get_smp_processor_id();
}

// A slot is one sub-window of bucket counts on one CPU (slot = epoch %
// KC_SLOTS): its entry in the CPU's kc_scratch (slots) and KC_PARTS
// kc_counts entries ((cpu * KC_SLOTS + slot) * KC_PARTS + part). A
// program that finds an older epoch in it clears the
// parts that were written (dirty) first, so the counts of a sub-window
// stay readable for KC_SLOTS - 1 sub-windows after it ends: a reader late
// by less than that loses nothing. The reader reads only dirty parts.
struct kc_slot {
	__u64 epoch;
	__u64 dirty; // bit p: part p has counts
};

struct kc_part {
	__u16 c[KC_PART];
};

// Loaded with one entry when counting is off (bpf/kcount.go).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KC_SLOTS * KC_PARTS); // × CPUs
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct kc_part);
} kc_counts SEC(".maps");

// kc_located: bit b of bits is set when bucket b is located. Bit g of any
// is set when a bucket of group g (KC_GROUP buckets) is: most reads fall
// in a bucket that is not located, and the programs then read only the
// one line of any, which stays in the cache, not a line of the 16 KiB of
// bits picked at random for each key (a cache miss per read at -P 1: about
// a seventh of the programs' samples in a profile of redis-benchmark -P 1).
#define KC_GROUP (KC_BUCKETS / 512)
struct kc_located {
	__u64 any[8];
	__u64 bits[KC_BUCKETS / 64];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE); // user space writes only the words that change
	__type(key, __u32);
	__type(value, struct kc_located);
} kc_located SEC(".maps");

// kc_hot: identity hashes of the hot keys (writes to them are copied).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u8);
} kc_hot SEC(".maps");

// Command kinds (kc_cmd.kind).
#define KC_READ 1
#define KC_WRITE 2
#define KC_NOKEY 3   // no keys, no session state: counted as parsed
#define KC_SESSION 4 // copied; SELECT/MULTI/EXEC/DISCARD/RESET also tracked here
#define KC_ECHO 5
#define KC_COMPLEX 6

// Session commands the programs follow to keep the connection's DB.
#define KC_S_SELECT 1
#define KC_S_MULTI 2
#define KC_S_EXEC 3
#define KC_S_DISCARD 4
#define KC_S_RESET 5

struct kc_name {
	__u8 n[KC_NAME];
};

// kc_cmd describes one Redis command for the parser, from the generated
// table (bpf/kcount.go): keys at arguments first..last (last < 0 counts from
// argc) every step; arity as COMMAND gives it.
struct kc_cmd {
	__u8 kind;
	__u8 fieldw;  // weighted by fields: argc - 2 when argc > 3 (HMGET)
	__u8 session; // KC_S_*
	__u8 flags;   // KC_CF_*
	__s16 arity;
	__s16 first;
	__s16 last;
	__s16 step;
};

// kc_cmd.flags (kc_bytes).
#define KC_CF_PERELEM 1 // MGET: an array reply of one element per key gives each its element
#define KC_CF_DEAD 2    // SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE, MONITOR: replies stop answering requests

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 512);
	__type(key, struct kc_name);
	__type(value, struct kc_cmd);
} kc_cmds SEC(".maps");

// kc_proto: the protocol of each server port (decode.Proto: 1 redis,
// 2 memcache, 3 tair).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} kc_proto SEC(".maps");

static __always_inline __u8 kc_port_proto(__u32 port)
{
	__u8 *pp = bpf_map_lookup_elem(&kc_proto, &port);
	return pp ? *pp : 0;
}

// kc_flow is a connection's parsing state: where its next command starts,
// if known, and its Redis DB.
struct kc_flow {
	__u32 next_seq;
	__s32 db;
	__s32 db_before; // DB at MULTI (a DISCARD restores it)
	__u8 synced;     // next_seq is a command boundary
	__u8 in_multi;
	__u8 gap;        // segments were counted and not copied since the last copy
	__u8 syn;        // the programs saw the connection's SYN
	__u8 proto;      // the server port's protocol (kc_proto), from the start
	__u8 copied;     // not synced: next_seq ends the segment last copied uncounted
	__u8 pad[2];
};

// Connection states live in kc_conns, a table of sets of KC_WAYS ways,
// found by a keyed hash of the connection's addresses and ports: its set
// by the hash's high bits, its way by the whole hash (the tag). A
// hash map (the LRU one this replaced) costs two random pages per lookup,
// its bucket's and its element's; a set is one line of one page, and on
// this path every page the TLB does not hold costs as much as the rest of
// the lookup (measured: the request program on TC at -P 1, 617 to 539 ns a
// run).
//
// A connection takes a free way of its set, else one whose connection has
// sent nothing for KC_IDLE (closed connections are never removed: their
// ways are reused this way), whose state then moves to kc_flows, an LRU
// hash keyed by the tag; when all four are busy the newcomer goes there
// itself. A set that sent a state there is marked, so that a miss in it
// looks in kc_flows too. So a connection loses its state only where the
// LRU hash this replaced dropped it (its least recently used end), and a
// way is never taken from a connection that sent something within KC_IDLE:
// a program run could still hold the state it reuses (and write a stale
// connection's fields over the new one's, a DB among them) only if that
// connection, silent for seconds, spoke again in the instant of the reuse.
//
// A tag matching another connection's (2^-64 per pair) shares its state:
// the segment is then at a boundary only if its sequence number is the
// other connection's next one too, so that costs a copy, not a count.
// The key is random per load, so traffic cannot aim at a set.
#define KC_WAYS 4
#define KC_IDLE 4 // units of 256 jiffies: 1.0 s at HZ=1000, 10 s at HZ=100
struct kc_cset {
	__u64 tag[KC_WAYS];  // 0: free
	__u16 seen[KC_WAYS]; // jiffies >> 8 at the way's last segment
	__u8 spilled;        // a connection of this set is in kc_flows
	__u8 pad[3];
	struct kc_flow f[KC_WAYS]; // way 0 on the tags' line, the others on the next
} __attribute__((aligned(128)));

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16384); // sets; a power of two, set from Go
	__type(key, __u32);
	__type(value, struct kc_cset);
} kc_conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64); // the connection's tag
	__type(value, struct kc_flow);
} kc_flows SEC(".maps");

// Set from Go: kc_conns' sets less one, and the hash's key.
volatile const __u32 kc_csets = 16383;
volatile const __u64 kc_conn_key = 0;

// kc_anchor: a byte per connection (by a hash of its client address and
// ports; connections may share one), set when the programs copy a request
// segment of a connection whose SYN they did not see (joined mid-stream:
// open before the daemon started, or its SYN lost). User space confirms
// such a connection's requests only by a segment of the server's that
// acknowledges them (stream: the requests are held until then), and with
// replies off none would come: the next reply of the connection takes the
// mark and is copied as a header without payload (REC_ANCHOR). A mark
// shared by two connections costs a header record more. Plain byte stores:
// a mark set while another CPU takes it can be lost, and the requests then
// wait for the next copy of the connection to set it again.
//
// pending counts the marks set and not taken, so that a reply looks its
// mark up only when there may be one: most connections were seen to open,
// and their replies then pay a read of one line that rarely changes, not
// a hash and a line of the marks each. Counted with atomic adds; races on
// one mark (two CPUs setting or taking it at once) can leave the count off
// by one: above costs lookups, below leaves a mark until the next one set.
#define KC_ANCHORS 65536
struct kc_anchor_marks {
	__u64 pending;
	__u8 pad[56]; // pending alone on its cache line
	__u8 m[KC_ANCHORS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kc_anchor_marks);
} kc_anchor SEC(".maps");

// kc_anchor_at is the mark of the connection of client address a (16
// bytes, network order; IPv4 in the first 4) and ports.
static __always_inline __u32 kc_anchor_at(const __u8 *a, __u16 cport, __u16 sport)
{
	__u64 lo, hi;
	__builtin_memcpy(&lo, a, 8);
	__builtin_memcpy(&hi, a + 8, 8);
	__u64 x = lo * 0x9E3779B97F4A7C15ULL ^ hi * 0xC2B2AE3D27D4EB4FULL ^
		  ((__u64)cport << 16 | sport) * 0x94D049BB133111EBULL;
	x ^= x >> 29;
	x *= 0xBF58476D1CE4E5B9ULL;
	return (x >> 48) & (KC_ANCHORS - 1);
}

static __always_inline void kc_anchor_set(const struct skip_key *k)
{
	__u32 zero = 0;
	struct kc_anchor_marks *a = bpf_map_lookup_elem(&kc_anchor, &zero);
	if (!a)
		return;
	__u8 *m = &a->m[kc_anchor_at(k->saddr, k->sport, k->dport)];
	if (*m)
		return;
	*m = 1;
	__sync_fetch_and_add(&a->pending, 1);
}

// kc_anchor_take reports whether reply h's connection is marked, and
// clears the mark.
static __always_inline int kc_anchor_take(struct rec_hdr *h)
{
	__u32 zero = 0;
	struct kc_anchor_marks *a = bpf_map_lookup_elem(&kc_anchor, &zero);
	if (!a || !a->pending)
		return 0;
	__u8 *m = &a->m[kc_anchor_at(h->daddr, h->dport, h->sport)];
	if (!*m)
		return 0;
	*m = 0;
	__sync_fetch_and_add(&a->pending, -1);
	return 1;
}

// kc_st is one segment's parse. It lives in the per-CPU scratch map, not
// on the stack: the verifier does not track map contents, so every
// bpf_loop iteration starts from the same state and the callbacks are
// verified in a few passes instead of once per possible position.
struct kc_st {
	__u64 addr_lo, addr_hi; // server address, As16
	__u64 seed;
	__u32 pos, end;
	__u32 nkeys;
	__u32 argc, argi; // RESP: arguments of the current command, next index
	__u32 weight;
	__u32 copy;   // KC_COPY_*
	__s32 reason; // KR_* or -1
	__u32 reqs;
	__u32 nk;     // keys (reads and writes) in the segment
	__s32 db, db_before;
	__u16 port;
	__u8 proto;
	__u8 in_multi;
	__u8 session; // the current command's KC_S_*
	__u8 kind;    // the current command's kind
	__u8 state;   // the parser's state (R_*, M_*)
	__u8 ndig;    // digits in num
	__u32 num;    // the number being read (a length, a count, a DB)
	__u32 tok;    // RESP: end of SELECT's argument; memcached: start of the token
	__u32 toklen; // memcached: bytes of the token so far
	__u32 ntok;   // memcached: tokens of the line so far
	__u32 tnum;   // memcached: the token's value if all digits
	__u8 tdig;    // memcached: the token is all digits
	__u8 pad2[3];
	struct kc_cmd cmd;
	struct kc_name nkey; // the lookup key: in the map, not on the stack
	// kc_bytes: the segment's queue entries (kc_state.rq), pushed whole
	// once it parsed whole.
	__u32 nrq;
	__u32 rq_first; // entry of the current command's first read key
	__u16 rq_keys;  // read keys of the current command so far
	__u8 rq_over;   // more entries than KC_RQ_SEG, or keys than a command entry counts
	__u8 rq_pe;     // the current command's reply is per element (MGET)
	__u8 rq_dead;   // a command after which replies answer no request
	__u8 pad3[7];
};

// kc_ncache is the last command name found in kc_cmds on this CPU (folded,
// as looked up) and its entry. Traffic repeats a few commands, and a
// hash-map lookup per command was a fifth of the programs' time at -P 16.
// It outlives the segment: the table is filled once, before the programs
// are attached, and never changes.
struct kc_ncache {
	__u64 lo, hi;
	struct kc_cmd cmd;
	__u8 ok;
	__u8 pad[7];
};

// kc_in is what kc_request needs from the packet's headers.
struct kc_in {
	struct skip_key k; // client to server
	__u32 seq;
	__u32 pay_off;
	__u32 len;   // payload bytes in the packet
	__u8 family;
	__u8 flags;  // TCP flags
	__u8 xdp;
	__u8 unseen; // out: the programs did not see the connection's SYN
	__u32 rec;   // out: KC_REC_* for the record if one is copied
	__u32 frec;  // out (kc_bytes): KC_REC_FRAMED* / KC_REC_UNFRAMED if copied
	__u32 fpad;
	__u64 ckey;  // k's tag (kc_conn_find): its way's in its set, its key in kc_flows
};

// kc_read is one read of a segment, counted once the whole segment parsed.
struct kc_read {
	__u64 h; // identity hash
	__u32 w; // weight
	__u32 pad;
};

// Reply records: the ranges of a reply segment to copy.
#define KC_RR 8
#define KC_RNONE 0xffffffffU
#define KC_RELIDE 256 // a copied reply's bulk payload longer than this is left out
struct kc_rrange {
	__u32 off, len; // in the segment's payload
	__u32 flags;    // KC_REC_GAP: starts a reply after bytes not copied
	__u32 pad;
};

// kc_rseg is the reply segment being framed (kc_bytes): in the scratch
// map, not on the stack of the reply chain.
struct kc_rseg {
	struct skip_key k; // client to server, as kc_flows
	__u32 seq;
	__u32 len;     // payload bytes
	__u32 pay_off;
	__u32 pos;     // next payload byte to frame
	__u8 flags;    // TCP flags
	__u8 stop;     // KU_* + 1: the reply side lost step here
	__u8 short_;   // the segment is not all in the packet
	__u8 partial;  // stop: the reply framed so far is not counted yet
	__u8 nrr;      // reply records to emit (rr)
	__u8 rflag;    // KC_REC_GAP for the open range
	__u8 quiet;    // the segment lies in a copied reply: no zero-length GAP record for it
	__u8 fresh;    // kc_rstep: a reply starts at this header
	__u32 ra;      // start of the open range, KC_RNONE: none
	__u8 elide;    // kc_rstep: the bulk's payload is left out
	__u8 cl;       // a copied reply ended at cl_at: its range is to be closed
	__u8 pad1[2];
	__u32 cl_at;
	__u32 pad2;
	__u8 buf[64];  // the bytes being looked at (a header, a line chunk)
	struct kc_rrange rr[KC_RR];
	struct rec_hdr rh; // the reply record being emitted (not on the stack)
	__u64 ts;          // the reply records' time: taken before the framer reads cfrom
};

// A queue entry (kc_rflow.q, kc_state.rq) is a u64: bits 10-63 are the
// read key's identity hash (its bucket is the top bits), bit 0 marks a
// command's first entry, and that entry also holds the command's read-key
// count (bits 2-9; 0: a command without read keys, whose reply is framed
// and attributed to none) and whether its reply is per element (bit 1,
// MGET). Later entries of the command are its other read keys. Bit 9 of a
// first entry (KC_RQ_COPY) marks a command of a segment copied to user
// space: its reply is copied too ("Reply records" below). The count
// has 7 bits: a command of more than 127 read keys stops the pushing
// (rq_over) as one of more than 255 did.
#define KC_RQ_FIRST 1ULL
#define KC_RQ_PE 2ULL
#define KC_RQ_NK_SHIFT 2
#define KC_RQ_NK_MAX 127
#define KC_RQ_COPY (1ULL << 9)
#define KC_RQ_HASH (~0x3ffULL)

// kc_state (a kc_scratch entry) is a CPU's state: one segment's payload and
// parse state (st comes first so a pointer to it is a pointer to the whole:
// kc_buf), the counters, and the sub-window slots. What a request of a few
// keys touches (st, in, nc, the counters it writes, its slot, its first
// reads and the payload's first bytes) is in the first of the CPU's own two
// pages, in as few cache lines as the fields allow; a map each for the
// counters and the slots cost a line more each per request, and a page.
struct kc_state {
	struct kc_st st;
	struct kc_in in;
	struct kc_ncache nc;
	struct kc_stats stats;
	struct kc_slot slots[KC_SLOTS];
	struct kc_read reads[KC_MAX_KEYS]; // the segment's reads
	__u8 buf[KC_SCRATCH + 512]; // slack: masked offsets plus a key stay inside
	// kc_bytes, after the request path's lines: the byte counts' slots,
	// the reply segment being framed and the request segment's entries.
	struct kc_slot bslots[KC_SLOTS];
	struct kc_rseg rs;
	__u64 rq[KC_RQ_SEG];
} __attribute__((aligned(4096)));

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); // × CPUs
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct kc_state);
} kc_scratch SEC(".maps");

#define kc_buf(st) ((struct kc_state *)(st))


const struct kc_stats *unused_kc_stats __attribute__((unused));
const struct kc_slot *unused_kc_slot __attribute__((unused));
const struct kc_part *unused_kc_part __attribute__((unused));
const struct kc_located *unused_kc_located __attribute__((unused));
const struct kc_cmd *unused_kc_cmd __attribute__((unused));
const struct kc_name *unused_kc_name __attribute__((unused));
const struct kc_flow *unused_kc_flow __attribute__((unused));

// xxhash64 (seed 0), as github.com/cespare/xxhash Sum64.
#define P1 11400714785074694791ULL
#define P2 14029467366897019727ULL
#define P3 1609587929392839161ULL
#define P4 9650029242287828579ULL
#define P5 2870177450012600261ULL

static __always_inline __u64 rotl64(__u64 x, int r)
{
	return (x << r) | (x >> (64 - r));
}

static __always_inline __u64 xround(__u64 acc, __u64 in)
{
	acc += in * P2;
	acc = rotl64(acc, 31);
	return acc * P1;
}

static __always_inline __u64 xmerge(__u64 acc, __u64 v)
{
	v = xround(0, v);
	acc ^= v;
	return acc * P1 + P4;
}

// ld64/ld32 read little-endian words at any alignment. Only for the
// scratch map value: the verifier allows unaligned map loads on hosts with
// efficient unaligned access (amd64, arm64), and one ldxdw replaces eight
// byte loads and the registers spilled to assemble them.
static __always_inline __u64 ld64(const __u8 *p)
{
	return *(const __u64 *)p;
}

static __always_inline __u32 ld32(const __u8 *p)
{
	return *(const __u32 *)p;
}

// kc_xxh hashes len (<= KC_MAX_KEY) bytes of the scratch buffer at off. A
// global function: the verifier checks it once, not at every call site.
__attribute__((noinline)) __u64 kc_xxh(struct kc_state *s, __u32 off, __u32 len)
{
	if (!s)
		return 0;
	off &= KC_MASK;
	if (len > KC_MAX_KEY)
		len = KC_MAX_KEY;
	const __u8 *p = s->buf + off;
	__u64 h;
	__u32 i = 0;
	if (len >= 32) {
		__u64 v1 = P1 + P2, v2 = P2, v3 = 0, v4 = -P1;
		for (int k = 0; k < KC_MAX_KEY / 32; k++) {
			if (i + 32 > len)
				break;
			v1 = xround(v1, ld64(p + (i & 255)));
			v2 = xround(v2, ld64(p + ((i + 8) & 255)));
			v3 = xround(v3, ld64(p + ((i + 16) & 255)));
			v4 = xround(v4, ld64(p + ((i + 24) & 255)));
			i += 32;
		}
		h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
		h = xmerge(h, v1);
		h = xmerge(h, v2);
		h = xmerge(h, v3);
		h = xmerge(h, v4);
	} else {
		h = P5;
	}
	h += len;
	for (int k = 0; k < 4; k++) {
		if (i + 8 > len)
			break;
		h ^= xround(0, ld64(p + (i & 255)));
		h = rotl64(h, 27) * P1 + P4;
		i += 8;
	}
	if (i + 4 <= len) {
		h ^= (__u64)ld32(p + (i & 255)) * P1;
		h = rotl64(h, 23) * P2 + P3;
		i += 4;
	}
	for (int k = 0; k < 4; k++) {
		if (i >= len)
			break;
		h ^= (__u64)p[i & 255] * P5;
		h = rotl64(h, 11) * P1;
		i++;
	}
	h ^= h >> 33;
	h *= P2;
	h ^= h >> 29;
	h *= P3;
	h ^= h >> 32;
	return h;
}

static __always_inline __u64 mix64(__u64 x)
{
	x ^= x >> 30;
	x *= 0xBF58476D1CE4E5B9ULL;
	x ^= x >> 27;
	x *= 0x94D049BB133111EBULL;
	x ^= x >> 31;
	return x;
}

// kc_cset_of is the set of the connection whose tag is in->ckey: the tag's
// high bits (its low bit is forced to 1, 0 meaning a free way).
static __always_inline __u32 kc_cset_of(const struct kc_in *in)
{
	return (in->ckey >> 32) & kc_csets;
}

// kc_conn_find locates connection in->k's state: its way in its set
// (kc_cset_of(in)), KC_WAYS when it may be in kc_flows (key in->ckey), -1 when
// it has none. A global function: the callers' frames stay as they were.
__attribute__((noinline)) int kc_conn_find(struct kc_in *in)
{
	if (!in)
		return -1;
	__u64 x = mix64(ld64(in->k.saddr) ^ kc_conn_key);
	x = mix64(x ^ ld64(in->k.saddr + 8));
	x = mix64(x ^ ld64(in->k.daddr));
	x = mix64(x ^ ld64(in->k.daddr + 8) ^ ((__u64)in->k.sport << 16 | in->k.dport) << 32);
	in->ckey = x | 1;
	__u32 si = kc_cset_of(in);
	struct kc_cset *cs = bpf_map_lookup_elem(&kc_conns, &si);
	if (!cs)
		return -1;
	for (int w = 0; w < KC_WAYS; w++) {
		if (cs->tag[w] == in->ckey) {
			// Written when it changes (every 256 ticks), not per segment:
			// the tags' line stays clean for the set's other connections.
			__u16 now = bpf_jiffies64() >> 8;
			if (cs->seen[w] != now)
				cs->seen[w] = now;
			return w;
		}
	}
	return cs->spilled ? KC_WAYS : -1;
}

// kc_conn_new gives connection in->k (just looked up by kc_conn_find) a
// fresh state: a free way, else one whose connection has been idle for
// KC_IDLE (its state moves to kc_flows, where it is found if the
// connection is alive: an idle pooled connection keeps its DB), else
// kc_flows. Same returns.
__attribute__((noinline)) int kc_conn_new(struct kc_in *in)
{
	if (!in)
		return -1;
	__u32 si = kc_cset_of(in);
	struct kc_cset *cs = bpf_map_lookup_elem(&kc_conns, &si);
	if (!cs)
		return -1;
	__u64 tag = in->ckey;
	__u16 now = bpf_jiffies64() >> 8;
	// A way is claimed with a compare-and-swap of its tag (another CPU
	// may be taking a way of this set for another connection), and its
	// seen is written first: whoever reads a way's new tag reads its new
	// seen too (x86 keeps stores, and loads, in order), so a way just
	// claimed never looks idle.
	int w = 0;
	for (; w < KC_WAYS; w++) {
		if (cs->tag[w])
			continue;
		cs->seen[w] = now;
		if (!__sync_val_compare_and_swap(&cs->tag[w], 0, tag))
			break;
	}
	for (int v = 0; v < KC_WAYS && w == KC_WAYS; v++) {
		__u64 old = cs->tag[v];
		if (!old || (__u16)(now - cs->seen[v]) < KC_IDLE)
			continue;
		if (bpf_map_update_elem(&kc_flows, &old, &cs->f[v], BPF_ANY))
			continue;
		cs->spilled = 1;
		cs->seen[v] = now;
		if (__sync_val_compare_and_swap(&cs->tag[v], old, tag) == old)
			w = v;
	}
	if (w < KC_WAYS) {
		__builtin_memset(&cs->f[w], 0, sizeof(cs->f[w]));
		return w;
	}
	struct kc_flow z = {};
	cs->spilled = 1;
	if (bpf_map_update_elem(&kc_flows, &in->ckey, &z, BPF_ANY))
		return -1;
	return KC_WAYS;
}

// kc_flow_at is the state kc_conn_find or kc_conn_new returned.
static __always_inline struct kc_flow *kc_flow_at(struct kc_in *in, int w)
{
	if (w == KC_WAYS)
		return bpf_map_lookup_elem(&kc_flows, &in->ckey);
	if (w < 0 || w >= KC_WAYS)
		return 0;
	__u32 si = kc_cset_of(in);
	struct kc_cset *cs = bpf_map_lookup_elem(&kc_conns, &si);
	if (!cs)
		return 0;
	asm volatile("" : "+r"(cs)); // the offset added after the null check
	return &cs->f[w & (KC_WAYS - 1)];
}

// kc_seed is detect.identitySeed: the server's address as netip's As16
// (IPv4 mapped), port, namespace and protocol.
static __always_inline __u64 kc_seed(__u64 lo, __u64 hi, __u16 port, __s32 ns, __u8 proto)
{
	__u64 s = lo * 0x9E3779B97F4A7C15ULL ^ hi * 0xC2B2AE3D27D4EB4FULL ^ (__u64)port << 40 ^
		  (__u64)(__u32)ns << 8 ^ (__u64)proto;
	return mix64(mix64(s) + 1);
}

// kc_loop is the bpf_loop context: only a pointer, so it never changes.
struct kc_loop {
	struct kc_st *st;
};

static __always_inline __u8 kc_at(struct kc_st *st, __u32 i)
{
	return kc_buf(st)->buf[i & KC_MASK];
}

static __always_inline int kc_located_bit(__u64 h)
{
	__u32 zero = 0;
	struct kc_located *l = bpf_map_lookup_elem(&kc_located, &zero);
	if (!l)
		return 0;
	__u32 b = (h >> KC_SHIFT) & (KC_BUCKETS - 1);
	__u32 g = b / KC_GROUP;
	if (!((l->any[(g >> 6) & 7] >> (g & 63)) & 1))
		return 0;
	return (l->bits[b >> 6] >> (b & 63)) & 1;
}

// kc_rq_cmd starts a Redis command's queue entries (kc_bytes): its first
// entry, which takes its first read key if it has one.
static __always_inline void kc_rq_cmd(struct kc_st *st, __u8 flags)
{
	if (!kc_bytes)
		return;
	__u32 n = st->nrq;
	st->rq_keys = 0;
	st->rq_pe = flags & KC_CF_PERELEM;
	if (flags & KC_CF_DEAD)
		st->rq_dead = 1;
	if (n >= KC_RQ_SEG) {
		st->rq_over = 1;
		return;
	}
	kc_buf(st)->rq[n & (KC_RQ_SEG - 1)] = KC_RQ_FIRST | (st->rq_pe ? KC_RQ_PE : 0);
	st->rq_first = n;
	st->nrq = n + 1;
}

// kc_rq_key adds a read key of the current Redis command (kc_bytes). A
// global function: inlined, its registers cost the parser's callback a
// stack slot on the deepest call chain even with kc_bytes off.
__attribute__((noinline)) int kc_rq_key(struct kc_state *s, __u64 h)
{
	if (!s)
		return 0;
	struct kc_st *st = &s->st;
	if (st->proto != 1 || st->rq_over)
		return 0;
	__u32 k = st->rq_keys;
	if (k >= KC_RQ_NK_MAX) {
		st->rq_over = 1;
		return 0;
	}
	h &= KC_RQ_HASH;
	if (!h)
		h = KC_RQ_HASH & -KC_RQ_HASH; // a key entry is never 0
	__u64 *first = &kc_buf(st)->rq[st->rq_first & (KC_RQ_SEG - 1)];
	if (k == 0) {
		*first |= h;
	} else {
		__u32 n = st->nrq;
		if (n >= KC_RQ_SEG) {
			st->rq_over = 1;
			return 0;
		}
		kc_buf(st)->rq[n & (KC_RQ_SEG - 1)] = h;
		st->nrq = n + 1;
	}
	st->rq_keys = k + 1;
	*first = (*first & ~((__u64)KC_RQ_NK_MAX << KC_RQ_NK_SHIFT)) | (__u64)(k + 1) << KC_RQ_NK_SHIFT;
	return 0;
}

// kc_key handles one key of len bytes at off: a read is queued for the
// bucket counts (committed once the whole segment parsed), a write to a hot
// key marks the segment for copying. 0, or 1 to stop.
static __always_inline int kc_key(struct kc_st *st, __u32 off, __u32 len, int write, __u32 w)
{
	if (len > KC_MAX_KEY) {
		st->reason = KR_LONG_KEY;
		return 1;
	}
	__u64 h = kc_xxh(kc_buf(st), off, len) ^ st->seed;
	if (!h)
		h = 1;
	st->nk++;
	int loc = kc_located_bit(h);
	if (write) {
		if (loc && bpf_map_lookup_elem(&kc_hot, &h))
			st->copy |= KC_COPY_HOT;
		return 0;
	}
	if (loc)
		st->copy |= KC_COPY_LOCATED;
	if (kc_bytes)
		kc_rq_key(kc_buf(st), h);
	__u32 n = st->nkeys;
	if (n >= KC_MAX_KEYS) {
		st->reason = KR_KEYS;
		return 1;
	}
	struct kc_read *r = &kc_buf(st)->reads[n & (KC_MAX_KEYS - 1)];
	r->h = h;
	r->w = w;
	st->nkeys = n + 1;
	return 0;
}

static __always_inline void kc_reseed(struct kc_st *st)
{
	st->seed = kc_seed(st->addr_lo, st->addr_hi, st->port, st->db, st->proto);
}

// The parsers are byte-level state machines driven by bpf_loop: one
// callback call per header byte, one per bulk string or memcached value
// (skipped by its length). The callbacks have no loops of their own, so
// the verifier checks each in a few passes; with per-element callbacks
// holding small digit loops it explored ~670k instructions per program.
#define R_CMD 0    // a command's '*', or the end
#define R_ARGC 1   // digits of the argument count
#define R_ARGC_LF 2
#define R_BULK 3   // an argument's '$'
#define R_LEN 4    // digits of its length
#define R_LEN_LF 5
#define R_DB 6     // digits of SELECT's argument

// kc_lookup_name looks up the command name of len (1..15) bytes at off:
// letters folded to upper case a word at a time (clearing 0x20 in every
// byte with 0x40 set: only case variants of a name fold onto it).
static __always_inline struct kc_cmd *kc_lookup_name(struct kc_st *st, __u32 off, __u32 len)
{
	__u64 lo = ld64(kc_buf(st)->buf + (off & KC_MASK));
	__u64 hi = ld64(kc_buf(st)->buf + ((off & KC_MASK) + 8));
	if (len < 8) {
		lo &= (1ULL << (8 * len)) - 1;
		hi = 0;
	} else if (len < 16) {
		hi &= len == 8 ? 0 : (1ULL << (8 * (len - 8))) - 1;
	}
	lo &= ~((lo & 0x4040404040404040ULL) >> 1);
	hi &= ~((hi & 0x4040404040404040ULL) >> 1);
	struct kc_ncache *nc = &kc_buf(st)->nc;
	if (nc->ok && lo == nc->lo && hi == nc->hi)
		return &nc->cmd;
	__builtin_memcpy(st->nkey.n, &lo, 8);
	__builtin_memcpy(st->nkey.n + 8, &hi, 8);
	struct kc_cmd *cmd = bpf_map_lookup_elem(&kc_cmds, &st->nkey);
	if (cmd) {
		nc->cmd = *cmd;
		nc->lo = lo;
		nc->hi = hi;
		nc->ok = 1;
	}
	return cmd;
}

// kc_resp_name starts a command from its name (argument 0).
static __always_inline int kc_resp_name(struct kc_st *st, __u32 off, __u32 len)
{
	if (len == 0 || len >= KC_NAME) {
		st->reason = KR_UNKNOWN;
		return 1;
	}
	struct kc_cmd *cmd = kc_lookup_name(st, off, len);
	if (!cmd) {
		st->reason = KR_UNKNOWN;
		return 1;
	}
	st->cmd = *cmd;
	st->reqs++;
	__s32 argc = st->argc;
	int arity_ok = cmd->arity >= 0 ? argc == cmd->arity : argc >= -cmd->arity;
	kc_rq_cmd(st, arity_ok ? cmd->flags : 0);
	st->kind = arity_ok ? cmd->kind : KC_NOKEY; // rejected by the server: no keys
	st->session = arity_ok ? cmd->session : 0;
	if (st->kind == KC_COMPLEX) {
		st->reason = KR_COMPLEX;
		return 1;
	}
	if (st->kind == KC_ECHO)
		st->copy |= KC_COPY_REPORT;
	if (st->kind == KC_SESSION)
		st->copy |= KC_COPY_SESSION;
	st->weight = 1;
	if (cmd->fieldw && argc > 3)
		st->weight = argc - 2;
	if (st->kind == KC_READ || st->kind == KC_WRITE) {
		// Resolve the key range against argc, as the decoder does.
		__s32 first = cmd->first, last = cmd->last, step = cmd->step > 0 ? cmd->step : 1;
		if (last < 0) {
			last = argc + last;
			if (cmd->last == -1 && step > 1 && (__u32)(argc - first) % (__u32)step != 0)
				st->kind = KC_NOKEY; // unbalanced (MSET k1 v1 k2): rejected
		} else {
			last = first + last;
		}
		if (first >= argc || last >= argc || last < first)
			st->kind = KC_NOKEY;
		st->cmd.first = first;
		st->cmd.last = last;
		st->cmd.step = step;
	}
	switch (st->session) {
	case KC_S_MULTI:
		if (!st->in_multi) {
			st->in_multi = 1;
			st->db_before = st->db;
		}
		break;
	case KC_S_EXEC:
		st->in_multi = 0;
		break;
	case KC_S_DISCARD:
		if (st->in_multi) {
			st->db = st->db_before;
			st->in_multi = 0;
			kc_reseed(st);
		}
		break;
	case KC_S_RESET:
		st->db = 0;
		st->in_multi = 0;
		kc_reseed(st);
		break;
	}
	return 0;
}

static __always_inline long kc_bad(struct kc_st *st, int reason)
{
	st->reason = reason;
	return 1;
}

// kc_resp_bulk takes the bulk string argument of len bytes at off.
static __always_inline long kc_resp_bulk(struct kc_st *st, __u32 off, __u32 len)
{
	if (off + len + 2 > st->end)
		return kc_bad(st, KR_SPLIT);
	if (kc_at(st, off + len) != '\r' || kc_at(st, off + len + 1) != '\n')
		return kc_bad(st, KR_MALFORMED);
	st->pos = off + len + 2;
	__u32 ai = st->argi++;
	st->state = st->argi >= st->argc ? R_CMD : R_BULK;
	if (ai == 0)
		return kc_resp_name(st, off, len);
	if (st->session == KC_S_SELECT && ai == 1) {
		// SELECT n: the DB of the commands that follow (as the decoder
		// does, also when queued in MULTI; a DISCARD restores it).
		st->pos = off;
		st->tok = off + len;
		st->num = 0;
		st->ndig = 0;
		st->state = R_DB;
		return 0;
	}
	if (st->kind != KC_READ && st->kind != KC_WRITE)
		return 0;
	__s32 a = ai;
	if (a < st->cmd.first || a > st->cmd.last)
		return 0;
	if ((__u32)(a - st->cmd.first) % (__u32)st->cmd.step)
		return 0;
	return kc_key(st, off, len, st->kind == KC_WRITE, st->weight);
}

// kc_short reads a header of one or two digits and \r\n at p (after its
// '*' or '$') in one step: the common case, which the byte-level states
// would take four or five callback calls for. It returns the value | the
// header's length (3 or 4 bytes, past the \r\n) << 8, or -1 (then the
// byte-level states take it). No out-parameter: it would take stack, and
// the deepest call chain is near the verifier's 512 bytes.
static __always_inline int kc_short(struct kc_st *st, __u32 p)
{
	if (p + 4 > st->end)
		return -1;
	__u32 w = ld32(kc_buf(st)->buf + (p & KC_MASK));
	__u32 d0 = (w & 0xff) - '0', d1 = ((w >> 8) & 0xff) - '0';
	if (d0 > 9)
		return -1;
	if ((w >> 8 & 0xffff) == 0x0a0d)
		return d0 | 3 << 8;
	if (d1 <= 9 && (w >> 16) == 0x0a0d && d0 != 0)
		return (d0 * 10 + d1) | 4 << 8;
	return -1;
}

// kc_resp_one takes one step of the RESP parser: a header byte, or a
// whole element whose header is short. 0 to go on, 1 to stop.
static __always_inline long kc_resp_one(struct kc_st *st)
{
	__u32 p = st->pos;
	if (p >= st->end)
		return 1;
	__u8 c = kc_at(st, p);
	st->pos = p + 1;
	switch (st->state) {
	case R_CMD:
		if (c != '*')
			return kc_bad(st, (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ? KR_INLINE : KR_MALFORMED);
		{
			int n = kc_short(st, p + 1);
			if (n >= 0 && (n & 0xff) > 0) {
				st->argc = n & 0xff;
				st->argi = 0;
				st->state = R_BULK;
				st->pos = p + 1 + (n >> 8);
				return 0;
			}
		}
		st->num = 0;
		st->ndig = 0;
		st->state = R_ARGC;
		return 0;
	case R_ARGC:
	case R_LEN:
	case R_DB:
		if (c >= '0' && c <= '9') {
			if (st->ndig >= 9) {
				if (st->state != R_DB)
					return kc_bad(st, KR_MALFORMED);
				st->ndig = 100; // too long: the server rejects it
				return 0;
			}
			if (st->ndig == 1 && st->num == 0 && st->state != R_DB)
				return kc_bad(st, KR_MALFORMED); // a leading zero: the server rejects it
			st->num = st->num * 10 + (c - '0');
			st->ndig++;
			return 0;
		}
		if (st->state == R_DB) {
			if (p != st->tok) {
				st->ndig = 100; // not a number: the server rejects it
				return 0;
			}
			// At SELECT's \r\n (checked with the length).
			if (st->ndig > 0 && st->ndig < 10) {
				st->db = st->num;
				kc_reseed(st);
			}
			st->pos = p + 2;
			st->state = st->argi >= st->argc ? R_CMD : R_BULK;
			return 0;
		}
		if (c != '\r' || st->ndig == 0)
			return kc_bad(st, KR_MALFORMED);
		st->state = st->state == R_ARGC ? R_ARGC_LF : R_LEN_LF;
		return 0;
	case R_ARGC_LF:
		if (c != '\n' || st->num == 0)
			return kc_bad(st, KR_MALFORMED);
		st->argc = st->num;
		st->argi = 0;
		st->state = R_BULK;
		return 0;
	case R_BULK:
		if (c != '$')
			return kc_bad(st, KR_MALFORMED);
		{
			int n = kc_short(st, p + 1);
			if (n >= 0)
				return kc_resp_bulk(st, p + 1 + (n >> 8), n & 0xff);
		}
		st->num = 0;
		st->ndig = 0;
		st->state = R_LEN;
		return 0;
	case R_LEN_LF:
		break;
	default:
		return kc_bad(st, KR_MALFORMED);
	}
	// The end of a bulk string's header: its data follows.
	if (c != '\n')
		return kc_bad(st, KR_MALFORMED);
	return kc_resp_bulk(st, p + 1, st->num);
}

// kc_resp_fast takes a whole element with a short header (an array header
// "*N\r\n" or a bulk string "$N\r\n...\r\n", N < 100): 0 when it did,
// 1 to stop, 2 when the next element is something else (the byte-level
// states of kc_resp_one take it, in the next call).
static __always_inline long kc_resp_fast(struct kc_st *st)
{
	__u32 p = st->pos;
	if (p >= st->end)
		return 2;
	__u8 c = kc_at(st, p);
	int n;
	if (st->state == R_BULK && c == '$') {
		n = kc_short(st, p + 1);
		if (n < 0)
			return 2;
		return kc_resp_bulk(st, p + 1 + (n >> 8), n & 0xff) ? 1 : 0;
	}
	if (st->state == R_CMD && c == '*') {
		n = kc_short(st, p + 1);
		if (n < 0 || (n & 0xff) == 0)
			return 2;
		st->argc = n & 0xff;
		st->argi = 0;
		st->state = R_BULK;
		st->pos = p + 1 + (n >> 8);
		return 0;
	}
	return 2;
}

// KC_FAST is how many more whole elements one kc_resp_step call takes
// after its first step: a GET is three elements (array header, name, key),
// and each bpf_loop callback call costs a call and a frame, which at one
// element per call were about a quarter of the parser's time.
#define KC_FAST 5

// kc_get takes a whole "*2\r\n$3\r\nGET\r\n$N\r\nkey\r\n" (any case,
// N < 100) at a command boundary in one step: most requests on a cache port
// are such GETs, and the table-driven states take three elements and a
// name lookup for each. 0 when it took one, 1 to stop, 2 when the next
// command is something else.
static __always_inline long kc_get(struct kc_st *st)
{
	__u32 p = st->pos;
	if (st->state != R_CMD || p + 18 > st->end)
		return 2;
	const __u8 *b = kc_buf(st)->buf;
	if (ld64(b + (p & KC_MASK)) != 0x0a0d33240a0d322aULL) // *2\r\n$3\r\n
		return 2;
	__u64 w = ld64(b + ((p + 8) & KC_MASK)) & 0xffffffffffULL;
	if ((w & ~0x202020ULL) != 0x0a0d544547ULL) // GET\r\n, letters folded
		return 2;
	if (kc_at(st, p + 13) != '$')
		return 2;
	int n = kc_short(st, p + 14);
	if (n < 0)
		return 2;
	__u32 off = p + 14 + (n >> 8), len = n & 0xff;
	if (off + len + 2 > st->end)
		return 2; // split: the byte-level states say so
	if (kc_at(st, off + len) != '\r' || kc_at(st, off + len + 1) != '\n')
		return 2;
	st->pos = off + len + 2;
	st->reqs++;
	kc_rq_cmd(st, 0);
	return kc_key(st, off, len, 0, 1);
}

static long kc_resp_step(__u64 i, struct kc_loop *l)
{
	struct kc_st *st = l->st;
	long r = kc_get(st);
	if (r != 2)
		return r;
	r = kc_resp_one(st);
	if (r)
		return r;
	for (int k = 0; k < KC_FAST; k++) {
		// Opaque: addresses derived from st are not kept across the
		// iterations, which would spill them and overflow the stack
		// budget of the deepest call chain.
		asm volatile("" : "+r"(st));
		r = kc_resp_fast(st);
		if (r)
			return r == 1;
	}
	return 0;
}

// Memcached text, a byte at a time: tokens separated by spaces, lines by
// \r\n. get/gets k...; gat/gats exptime k...; mg key flags...: reads of
// their keys. set/add/replace/append/prepend/cas key flags exptime bytes
// ...: a write of the key, and the value block (bytes + \r\n) is skipped
// by its length. delete/incr/decr/touch key ...: writes. Anything else is
// unknown.
#define MC_GET 1
#define MC_GAT 2
#define MC_MG 3
#define MC_STORE 4
#define MC_WKEY 5

#define M_LINE 0 // in a line
#define M_LF 1   // after \r

static __always_inline int mc_word(struct kc_st *st, __u32 off, __u32 len)
{
	if (len > 8)
		return 0;
	__u64 w = ld64(kc_buf(st)->buf + (off & KC_MASK));
	if (len < 8)
		w &= (1ULL << (8 * len)) - 1;
	switch (w) {
	case 0x746567: // "get"
	case 0x73746567: // "gets"
		return MC_GET;
	case 0x746167: // "gat"
	case 0x73746167: // "gats"
		return MC_GAT;
	case 0x676d: // "mg"
		return MC_MG;
	case 0x746573: // "set"
	case 0x646461: // "add"
	case 0x6563616c706572ULL: // "replace"
	case 0x646e65707061ULL: // "append"
	case 0x646e6570657270ULL: // "prepend"
	case 0x736163: // "cas"
		return MC_STORE;
	case 0x6574656c6564ULL: // "delete"
	case 0x72636e69: // "incr"
	case 0x72636564: // "decr"
	case 0x6863756f74ULL: // "touch"
		return MC_WKEY;
	}
	return 0;
}

// mc_token handles the line's token number st->ntok (0: the command).
static __always_inline int mc_token(struct kc_st *st, __u32 off, __u32 len)
{
	__u32 n = st->ntok++;
	if (n == 0) {
		st->kind = mc_word(st, off, len);
		if (!st->kind)
			return kc_bad(st, KR_UNKNOWN);
		return 0;
	}
	switch (st->kind) {
	case MC_GAT:
		if (n == 1)
			return 0; // exptime
		return kc_key(st, off, len, 0, 1);
	case MC_GET:
		return kc_key(st, off, len, 0, 1);
	case MC_STORE:
		if (n == 4) {
			if (!st->tdig || st->toklen > 9)
				return kc_bad(st, KR_MALFORMED);
			st->num = st->tnum; // value bytes
		}
		/* fallthrough */
	default:
		if (n == 1)
			return kc_key(st, off, len, st->kind != MC_MG, 1);
	}
	return 0;
}

// mc_line ends a line: checks its token count and skips a value block.
static __always_inline int mc_line(struct kc_st *st)
{
	__u32 n = st->ntok;
	__u8 k = st->kind;
	st->ntok = 0;
	if (n < 2 || (k == MC_GAT && n < 3) || (k == MC_STORE && n < 5))
		return kc_bad(st, KR_MALFORMED);
	st->reqs++;
	if (k != MC_STORE)
		return 0;
	__u32 e = st->pos + st->num;
	if (st->num > KC_SCRATCH || e + 2 > st->end)
		return kc_bad(st, KR_SPLIT);
	if (kc_at(st, e) != '\r' || kc_at(st, e + 1) != '\n')
		return kc_bad(st, KR_MALFORMED);
	st->pos = e + 2;
	return 0;
}

static long kc_mc_step(__u64 i, struct kc_loop *l)
{
	struct kc_st *st = l->st;
	__u32 p = st->pos;
	if (p >= st->end)
		return 1;
	__u8 c = kc_at(st, p);
	st->pos = p + 1;
	if (st->state == M_LF) {
		if (c != '\n')
			return kc_bad(st, KR_MALFORMED);
		st->state = M_LINE;
		return mc_line(st);
	}
	if (c == ' ' || c == '\r') {
		if (st->toklen) {
			int r = mc_token(st, st->tok, st->toklen);
			st->toklen = 0;
			if (r)
				return 1;
		}
		if (c == '\r')
			st->state = M_LF;
		return 0;
	}
	if (c == '\n' || c == 0)
		return kc_bad(st, KR_MALFORMED);
	if (!st->toklen) {
		st->tok = p;
		st->tnum = 0;
		st->tdig = 1;
	}
	if (++st->toklen > KC_MAX_KEY)
		return kc_bad(st, st->ntok ? KR_LONG_KEY : KR_UNKNOWN);
	if (c >= '0' && c <= '9')
		st->tnum = st->tnum * 10 + (c - '0');
	else
		st->tdig = 0;
	return 0;
}

// Memcached binary: one step per request (24-byte header, extras, key,
// value). GET, GETQ, GETK, GETKQ are reads; SET/ADD/REPLACE/DELETE/INCR/
// DECR/APPEND/PREPEND and their quiet forms, TOUCH, GAT are writes or reads
// of their key; other opcodes without a key are counted as parsed.
static long kc_bin_step(__u64 i, struct kc_loop *l)
{
	struct kc_st *st = l->st;
	if (st->pos >= st->end)
		return 1;
	__u32 p = st->pos;
	if (p + 24 > st->end) {
		st->reason = KR_SPLIT;
		return 1;
	}
	if (kc_at(st, p) != 0x80) {
		st->reason = KR_MALFORMED;
		return 1;
	}
	__u8 op = kc_at(st, p + 1);
	__u32 klen = (__u32)kc_at(st, p + 2) << 8 | kc_at(st, p + 3);
	__u32 elen = kc_at(st, p + 4);
	__u32 body = (__u32)kc_at(st, p + 8) << 24 | (__u32)kc_at(st, p + 9) << 16 |
		     (__u32)kc_at(st, p + 10) << 8 | kc_at(st, p + 11);
	if (klen + elen > body) {
		st->reason = KR_MALFORMED;
		return 1;
	}
	if (body > KC_SCRATCH || p + 24 + body > st->end) {
		st->reason = KR_SPLIT;
		return 1;
	}
	st->pos = p + 24 + body;
	st->reqs++;
	int read = 0, write = 0;
	switch (op) {
	case 0x00: case 0x09: case 0x0c: case 0x0d: // GET GETQ GETK GETKQ
	case 0x1d: case 0x1e: // GAT GATQ
		read = 1;
		break;
	case 0x01: case 0x02: case 0x03: case 0x04: case 0x05: case 0x06: // SET ADD REPLACE DELETE INCR DECR
	case 0x0e: case 0x0f: case 0x11: case 0x12: case 0x13: case 0x14: case 0x15: case 0x16: // APPEND PREPEND SETQ..DECRQ
	case 0x19: case 0x1a: case 0x1c: // APPENDQ PREPENDQ TOUCH
		write = 1;
		break;
	}
	if (!read && !write)
		return 0;
	if (klen == 0)
		return 0;
	return kc_key(st, p + 24 + elen, klen, write, 1);
}

// kc_parse parses the payload in the scratch buffer (len bytes) for the
// protocol of st. It returns the fallback reason, or -1 when the segment
// parsed whole.
static __always_inline int kc_parse(struct kc_st *st)
{
	struct kc_loop l = {.st = st};
	st->reason = -1;
	int bin = 0;
	if (st->proto == 1) {
		bpf_loop(KC_STEPS, kc_resp_step, &l, 0);
	} else if (kc_buf(st)->buf[0] == 0x80) {
		bin = 1;
		bpf_loop(KC_STEPS, kc_bin_step, &l, 0);
	} else {
		bpf_loop(KC_STEPS, kc_mc_step, &l, 0);
	}
	if (st->reason < 0) {
		if (st->pos < st->end)
			st->reason = KR_KEYS; // more steps than KC_STEPS
		else if (st->proto == 1 && st->state != R_CMD)
			st->reason = KR_SPLIT;
		else if (st->proto != 1 && !bin && (st->state != M_LINE || st->toklen || st->ntok))
			st->reason = KR_SPLIT;
	}
	return st->reason;
}

struct kc_zero_ctx {
	struct kc_part *part;
};

// kc_zero clears 128 buckets a call, eight bytes a store: a part takes 128
// calls.
static long kc_zero(__u64 i, struct kc_zero_ctx *z)
{
	__u32 j = (i * 128) & (KC_PART - 128);
	__u64 *p = (__u64 *)&z->part->c[j];
#pragma unroll
	for (int k = 0; k < 32; k++)
		p[k] = 0;
	return 0;
}

// kc_clear clears part pi of slot cs (cpu * KC_SLOTS + slot). A global
// function, verified once apart from the loop it is called in.
__attribute__((noinline)) int kc_clear(__u32 cs, __u32 pi)
{
	__u32 key = cs * KC_PARTS + (pi & (KC_PARTS - 1));
	struct kc_zero_ctx z = {.part = bpf_map_lookup_elem(&kc_counts, &key)};
	if (z.part)
		bpf_loop(KC_PART / 128, kc_zero, &z, 0);
	return 0;
}

// kc_commit adds the segment's reads to this CPU's slot of the current
// sub-window. A part is cleared when it is first written in a new
// sub-window, so a slot costs nothing to reuse when few parts are used.
//
// A plain bounded loop, not a callback per key (a call and a return per
// key, as much as the add); the clearing, rare, is a call to a global
// function, so the verifier walks the loop's KC_MAX_KEYS iterations
// without the states of a bpf_loop in each. A global function: its
// registers and spills stay out of the stack frame of kc_request, on whose
// chain the parser's callbacks run.
__attribute__((noinline)) __u64 kc_commit(struct kc_state *s)
{
	if (!s)
		return 0;
	struct kc_st *st = &s->st;
	__u32 n = st->nkeys;
	if (!n)
		return 0;
	__u64 ep = bpf_ktime_get_coarse_ns() / kc_sub_ns;
	__u32 si = ep % KC_SLOTS;
	__u32 cs = kc_cpu() * KC_SLOTS + si;
	struct kc_slot *slot = &s->slots[si & (KC_SLOTS - 1)];
	if (slot->epoch != ep) {
		slot->dirty = 0;
		slot->epoch = ep;
	}
	__u64 reads = 0;
	for (__u32 i = 0; i < KC_MAX_KEYS; i++) {
		if (i >= n)
			break;
		__u32 b = (s->reads[i].h >> KC_SHIFT) & (KC_BUCKETS - 1);
		__u32 w = s->reads[i].w;
		__u32 pi = b >> KC_PART_BITS;
		if (!(slot->dirty & (1ULL << pi))) {
			// First count in this part since the slot was last cleared.
			kc_clear(cs, pi);
			slot->dirty |= 1ULL << pi;
		}
		__u32 key = cs * KC_PARTS + pi;
		struct kc_part *part = bpf_map_lookup_elem(&kc_counts, &key);
		if (!part)
			break;
		__u16 *cp = &part->c[b & (KC_PART - 1)];
		__u32 v = (__u32)*cp + w;
		if (v > 0xffff || v < w)
			v = 0xffff; // saturated: see KC_BUCKETS
		*cp = v;
		reads += w;
	}
	return reads;
}

// Reply bytes (kc_bytes): stage 1 of "hot by bandwidth" for Redis.
//
// Request side: a request segment counted whole at a command boundary
// pushes its commands' entries (KC_RQ_*: a command's read keys, or one
// entry for a command without any) on its connection's queue in
// kc_rflows, all or none. A segment not counted whole (a fallback) or
// whose entries do not fit stops the pushing: the replies of the entries
// already queued are still paired, those after go to no key. Pairing
// starts afresh at the first segment counted whole after a quiet of
// KC_QUIET_NS in both directions, as user space does (decode/pending.go).
//
// Reply side: the reply programs frame RESP2/RESP3 replies across the
// connection's segments, reading only headers from the packet (16 bytes
// at a header, 32-byte chunks of a simple line) and skipping values by
// their length; at each complete top-level reply they pop its command's
// entries and add the reply's bytes, in 64-byte units rounded up, to the
// bucket of each of its read keys in kc_bcounts (the layout of kc_counts,
// with its own slots' dirty bits: kc_state.bslots). An upper bound of the
// user-space attribution, which splits a reply evenly between its keys: a
// multi-key reply gives all its bytes to each key, an MGET element its
// bytes and the whole array header to its key. What cannot be paired is
// counted by reason (kc_stats.unattr), never guessed.
//
// Concurrency: one connection's request and reply programs may run at
// once on two CPUs. The queue is single producer (the request side: one
// connection's request segments are not handled on two CPUs at once, the
// assumption kc_conns makes too) and single consumer (the reply side, the
// same for replies). The producer writes the entries, then publishes head
// with a plain store after a compiler barrier; the consumer reads head,
// then the entries. A fresh start bumps gen (atomic) before the new
// entries are written; the consumer checks gen after reading each entry
// and before adding bytes for it, so an entry of a new start never counts
// for a reply of the old one: a race costs the reply's bytes (KU_RACE),
// never a wrong key. The orderings rely on stores not passing stores and
// loads not passing loads, which holds on x86 (the JIT keeps the program's
// order); on arm64 the programs (BPF v1: no load-acquire) would need BPF's
// load-acquire/store-release (kernel 6.15, LLVM 20) for the same
// guarantee. head was published with an atomic add before: on x86 a
// locked add also waits for every earlier store to leave the store buffer,
// the entries' line among them, which the reply side's CPU had read last;
// that wait was a fifth of the request program's time at -P 1.
//
// The fields are grouped by writer, the groups 64 bytes apart: the rare
// group (either side, seldom), the request side's, the reply side's. The
// request side reads the reply side's line only when the queue looks
// full (ptail) or the connection restarts, so a request and its reply on
// two CPUs move the request side's line and the entries between them,
// not the reply side's too.
struct kc_rflow {
	// The map's element holds the key just before the value, and the
	// value's alignment to cache lines depends on the kernel: fields two
	// sides write apart are 64 bytes apart, so that they never share a
	// line, whatever the alignment.
	//
	// Written rarely by either side, read by both; first, so that the
	// line the element shares with the end of its key is one neither side
	// writes per segment (each side's lookup compares the key).
	__u8 lost;       // the reply side lost step: the request side starts afresh after a quiet
	__u8 rpad[63];
	// The request side's (producer): what each request segment touches
	// first.
	__u32 head;      // entries pushed (wraps); published last
	__u32 ptail;     // the consumer's tail when the request side last looked (never ahead of it)
	__u8 psynced;    // pushing: no loss since the last fresh start
	__u8 dead;       // SUBSCRIBE and co: replies no longer answer requests
	__u8 announced;  // a copied segment said KC_REC_FRAMED_FROM since the last (re)start
	__u8 cok;        // replies of entries from cfrom on with KC_RQ_COPY may be copied
	__u32 gen;       // fresh starts; bumped before their entries are written
	__u64 req_ns;    // last request segment with payload
	__u32 start;     // head at the last fresh start
	__u32 cfrom;     // entry of the last KC_REC_FRAMED_FROM segment's first command
	__u32 ann;       // KC_REC_FRAMED_FROM announcements (bumped after cfrom is written)
	__u32 rfails_seen; // the reply side's rfails when the request side last looked
	__u8 pline[64];  // a line between the two sides' fields
	// The reply side's (consumer).
	__u32 tail;      // entries popped; the producer reads it to see the room left
	__u32 cgen;      // the gen the reply state belongs to
	__u32 rseq;      // next reply byte expected
	__u32 elem;      // MGET: the element being framed
	__u64 rep_ns;    // last reply segment with payload
	__u64 skip;      // value bytes still to skip before the next header
	__u64 bytes;     // bytes of the reply being framed so far
	__u64 elem_at;   // MGET: bytes when the current element started
	__u64 hdr;       // MGET: bytes of the array header (and attributes before it)
	__u8 csynced;    // framing and pairing in step
	__u8 cpad0;
	__u8 rseq_ok;
	__u8 depth;      // open aggregates
	__u8 line;       // inside a simple line, up to its LF
	__u8 hlen;       // bytes of a header cut by the segment's end, in hbuf
	__u8 push;       // the reply is a RESP3 push
	__u8 attr;       // a top-level attribute preceded: its bytes go with the next reply
	__u8 attr_top;   // the top-level value is such an attribute
	__u8 pe;         // MGET per element
	// Reply records: the consumer's copy state.
	__u8 ccopy;      // the reply being framed is copied
	__u8 cskip;      // the value bytes still to skip (skip) are copied too
	__u8 rbad;       // a copied reply could not be delivered: none copied until ann != rbad_ann
	__u8 cpad[3];
	__u32 rfails;    // copied replies not delivered (the request side announces afresh)
	__u32 rbad_ann;
	__u32 cnext;     // seq after the last reply byte copied (or left out inside a reply)
	__u8 cnext_ok;
	__u8 cpad2[3];
	__u8 hbuf[16];
	__u32 stack[KC_RDEPTH]; // elements left in each open aggregate
	__u64 q[KC_RQ];
};

// Loaded with one entry unless kc_bytes (bpf/kcount.go).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct skip_key);
	__type(value, struct kc_rflow);
} kc_rflows SEC(".maps");

// kc_rzero is a zero kc_rflow, what a new connection's entry is made from
// (a value this size cannot be built on the stack).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kc_rflow);
} kc_rzero SEC(".maps");

// kc_bcounts: reply bytes per bucket in 64-byte units, laid out as
// kc_counts (16-bit, saturating: 4 MiB a bucket, CPU and sub-window).
// Loaded with one entry unless kc_bytes.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KC_SLOTS * KC_PARTS); // × CPUs
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct kc_part);
} kc_bcounts SEC(".maps");

const struct kc_rflow *unused_kc_rflow __attribute__((unused));

// kc_rflow_new makes a connection's reply state: fresh (its SYN was seen)
// or waiting for a quiet point.
static __always_inline struct kc_rflow *kc_rflow_new(struct skip_key *k, int fresh)
{
	__u32 zero = 0;
	struct kc_rflow *z = bpf_map_lookup_elem(&kc_rzero, &zero);
	if (!z)
		return 0;
	bpf_map_update_elem(&kc_rflows, k, z, fresh ? BPF_ANY : BPF_NOEXIST);
	struct kc_rflow *rf = bpf_map_lookup_elem(&kc_rflows, k);
	if (rf && fresh) {
		rf->psynced = 1;
		__sync_fetch_and_add(&rf->gen, 1);
	}
	return rf;
}

// kc_badd adds n reply bytes, rounded up to 64-byte units, to the byte
// bucket of queue entry e on this CPU's slot of the current sub-window.
// A global function that clears a part itself with a plain loop (no
// bpf_loop callback, no call): the reply chain (main, kc_reply_*, the step
// callback, kc_rstep_*, kc_rdone, kc_rpop, here) stays within the
// verifier's eight frames and 512 bytes of stack.
__attribute__((noinline)) int kc_badd(struct kc_state *s, __u64 e, __u64 n)
{
	if (!s)
		return 0;
	__u32 u = n >= (0xffffULL << 6) ? 0xffff : (n + 63) >> 6;
	__u64 ep = bpf_ktime_get_coarse_ns() / kc_sub_ns;
	__u32 si = ep % KC_SLOTS;
	__u32 cs = kc_cpu() * KC_SLOTS + si;
	struct kc_slot *slot = &s->bslots[si & (KC_SLOTS - 1)];
	if (slot->epoch != ep) {
		slot->dirty = 0;
		slot->epoch = ep;
	}
	__u32 b = (e >> KC_SHIFT) & (KC_BUCKETS - 1);
	__u32 pi = b >> KC_PART_BITS;
	__u32 key = cs * KC_PARTS + pi;
	struct kc_part *part = bpf_map_lookup_elem(&kc_bcounts, &key);
	if (!part)
		return 0;
	if (!(slot->dirty & (1ULL << pi))) {
		// First bytes in this part since the slot was last used.
		for (__u32 j = 0; j < KC_PART / 64; j++) {
			__u64 *w = (__u64 *)&part->c[(j * 64) & (KC_PART - 64)];
#pragma unroll
			for (int k = 0; k < 16; k++)
				*(volatile __u64 *)&w[k] = 0; // volatile: not a memset call
		}
		slot->dirty |= 1ULL << pi;
	}
	__u16 *cp = &part->c[b & (KC_PART - 1)];
	__u32 v = (__u32)*cp + u;
	if (v > 0xffff)
		v = 0xffff;
	*cp = v;
	s->stats.runits += u;
	return 0;
}

// kc_rq_segment updates the connection's queue after a Redis request
// segment: ok, it was counted whole at a command boundary and its entries
// (kc_state.rq) are pushed; else its commands are not known and pairing
// stops until a quiet point.
__attribute__((noinline)) int kc_rq_segment(struct kc_state *s, int ok)
{
	if (!s)
		return 0;
	struct kc_stats *cnt = &s->stats;
	struct kc_rflow *rf = bpf_map_lookup_elem(&kc_rflows, &s->in.k);
	if (!rf)
		rf = kc_rflow_new(&s->in.k, 0);
	if (!rf)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 prev = rf->req_ns;
	rf->req_ns = now;
	// Copied to user space: a fallback (not ok), or counted with a
	// reason to copy (kc_request). Unless its entries are pushed below,
	// user space is told to stop pairing (KC_REC_UNFRAMED) and the next
	// copied segment that pushes says where pairing starts again.
	int copied = !ok || s->st.copy;
	if (copied)
		s->in.frec = KC_REC_UNFRAMED; // until pushed below
	if (!ok || s->st.rq_over) {
		if (rf->psynced)
			cnt->rq_lost++;
		rf->psynced = 0;
		goto out;
	}
	if (rf->dead)
		goto out;
	if (s->st.rq_dead) {
		// Replies no longer answer requests one to one (user space:
		// replyParser.dead); the replies before it are lost too.
		rf->dead = 1;
		goto out;
	}
	if (!rf->psynced || rf->lost) {
		__u64 rep = *(volatile __u64 *)&rf->rep_ns;
		if (now - prev < KC_QUIET_NS || now - rep < KC_QUIET_NS) {
			cnt->rq_wait++;
			goto out;
		}
		rf->announced = 0;
		// Quiet both ways: every reply before has been seen, so this
		// segment's commands are the next replies' (what user space
		// assumes too). The reply side takes the new start at its next
		// segment (gen).
		rf->start = rf->head;
		rf->ptail = rf->start;
		rf->lost = 0;
		__sync_fetch_and_add(&rf->gen, 1);
		rf->psynced = 1;
		cnt->rq_resync++;
	}
	__u32 n = s->st.nrq;
	if (!n)
		goto out;
	__u32 head = rf->head;
	// The room left, from the consumer's tail (or the start it has yet
	// to take up): read racily, it can only be behind, so the room only
	// looks smaller. The tail last read is read again only when the
	// room looks short: the consumer's line is then not pulled to this
	// CPU on every segment.
	__u32 tail = rf->ptail;
	if (head - tail + n > KC_RQ) {
		tail = rf->cgen == rf->gen ? *(volatile __u32 *)&rf->tail : rf->start;
		rf->ptail = tail;
	}
	if (head - tail + n > KC_RQ || n > KC_RQ_SEG) {
		cnt->rq_full++;
		rf->psynced = 0;
		goto out;
	}
	__u64 cbit = 0;
	if (copied) {
		// Its commands' replies are copied. Pairing starts here when
		// no copied segment said so since the queue's start, or since
		// a copied request or reply was not delivered (kc_unsent,
		// rfails): the replies of entries before cfrom are then no
		// longer copied, and user space clears its queue (Align).
		// cfrom and ann are written before head is published, so a
		// reply side that sees this segment's entries sees them too.
		cbit = KC_RQ_COPY;
		__u32 rfs = *(volatile __u32 *)&rf->rfails;
		if (!rf->announced || !rf->cok || rfs != rf->rfails_seen) {
			rf->rfails_seen = rfs;
			rf->cfrom = head;
			__sync_fetch_and_add(&rf->ann, 1);
			rf->cok = 1;
			rf->announced = 1;
			s->in.frec = KC_REC_FRAMED | KC_REC_FRAMED_FROM;
		} else {
			s->in.frec = KC_REC_FRAMED;
		}
	}
	for (__u32 i = 0; i < KC_RQ_SEG; i++) {
		if (i >= n)
			break;
		__u64 e = s->rq[i];
		if (e & KC_RQ_FIRST)
			e |= cbit;
		rf->q[(head + i) & (KC_RQ - 1)] = e;
		if (e & KC_RQ_FIRST)
			cnt->rq_cmds++;
	}
	// Publish: the entries are visible before head moves (see above).
	asm volatile("" ::: "memory");
	*(volatile __u32 *)&rf->head = head + n;
out:
	if (s->in.frec == KC_REC_UNFRAMED)
		rf->announced = 0; // the next copied segment that pushes says where pairing starts
	return 0;
}

// kc_unsent: the request record kc_handle let through (s->in) was not
// delivered (shed by sampling, ring full, load error). Its commands'
// entries may carry KC_RQ_COPY: no reply of the connection is copied from
// now on (cok), and the next copied segment that pushes says where pairing
// starts again (KC_REC_FRAMED_FROM; one that cannot, KC_REC_UNFRAMED). The
// replies of requests user space has, still to come, are then not copied
// either: their bytes go unattributed in user space (counted in the kernel
// by key all the same), never to another request's key. The request stream
// resumes at the next copied segment (KC_REC_GAP), as after one counted.
__attribute__((noinline)) int kc_unsent(__u32 cpu)
{
	struct kc_state *s = bpf_map_lookup_elem(&kc_scratch, &cpu);
	if (!s)
		return 0;
	struct kc_rflow *rf = bpf_map_lookup_elem(&kc_rflows, &s->in.k);
	if (rf) {
		rf->cok = 0;
		rf->announced = 0;
		s->stats.rc_unsent++;
	}
	struct kc_flow *fl = kc_flow_at(&s->in, kc_conn_find(&s->in));
	if (fl)
		fl->gap = 1;
	return 0;
}

static __always_inline int kc_rload(void *ctx, const int xdp, __u32 off, __u8 *dst, __u32 n)
{
	if (xdp)
		return bpf_xdp_load_bytes(ctx, off, dst, n);
	return bpf_skb_load_bytes(ctx, off, dst, n);
}

// kc_lf is the index of the first '\n' in s->rs.buf[from, n) (n <= 32), or
// n. A global function: its result is one unknown value to the caller,
// not a path per position.
__attribute__((noinline)) __u32 kc_lf(struct kc_state *s, __u32 from, __u32 n)
{
	if (!s)
		return n;
	for (__u32 j = 0; j < 32; j++) {
		if (j >= n)
			break;
		if (j >= from && s->rs.buf[j] == '\n')
			return j;
	}
	return n;
}

// kc_rlen parses the length line of the header in s->rs.buf[0, w) (w <= 16)
// as decode/redis parseLen does, after its type byte: -1 when malformed
// (or more than 9 digits: beyond any length the programs take), 0 when
// not all there, else the header's length | (value + 1) << 8.
__attribute__((noinline)) __s64 kc_rlen(struct kc_state *s, __u32 w)
{
	if (!s)
		return -1;
	__u8 *b = s->rs.buf;
	__u32 i = 1;
	int neg = 0;
	if (w > 1 && b[1] == '-') {
		neg = 1;
		i = 2;
	}
	__u32 start = i;
	__s64 v = 0;
	for (int k = 0; k < 10; k++) {
		if (i >= w)
			break;
		__u8 c = b[i & 15];
		if (c < '0' || c > '9')
			break;
		if (i - start >= 9)
			return -1;
		v = v * 10 + (c - '0');
		i++;
	}
	if (i + 1 >= w) {
		if (i < w && b[i & 15] != '\r')
			return -1;
		return 0;
	}
	if (i == start || (b[start & 15] == '0' && (i - start > 1 || neg)) || b[i & 15] != '\r' ||
	    b[(i + 1) & 15] != '\n')
		return -1;
	if (neg)
		v = -v;
	if (v < -1)
		return -1;
	return (__s64)(i + 2) | (v + 1) << 8;
}

// kc_rentry reads queue entry i of the connection for the reply side: 0
// when the request side started afresh since the reply state's start (the
// entry may be the new start's).
static __always_inline __u64 kc_rentry(struct kc_rflow *rf, __u32 i)
{
	__u64 e = *(volatile __u64 *)&rf->q[i & (KC_RQ - 1)];
	if (*(volatile __u32 *)&rf->gen != rf->cgen)
		return 0;
	return e;
}

// kc_rnext is the entry at t, the queue's tail, or 0 when the queue is
// empty (or a fresh start raced it: kc_rentry).
static __always_inline __u64 kc_rnext(struct kc_rflow *rf, __u32 t)
{
	if (t == *(volatile __u32 *)&rf->head)
		return 0;
	return kc_rentry(rf, t);
}

// kc_rpeek: whether the reply to the command at the queue's head is per
// element (MGET) with n elements (n 0: with any count).
__attribute__((noinline)) int kc_rpeek(struct kc_rflow *rf, __u32 n)
{
	if (!rf)
		return 0;
	__u64 e = kc_rnext(rf, rf->tail);
	return (e & KC_RQ_FIRST) && (e & KC_RQ_PE) && (!n || ((e >> KC_RQ_NK_SHIFT) & KC_RQ_NK_MAX) == n);
}

// kc_relem gives an MGET element its bytes and the array header's (an
// upper bound of user space's even share of the header).
__attribute__((noinline)) int kc_relem(struct kc_state *s, struct kc_rflow *rf)
{
	if (!s || !rf)
		return 0;
	__u64 e = kc_rentry(rf, rf->tail + rf->elem);
	if (!e) {
		s->stats.unattr[KU_RACE] += rf->bytes - rf->elem_at;
		return KU_RACE + 1;
	}
	kc_badd(s, e, rf->bytes - rf->elem_at + rf->hdr);
	rf->elem++;
	return 0;
}

// kc_rpop ends a top-level reply of rf->bytes: pops its command's entries
// and adds the bytes to each read key (MGET: given per element already).
// 0, or KU_* + 1 when the reply cannot be paired (its bytes then counted
// for that reason).
static __always_inline int kc_rpop1(struct kc_state *s, struct kc_rflow *rf);

__attribute__((noinline)) int kc_rpop(struct kc_state *s, struct kc_rflow *rf)
{
	if (!s || !rf)
		return 0;
	int r = kc_rpop1(s, rf);
	if (r)
		s->stats.unattr[(r - 1) & 15] += rf->bytes;
	return r;
}

static __always_inline int kc_rpop1(struct kc_state *s, struct kc_rflow *rf)
{
	if (!s || !rf)
		return 0;
	struct kc_stats *cnt = &s->stats;
	__u64 n = rf->bytes;
	__u32 t = rf->tail;
	__u32 hd = *(volatile __u32 *)&rf->head;
	if (t == hd)
		return KU_UNPAIRED + 1; // a reply nobody asked for (as far as the queue knows)
	__u64 e0 = kc_rentry(rf, t);
	if (!(e0 & KC_RQ_FIRST))
		return KU_RACE + 1;
	__u32 nk = (e0 >> KC_RQ_NK_SHIFT) & KC_RQ_NK_MAX;
	if (!nk) {
		rf->tail = t + 1;
		cnt->unattr[KU_NOKEY] += n;
		return 0;
	}
	if (hd - t < nk)
		return KU_RACE + 1;
	if (!rf->pe) {
		for (__u32 i = 0; i < KC_RQ_NK_MAX; i++) {
			if (i >= nk)
				break;
			__u64 e = i ? kc_rentry(rf, t + i) : e0;
			if (!e)
				return KU_RACE + 1;
			kc_badd(s, e, n);
		}
	}
	rf->pe = 0;
	rf->tail = t + nk;
	cnt->rreplies++;
	cnt->rattr += n;
	return 0;
}

// Reply records. The framer copies the replies answering the
// request segments copied to user space (queue entries with KC_RQ_COPY),
// as ranges of the segment (s->rs.rr) that the packet path emits after it
// (kc_emit_replies, hotsniff.c). A range opened at a reply's start carries
// KC_REC_GAP when bytes of the connection before it were not copied: user
// space restarts its reply parser there, keeping its queue. Inside a copied
// reply a long bulk payload is left out: its bytes lie in the skip user
// space's parser asks for, so the next range starts after it without a
// flag. Whatever cannot be delivered whole (kc_rcfail) stops the copying
// until the request side says where pairing starts again.

// kc_rcopyable: the reply about to start answers a command whose reply is
// copied.
static __always_inline int kc_rcopyable(struct kc_rflow *rf)
{
	if (!rf)
		return 0;
	__u32 t = rf->tail;
	__u64 e = kc_rnext(rf, t);
	if (!(e & KC_RQ_FIRST) || !(e & KC_RQ_COPY))
		return 0;
	if (!*(volatile __u8 *)&rf->cok)
		return 0;
	__u32 ann = *(volatile __u32 *)&rf->ann;
	if (rf->rbad) {
		if (ann == rf->rbad_ann)
			return 0;
		rf->rbad = 0;
	}
	return (__s32)(t - *(volatile __u32 *)&rf->cfrom) >= 0;
}

// kc_rblock stops copying connection rf's replies until its requests
// announce a fresh start (rfails moves, ann is noted): the one place a
// failure to deliver them is recorded.
static __always_inline void kc_rblock(struct kc_rflow *rf)
{
	rf->rbad = 1;
	rf->rbad_ann = *(volatile __u32 *)&rf->ann;
	rf->rfails++;
	rf->ccopy = 0;
	rf->cskip = 0;
	rf->cnext_ok = 0;
}

// kc_rcfail: a copied reply of the connection will not reach user space
// whole. No reply is copied until the request side announces a new start
// (ann moves: it sees rfails move), and the first copied after it resumes
// the reply stream (KC_REC_GAP: cnext unknown). What user space has of the
// reply is dropped by that resume; the replies of its queued requests are
// not copied, and it clears them at the announcement (Align). Costs those
// replies' bytes in user space, never another key's.
__attribute__((noinline)) int kc_rcfail(struct kc_state *s, struct kc_rflow *rf)
{
	if (!s || !rf)
		return 0;
	if (rf->ccopy || rf->cskip || s->rs.ra != KC_RNONE || s->rs.nrr)
		s->stats.rc_fail++;
	kc_rblock(rf);
	s->rs.ra = KC_RNONE;
	return 0;
}

// kc_ropen opens a range at segment offset at (none open); start: at a
// reply's start, where a hole before it is a resume (KC_REC_GAP).
static __always_inline void kc_ropen(struct kc_state *s, struct kc_rflow *rf, __u32 at, int start)
{
	struct kc_rseg *g = &s->rs;
	if (g->ra != KC_RNONE)
		return;
	g->ra = at;
	g->rflag = start && (!rf->cnext_ok || rf->cnext != g->seq + at) ? KC_REC_GAP : 0;
}

// kc_rcopy copies the segment's bytes [from, at) of a copied reply that
// goes on (a range of its own, no flag: the last ended where it starts).
__attribute__((noinline)) int kc_rcopy(struct kc_state *s, struct kc_rflow *rf, __u32 from, __u32 at);

// kc_rclose ends the open range at segment offset at. 0, or 1 when the
// list is full (the copying fails).
__attribute__((noinline)) int kc_rclose(struct kc_state *s, struct kc_rflow *rf, __u32 at)
{
	if (!s || !rf)
		return 0;
	struct kc_rseg *g = &s->rs;
	__u32 a = g->ra;
	if (a == KC_RNONE)
		return 0;
	g->ra = KC_RNONE;
	if (at <= a)
		return 0;
	__u32 n = g->nrr;
	if (n >= KC_RR) {
		kc_rcfail(s, rf);
		return 1;
	}
	struct kc_rrange *r = &g->rr[n & (KC_RR - 1)];
	r->off = a;
	r->len = at - a;
	r->flags = g->rflag;
	g->nrr = n + 1;
	rf->cnext = g->seq + at;
	rf->cnext_ok = 1;
	return 0;
}

__attribute__((noinline)) int kc_rcopy(struct kc_state *s, struct kc_rflow *rf, __u32 from, __u32 at)
{
	if (!s || !rf)
		return 0;
	kc_ropen(s, rf, from, 0);
	if (at != KC_RNONE)
		kc_rclose(s, rf, at);
	return 0;
}

// kc_rstart decides whether the reply starting at segment offset p with
// type byte t is copied (a push never: it answers no request; attributes
// before a reply go with it). A global function, as those below: the
// reply chain's frames stay small.
__attribute__((noinline)) int kc_rstart(struct kc_state *s, struct kc_rflow *rf, __u32 t, __u32 p)
{
	if (!s || !rf)
		return 0;
	rf->ccopy = t != '>' && kc_rcopyable(rf);
	if (rf->ccopy)
		kc_ropen(s, rf, p, 1);
	return 0;
}

// kc_rbulk: a bulk value of v bytes (header ends at p) in a copied reply.
// 1 when its payload is left out (longer than KC_RELIDE): the range ends
// at its header and the next starts after it, where user space's parser
// goes on after skipping it by length.
__attribute__((noinline)) int kc_rbulk(struct kc_state *s, struct kc_rflow *rf, __u32 p, __u64 v)
{
	if (!s || !rf || !rf->ccopy || v <= KC_RELIDE)
		return 0;
	if (kc_rclose(s, rf, p))
		return 0;
	rf->cnext = s->rs.seq + p + (__u32)v + 2;
	s->stats.rc_elided += v + 2;
	return 1;
}

// kc_rdone records that a value completed at the current depth: the
// aggregates it completes are closed, and a completed top-level reply is
// paired. 0, or KU_* + 1.
__attribute__((noinline)) int kc_rdone(struct kc_state *s, struct kc_rflow *rf)
{
	if (!s || !rf)
		return 0;
	for (int i = 0; i < KC_RDEPTH; i++) {
		__u32 d = rf->depth;
		if (!d)
			break;
		if (d == 1 && rf->pe) {
			int r = kc_relem(s, rf);
			if (r)
				return r;
		}
		__u32 *c = &rf->stack[(d - 1) & (KC_RDEPTH - 1)];
		if (--*c > 0)
			return 0;
		rf->depth = d - 1;
	}
	if (rf->depth)
		return 0;
	if (rf->attr_top) {
		rf->attr_top = 0;
		rf->attr = 1;
		return 0;
	}
	if (rf->ccopy) {
		// A copied reply ends (its value's bytes still to come, if any,
		// are copied as they come: cskip). Its range is closed by the
		// next step or at the segment's end (kc_rpend): a call here
		// would cost this frame a slot on the deepest chain.
		rf->ccopy = 0;
		s->rs.cl = 1;
		s->rs.cl_at = s->rs.pos;
	}
	if (rf->push) {
		s->stats.unattr[KU_PUSH] += rf->bytes;
		return 0;
	}
	return kc_rpop(s, rf);
}

// kc_rstop stops framing the segment for reason: the reply framed so far
// goes to no key too (kc_rpartial).
static __always_inline int kc_rstop(struct kc_state *s, int reason)
{
	s->rs.stop = reason + 1;
	s->rs.partial = 1;
	return 1;
}

// kc_rpartial is the bytes of the reply being framed, seen and not yet
// counted anywhere: framed so far (with attributes before it) and a
// header carried over from the last segment.
static __always_inline __u64 kc_rpartial(struct kc_rflow *rf)
{
	__u64 n = rf->hlen;
	if (rf->depth || rf->line || rf->attr)
		n += rf->bytes;
	return n;
}

static __always_inline int kc_rfin(struct kc_state *s, int r)
{
	if (r) {
		s->rs.stop = r;
		return 1;
	}
	return 0;
}

// kc_rpend closes the range of a copied reply kc_rdone ended.
static __always_inline void kc_rpend(struct kc_state *s, struct kc_rflow *rf)
{
	if (s->rs.cl) {
		s->rs.cl = 0;
		kc_rclose(s, rf, s->rs.cl_at);
	}
}

// kc_rstep frames one header, or one chunk of a simple line, of the reply
// segment in s->rs. 0 to go on, 1 to stop.
static __always_inline int kc_rstep(void *ctx, const int xdp, struct kc_state *s, struct kc_rflow *rf)
{
	if (!s || !rf)
		return 1;
	struct kc_rseg *g = &s->rs;
	kc_rpend(s, rf);
	__u32 p = g->pos, len = g->len;
	if (p >= len)
		return 1;
	__u32 rem = len - p;
	if (rf->line) {
		__u32 n = rem < 32 ? rem : 32;
		n = ((n - 1) & 31) + 1;
		if (kc_rload(ctx, xdp, g->pay_off + p, g->buf, n))
			return kc_rstop(s, KU_LOAD);
		__u32 at = kc_lf(s, 0, n);
		if (at >= n) {
			rf->bytes += n;
			g->pos = p + n;
			return 0;
		}
		rf->bytes += at + 1;
		g->pos = p + at + 1;
		rf->line = 0;
		return kc_rfin(s, kc_rdone(s, rf));
	}
	__u32 h = rf->hlen & 15;
	g->fresh = 0;
	if (!h) {
		if (!rf->depth) {
			// A reply starts (with the bytes of attributes before it).
			g->fresh = !rf->attr;
			rf->push = 0;
			rf->attr_top = 0;
			rf->pe = 0;
			rf->elem = 0;
			if (!rf->attr)
				rf->bytes = 0;
			rf->attr = 0;
		} else if (rf->depth == 1 && rf->pe) {
			rf->elem_at = rf->bytes;
		}
	}
	__builtin_memcpy(g->buf, rf->hbuf, 16);
	__u32 n = 16 - h;
	if (n > rem)
		n = rem;
	n = ((n - 1) & 15) + 1;
	if (kc_rload(ctx, xdp, g->pay_off + p, g->buf + h, n))
		return kc_rstop(s, KU_LOAD);
	__u32 w = h + n;
	__u8 t = g->buf[0];
	if (g->fresh)
		kc_rstart(s, rf, t, p);
	switch (t) {
	case '+': case '-': case ':': case '_': case ',': case '#': case '(': {
		__u32 at = kc_lf(s, 1, w);
		rf->hlen = 0;
		if (at >= w) {
			// The line goes on: on to its LF, a chunk a step.
			rf->bytes += w;
			rf->line = 1;
			g->pos = p + n;
			return 0;
		}
		rf->bytes += at + 1;
		g->pos = p + (at + 1 - h);
		return kc_rfin(s, kc_rdone(s, rf));
	}
	case '$': case '!': case '=': case '*': case '~': case '>': case '%': case '|':
		break;
	default:
		return kc_rstop(s, KU_BAD);
	}
	__s64 r = kc_rlen(s, w);
	if (r < 0)
		return kc_rstop(s, KU_BAD);
	if (r == 0) {
		// Not all here: at the segment's end, kept for the next one.
		if (p + n < len || w >= 16)
			return kc_rstop(s, KU_BAD);
		__builtin_memcpy(rf->hbuf, g->buf, 16);
		rf->hlen = w;
		g->pos = len;
		return 1;
	}
	__u32 hl = r & 0xff;
	__s64 v = (r >> 8) - 1;
	if (hl <= h)
		return kc_rstop(s, KU_BAD);
	rf->hlen = 0;
	rf->bytes += hl;
	p += hl - h;
	g->pos = p;
	if (t == '$' || t == '!' || t == '=') {
		if (v >= 0) {
			__u64 total = (__u64)v + 2;
			rf->bytes += total;
			g->elide = kc_rbulk(s, rf, p, v);
			if (p + total > len) {
				rf->skip = p + total - len;
				g->pos = len;
				rf->cskip = rf->ccopy && !g->elide;
			} else {
				g->pos = p + total;
				if (g->elide)
					kc_ropen(s, rf, p + total, 0);
			}
		}
		return kc_rfin(s, kc_rdone(s, rf));
	}
	if (t == '%' || t == '|')
		v *= 2;
	if (v <= 0) {
		// An empty or null array answering an MGET gives its keys
		// nothing, as in user space (no element per key).
		if (!rf->depth && t == '*')
			rf->pe = kc_rpeek(rf, 0);
		return kc_rfin(s, kc_rdone(s, rf));
	}
	if (!rf->depth) {
		rf->push = t == '>';
		rf->attr_top = t == '|';
		rf->pe = t == '*' && kc_rpeek(rf, v);
		rf->hdr = rf->bytes;
	}
	__u32 d = rf->depth;
	if (d >= KC_RDEPTH)
		return kc_rstop(s, KU_DEPTH);
	rf->stack[d & (KC_RDEPTH - 1)] = v;
	rf->depth = d + 1;
	return 0;
}

struct kc_rloop {
	void *ctx;
	struct kc_state *s;
	struct kc_rflow *rf;
};

__attribute__((noinline)) int kc_rstep_skb(struct __sk_buff *skb, struct kc_state *s, struct kc_rflow *rf)
{
	return kc_rstep(skb, 0, s, rf);
}

__attribute__((noinline)) int kc_rstep_xdp(struct xdp_md *ctx, struct kc_state *s, struct kc_rflow *rf)
{
	return kc_rstep(ctx, 1, s, rf);
}

static long kc_rcb_skb(__u64 i, struct kc_rloop *l)
{
	return kc_rstep_skb(l->ctx, l->s, l->rf) ? 1 : 0;
}

static long kc_rcb_xdp(__u64 i, struct kc_rloop *l)
{
	return kc_rstep_xdp(l->ctx, l->s, l->rf) ? 1 : 0;
}

// kc_rreset starts the reply side afresh at the request side's new start.
static __always_inline void kc_rreset(struct kc_rflow *rf, __u32 g)
{
	rf->cgen = g;
	rf->tail = *(volatile __u32 *)&rf->start;
	rf->csynced = 1;
	rf->rseq_ok = 0;
	rf->skip = 0;
	rf->bytes = 0;
	rf->depth = 0;
	rf->line = 0;
	rf->hlen = 0;
	rf->push = 0;
	rf->attr = 0;
	rf->attr_top = 0;
	rf->pe = 0;
}

// kc_rnoflow counts the bytes of a reply segment of a connection with no
// reply state.
__attribute__((noinline)) int kc_rnoflow(struct kc_state *s)
{
	if (s)
		s->stats.unattr[KU_NOFLOW] += s->rs.len;
	return 0;
}

// kc_reply frames a reply segment (s->rs) of a Redis connection.
// kc_rpre does what comes before the framing loop: 1 to run it from
// s->rs.pos; rf is the connection's reply state. kc_rpre and kc_rpost are
// global functions, off the deepest call chain (kc_reply_*, the loop's
// callback, kc_rstep_*, kc_rdone, kc_rpop, kc_badd), whose frames stay as
// small as they were.
__attribute__((noinline)) int kc_rpre(struct kc_state *s, struct kc_rflow *rf)
{
	if (!s)
		return 0;
	struct kc_stats *cnt = &s->stats;
	struct kc_rseg *g = &s->rs;
	__u32 len = g->len;
	if (!rf)
		return 0;
	g->ra = KC_RNONE;
	g->cl = 0;
	__u32 gen = *(volatile __u32 *)&rf->gen;
	if (gen != rf->cgen) {
		if (rf->ccopy || rf->cskip)
			kc_rcfail(s, rf);
		kc_rreset(rf, gen);
	}
	if (g->flags & F_SYN) {
		rf->rseq = g->seq + 1;
		rf->rseq_ok = 1;
	}
	if (!len)
		return 0;
	rf->rep_ns = bpf_ktime_get_ns();
	// Sequence first, paired or not: a segment seen again is counted
	// once, and a value's bytes still to come were counted with their
	// reply, whatever happens after it.
	int paired = rf->csynced && !rf->dead;
	if (rf->rseq_ok && g->seq != rf->rseq) {
		if ((__s32)(g->seq + len - rf->rseq) <= 0) {
			cnt->rdup += len; // seen before: counted then
			return 0;
		}
		// Bytes missing before this segment: what was framed of
		// the reply at hand, and this segment, go to no key.
		if (rf->ccopy || rf->cskip)
			kc_rcfail(s, rf);
		if (paired) {
			cnt->unattr[KU_GAP] += len + kc_rpartial(rf);
			rf->csynced = 0;
			rf->lost = 1;
		} else {
			cnt->unattr[rf->dead ? KU_DEAD : KU_UNSYNCED] += len;
		}
		rf->skip = 0;
		rf->rseq = g->seq + len;
		return 0;
	}
	rf->rseq = g->seq + len;
	rf->rseq_ok = 1;
	// Inside a copied reply (its bytes copied, or a payload left out):
	// no zero-length resume record for this segment (hotsniff.c).
	g->quiet = rf->ccopy || (rf->skip && rf->cnext_ok && (__s32)(rf->cnext - g->seq) > 0);
	if (rf->skip >= len) {
		rf->skip -= len;
		if (rf->cskip) {
			// The rest of a copied reply's value.
			kc_rcopy(s, rf, 0, len);
			rf->cskip = rf->skip > 0;
		}
		return 0;
	}
	__u32 from = rf->skip;
	rf->skip = 0;
	if (rf->cskip) {
		rf->cskip = 0;
		kc_rcopy(s, rf, 0, from);
	}
	if (!paired) {
		cnt->unattr[rf->dead ? KU_DEAD : KU_UNSYNCED] += len - from;
		return 0;
	}
	if (g->short_) {
		cnt->unattr[KU_LOAD] += len - from + kc_rpartial(rf);
		rf->csynced = 0;
		rf->lost = 1;
		if (rf->ccopy)
			kc_rcfail(s, rf);
		return 0;
	}
	if (rf->ccopy && (rf->depth || rf->line || rf->hlen || rf->attr))
		kc_rcopy(s, rf, from, KC_RNONE); // the copied reply goes on
	g->pos = from;
	g->stop = 0;
	g->partial = 0;
	return 1;
}

// kc_rpost does what comes after the framing loop.
__attribute__((noinline)) int kc_rpost(struct kc_state *s, struct kc_rflow *rf)
{
	if (!s || !rf)
		return 0;
	struct kc_stats *cnt = &s->stats;
	struct kc_rseg *g = &s->rs;
	__u32 len = g->len;
	kc_rpend(s, rf);
	__u32 stop = g->stop;
	__u64 partial = g->partial;
	if (!stop && g->pos < len) {
		stop = KU_STEPS + 1;
		partial = 1;
	}
	if (stop) {
		// Pairing stops until the request side starts afresh. The
		// segment's bytes from here go to no key, and so does the
		// reply framed so far (a reply that could not be paired was
		// counted whole by kc_rpop).
		__u32 pos = g->pos < len ? g->pos : len;
		cnt->unattr[(stop - 1) & 15] += len - pos + (partial ? kc_rpartial(rf) : 0);
		rf->csynced = 0;
		rf->lost = 1;
		if (rf->ccopy || g->ra != KC_RNONE)
			kc_rcfail(s, rf);
		return 0;
	}
	if (rf->ccopy)
		kc_rclose(s, rf, len); // goes on in the next segment
	return 0;
}

// kc_reply frames the reply segment in s->rs. Its frame is on the deepest
// call chain: the loop's context and nothing else (s looked up once, by
// kc_reply_in, and the connection's reply state once, here: a lookup is a
// hash of the 36-byte key and a compare of it).
static __always_inline int kc_reply(void *ctx, const int xdp, struct kc_state *s)
{
	struct kc_rflow *rf = bpf_map_lookup_elem(&kc_rflows, &s->rs.k);
	if (!rf) {
		kc_rnoflow(s);
		return 0;
	}
	if (!kc_rpre(s, rf))
		return 0;
	struct kc_rloop l = {.ctx = ctx, .s = s, .rf = rf};
	if (xdp)
		bpf_loop(KC_RSTEPS, kc_rcb_xdp, &l, 0);
	else
		bpf_loop(KC_RSTEPS, kc_rcb_skb, &l, 0);
	return kc_rpost(l.s, l.rf);
}

// kc_reply_in fills s->rs for reply segment h and frames it (kc_reply).
static __always_inline int kc_reply_in(void *ctx, const int xdp, struct rec_hdr *h, __u32 pay_off, __u32 avail,
				       __u32 wire)
{
	__u32 cpu = kc_cpu();
	struct kc_state *s = bpf_map_lookup_elem(&kc_scratch, &cpu);
	if (!s)
		return 0;
	struct kc_rseg *g = &s->rs;
	// The ranges the framer chose for the last reply segment on this CPU
	// are that segment's: hotsniff.c emits g's ranges after this call
	// whatever it did, and a segment the framer does not take (no
	// payload, no reply state) must emit none, nor fail them.
	g->nrr = 0;
	g->quiet = 0;
	if (!h || (!wire && !(h->flags & F_SYN)))
		return 0;
	__builtin_memcpy(g->k.saddr, h->daddr, 16);
	__builtin_memcpy(g->k.daddr, h->saddr, 16);
	g->k.sport = h->dport;
	g->k.dport = h->sport;
	// The reply records' time, taken before the framer reads the
	// request side's cfrom: a reply copied under the cfrom before an
	// announcement is stamped before the announcing request record
	// (stamped after its kc_handle wrote cfrom), so user space, merging
	// the CPUs' rings by time, sees it before the Align, never after.
	g->ts = bpf_ktime_get_ns();
	g->seq = h->seq;
	g->len = wire;
	if (wire) {
		s->stats.rsegments++;
		s->stats.rbytes += wire;
	}
	g->pay_off = pay_off;
	g->flags = h->flags;
	// Not all in the packet (a capture shorter than the segment): its
	// headers cannot all be read.
	g->short_ = avail < wire;
	return kc_reply(ctx, xdp, s);
}

// kc_reply_skb and kc_reply_xdp hand a reply segment to kc_reply
// (kc_bytes). Global functions taking what the packet path has at hand
// (its payload length is found again here): the packet path's frame, on
// the deepest call chain, keeps nothing more for them.
__attribute__((noinline)) int kc_reply_skb(struct __sk_buff *skb, struct rec_hdr *h, struct parsed *p)
{
	if (!h || !p)
		return 0;
	__u32 len = skb->len;
	__u32 avail = len > p->pay_off ? len - p->pay_off : 0;
	__u32 wire = p->pay_len == 0xffffffff ? avail : p->pay_len;
	return kc_reply_in(skb, 0, h, p->pay_off, avail, wire);
}

__attribute__((noinline)) int kc_reply_xdp(struct xdp_md *ctx, struct rec_hdr *h, struct parsed *p)
{
	if (!h || !p)
		return 0;
	__u32 len = bpf_xdp_get_buff_len(ctx);
	__u32 avail = len > p->pay_off ? len - p->pay_off : 0;
	__u32 wire = p->pay_len == 0xffffffff ? avail : p->pay_len;
	return kc_reply_in(ctx, 1, h, p->pay_off, avail, wire);
}

// kc_keep records, after a segment that parsed whole, that the next one
// starts on a command boundary, and the connection's DB.
static __always_inline void kc_keep(struct kc_flow *fl, struct kc_st *st, struct kc_in *in, __u8 proto)
{
	fl->next_seq = in->seq + in->len;
	fl->synced = 1;
	fl->copied = 0;
	if (proto == 1) {
		fl->db = st->db;
		fl->db_before = st->db_before;
		fl->in_multi = st->in_multi;
	}
}

// kc_copied records, after a segment copied uncounted, that where the next
// command starts is not known, and where this segment ended (its second
// view is then not copied again: kc_request).
static __always_inline void kc_copied(struct kc_flow *fl, struct kc_in *in)
{
	fl->synced = 0;
	fl->copied = in->len <= KC_SCRATCH; // else the length is not the segment's
	fl->next_seq = in->seq + in->len;
}

// kc_request is the kernel-counting decision for a request segment with
// payload: 1 when it was counted and need not be copied, 0 to copy it
// (in->rec says how user space should treat it). A global function, so the
// verifier checks it once per program, apart from the copy code.
static __always_inline int kc_request(void *ctx, const int xdp)
{
	__u32 cpu = kc_cpu();
	struct kc_state *s = bpf_map_lookup_elem(&kc_scratch, &cpu);
	if (!s)
		return 0;
	struct kc_stats *cnt = &s->stats;
	struct kc_in *in = &s->in;
	cnt->segments++;
	in->rec = 0;
	// The port's protocol, kept in the connection's state from its start:
	// kc_proto's line for the port was a cache miss per request.
	struct kc_flow *fl = kc_flow_at(in, kc_conn_find(in));
	__u8 proto = fl ? fl->proto : kc_port_proto(in->k.dport);
	if (proto != 1 && proto != 2) {
		cnt->fallback[KR_PROTO]++;
		// Copied whole, as without kernel counting; a connection whose
		// SYN was not seen still needs its anchor.
		in->unseen = !fl || !fl->syn;
		return 0;
	}
	int at_boundary = fl && fl->synced && fl->next_seq == in->seq;
	int joined = !fl;
	if (!fl) {
		// Joined mid-stream (or the SYN was missed): DB 0 as the decoder
		// assumes; counted from the first segment that parses whole.
		fl = kc_flow_at(in, kc_conn_new(in));
		if (!fl)
			return 0;
		fl->proto = proto;
	}
	in->unseen = !fl->syn;
	if ((fl->synced || fl->copied) && in->seq + in->len == fl->next_seq && in->len - 1 < KC_SCRATCH) {
		// Exactly the segment counted or copied last on this connection,
		// seen again: the cgroup programs see a local client's request at
		// its egress and at the server's ingress, and a retransmission
		// repeats it. Counted once; user space has what it needs of it
		// (the first view's copy, if it was copied).
		cnt->duplicate++;
		return 1;
	}
	// A fresh load: the bounds checked below are what the verifier
	// checks the payload load by, whatever the compiler kept from above.
	__u32 len = *(volatile __u32 *)&in->len;
	int reason = -1;
	if (len > KC_SCRATCH) {
		reason = KR_LARGE;
	} else if (len == 0) {
		return 0;
	} else {
		long err;
		if (xdp)
			err = bpf_xdp_load_bytes(ctx, in->pay_off, s->buf, len);
		else
			err = bpf_skb_load_bytes(ctx, in->pay_off, s->buf, len);
		if (err)
			reason = KR_LOAD;
	}
	struct kc_st *st = &s->st;
	__builtin_memset(st, 0, sizeof(*st));
	if (reason < 0) {
		st->end = len;
		st->proto = proto;
		st->port = in->k.dport;
		st->db = proto == 1 ? fl->db : -1;
		st->db_before = fl->db_before;
		st->in_multi = fl->in_multi;
		if (in->family == 4) {
			// netip's As16 of an IPv4 address: ::ffff:a.b.c.d
			st->addr_lo = 0;
			st->addr_hi = 0xffff0000ULL | (__u64)ld32(in->k.daddr) << 32;
		} else {
			st->addr_lo = ld64(in->k.daddr);
			st->addr_hi = ld64(in->k.daddr + 8);
		}
		kc_reseed(st);
		reason = kc_parse(st);
	}
	if (kc_bytes && proto == 1)
		kc_rq_segment(s, at_boundary && reason < 0);
	if (!at_boundary) {
		// Not known to start on a command boundary: copied for user space
		// to decode and count, as a connection joined mid-stream or the
		// rest of a command copied before. If it parsed whole, the
		// programs count from the next segment on.
		cnt->fallback[joined ? KR_MIDSTREAM : KR_SPLIT]++;
		if (reason >= 0) {
			kc_copied(fl, in);
		} else {
			kc_keep(fl, st, in, proto);
		}
		fl->gap = 0;
		return 0;
	}
	if (reason >= 0) {
		cnt->fallback[reason & 15]++;
		// Copied and left to user space; where the next command starts is
		// no longer known. It starts on a boundary itself: after skipped
		// segments, user space restarts the stream here.
		in->rec = fl->gap ? KC_REC_GAP : 0;
		kc_copied(fl, in);
		fl->gap = 0;
		return 0;
	}
	kc_keep(fl, st, in, proto);
	cnt->counted++;
	cnt->requests += st->reqs;
	cnt->keys += st->nk;
	if (st->nkeys)
		cnt->reads += kc_commit(kc_buf(st));
	if (!st->copy) {
		cnt->skipped++;
		fl->gap = 1;
		return 1;
	}
	if (st->copy & KC_COPY_LOCATED)
		cnt->copy_located++;
	if (st->copy & KC_COPY_HOT)
		cnt->copy_hot++;
	if (st->copy & KC_COPY_SESSION)
		cnt->copy_session++;
	if (st->copy & KC_COPY_REPORT)
		cnt->copy_report++;
	in->rec = KC_REC_COUNTED | (fl->gap ? KC_REC_GAP : 0);
	fl->gap = 0;
	return 0;
}

// kc_syn starts a connection's state at its SYN: the first request starts
// on a boundary. A global function, so the packet path's frame keeps
// nothing for it.
__attribute__((noinline)) int kc_syn(struct kc_in *in, __u32 seq)
{
	if (!in)
		return 0;
	int w = kc_conn_find(in);
	struct kc_flow *fl = kc_flow_at(in, w);
	if (!fl)
		fl = kc_flow_at(in, kc_conn_new(in));
	if (!fl)
		return 0;
	__u8 proto = kc_port_proto(in->k.dport);
	__builtin_memset(fl, 0, sizeof(*fl)); // DB 0, no gap, not in MULTI
	fl->next_seq = seq + 1;
	fl->synced = 1;
	fl->syn = 1;
	fl->proto = proto;
	if (kc_bytes && proto == 1)
		kc_rflow_new(&in->k, 1); // pairs from the first reply
	return 0;
}

// The segment's details are in the scratch map (kc_scratch.in), not
// arguments: the stack of the programs' deepest call chain is near the
// verifier's 512-byte limit.
__attribute__((noinline)) int kc_request_skb(struct __sk_buff *skb)
{
	return kc_request(skb, 0);
}

__attribute__((noinline)) int kc_request_xdp(struct xdp_md *ctx)
{
	return kc_request(ctx, 1);
}

// kc_handle runs kernel counting for a request-direction segment: 1 when it
// was counted and is not to be copied. h->pad2 gets the record's KC_REC_*.
static __always_inline int kc_handle(void *ctx, int xdp, struct rec_hdr *h, __u32 pay_off, __u32 avail,
				     __u32 wire)
{
	int ctl = !(h->flags & F_SYN) && (wire == 0 || (h->flags & F_RST));
	if (ctl && !(h->flags & (F_FIN | F_RST)))
		return 0; // a pure ACK
	__u32 cpu = kc_cpu();
	struct kc_state *s = bpf_map_lookup_elem(&kc_scratch, &cpu);
	if (!s)
		return 0;
	struct kc_in *in = &s->in;
	__builtin_memcpy(in->k.saddr, h->saddr, 16);
	__builtin_memcpy(in->k.daddr, h->daddr, 16);
	in->k.sport = h->sport;
	in->k.dport = h->dport;
	if (h->flags & F_SYN) {
		kc_syn(in, h->seq);
		return 0;
	}
	if (ctl) {
		// A FIN or RST after segments counted and not copied: user space
		// resumes the stream there instead of finding it out of its
		// window.
		struct kc_flow *fl = kc_flow_at(in, kc_conn_find(in));
		if (fl && fl->gap) {
			h->pad2 |= KC_REC_GAP;
			fl->gap = 0;
		}
		return 0;
	}
	in->seq = h->seq;
	in->pay_off = pay_off;
	in->len = avail < wire ? KC_SCRATCH + 1 : wire; // not all in the packet: a fallback
	in->family = h->family;
	in->flags = h->flags;
	in->xdp = xdp;
	in->rec = 0;
	in->unseen = 0;
	in->frec = 0;
	int r = xdp ? kc_request_xdp(ctx) : kc_request_skb(ctx);
	h->pad2 = in->rec | (kc_bytes ? in->frec : 0);
	if (!r && in->unseen)
		kc_anchor_set(&in->k); // copied: its next reply anchors it
	return r;
}
