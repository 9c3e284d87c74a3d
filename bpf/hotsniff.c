//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// hotsniff's in-kernel capture: an XDP program (ingress), TC programs
// (ingress, egress; attachable through TCX or a classic clsact filter) and
// cgroup_skb programs (ingress, egress; attached to the cgroup v2 root) that
// copy the payload of TCP segments to or from the configured cache ports into
// a BPF ring buffer per CPU, with the flow tuple, seq, ack, flags and a
// timestamp. On interfaces, the VXLAN, Geneve and IP-in-IP tunnels the node
// terminates (decap_cfg) are followed to the inner segment.
//
// The programs only ever read: every path returns XDP_PASS, TC_ACT_UNSPEC
// (TCX_NEXT) or 1 (cgroup: allow) and no helper that writes or pulls the
// packet is called, so a bug here can cost CPU but never a packet.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual BSD/GPL";

// CHUNK is the most payload one ring record carries. Larger segments (TSO/GSO
// and GRO super-packets seen by TC, XDP multi-buffer frames) are split into
// several records with consecutive sequence numbers.
#define CHUNK 4096
// MAX_CHUNKS bounds the copy loop for the verifier: at most 256 KiB of one
// packet is copied; max_copy below lowers it at load time.
#define MAX_CHUNKS 64

// Hooks index the counters map; they are also the record's "hook" field.
enum hook {
	HOOK_XDP = 0,
	HOOK_TC_INGRESS = 1,
	HOOK_TC_EGRESS = 2,
	HOOK_CGROUP_INGRESS = 3,
	HOOK_CGROUP_EGRESS = 4,
	HOOK_MAX = 5,
};

// Set from Go before loading (ebpf.CollectionSpec.Variables).
// max_copy is the most payload bytes copied from one packet; the rest is
// counted as truncated and reported to user space as Missing.
volatile const __u32 max_copy = 65536;
// The reader is woken (BPF_RB_FORCE_WAKEUP) for a record written at least
// wakeup_ns after the previous wakeup, or when the unread data crosses
// wakeup_bytes; every other record is submitted without one. A wakeup per
// record costs an irq_work here (a self-IPI, a VM exit on virtual machines)
// and a context switch in the reader, each worth many records: this way an
// isolated request still wakes the reader at once, and a busy ring wakes it
// at most every wakeup_ns, with a batch to read.
volatile const __u64 wakeup_bytes = 1 << 20;
volatile const __u64 wakeup_ns = 10000000;
// replies: what to copy of server-to-client segments. REPLIES_OFF: a reply
// yields a record only when it carries SYN, FIN or RST (the stream layer
// needs those), and its payload bytes are just counted. REPLIES_ALL: copy
// them like requests. REPLIES_HEADS: copy only what reply parsing needs
// (see reply_heads below).
#define REPLIES_OFF 0
#define REPLIES_ALL 1
#define REPLIES_HEADS 2
volatile const __u8 replies = 0;
// reply_copy is the most bytes a reply segment yields in REPLIES_HEADS mode,
// counted from where its next reply header may start.
volatile const __u32 reply_copy = 4096;
// REPLY_TAIL bytes at the end of a longer reply segment are copied too, as
// a record of their own: what follows a value in the same segment (
// memcached's END after a VALUE block, small replies after a large one).
#define REPLY_TAIL 512
// raw_ip is 1 on devices without a link-layer header (tun, wireguard).
volatile const __u8 raw_ip = 0;

// rec_hdr precedes every ring record's payload. Addresses keep network byte
// order; ports, seq and ack are converted to host order here, once.
struct rec_hdr {
	__u64 ts;        // bpf_ktime_get_ns (CLOCK_MONOTONIC)
	__u8 saddr[16];  // IPv4 uses the first 4 bytes
	__u8 daddr[16];
	__u16 sport;
	__u16 dport;
	__u32 seq;       // TCP seq as if this record were a segment of its own
	__u32 ack;
	__u32 len;       // payload bytes that follow this header
	__u32 missing;   // payload bytes after these that were not copied (copy limit)
	__u32 ifindex;
	__u8 flags;      // TCP flags
	__u8 family;     // 4 or 6
	__u8 hook;       // enum hook
	__u8 sample;     // sampling: level in effect (bits 0-6), REC_RESUMED (bit 7)
	__u32 pad2;      // kernel counting: KC_REC_* (kcount.h), REC_ANCHOR
};

// REC_ANCHOR (rec_hdr.pad2) asks for a reply's header to be copied without
// payload although replies are off: under kernel counting, the requests of
// a connection whose handshake the programs did not see need a segment of
// the server's to be confirmed in user space (kc_anchor in kcount.h).
#define REC_ANCHOR 4

// counters is per CPU and per hook: no atomics on the packet path. The
// stats map is a plain array indexed by CPU × HOOK_MAX + hook, not a per-CPU
// array: the verifier inlines a plain array's lookup to an address computed
// from constants, where a per-CPU array's first loads the map's table of
// per-CPU pointers, a cache line that every packet of a busy node found
// evicted (a tenth of the reply program's time under redis-benchmark -P 1).
// Each entry is two cache lines and the array's values start on a page
// (BPF_F_MMAPABLE), so no two CPUs write one line; user space reads them
// through the mapping, without a system call.
struct counters {
	__u64 packets;       // packets the program ran on
	__u64 matched;       // TCP segments to or from a configured port
	__u64 records;       // ring records submitted
	__u64 bytes;         // payload bytes copied into the ring
	__u64 rb_full;       // records lost because the ring was full
	__u64 rb_full_bytes; // payload bytes lost because the ring was full
	__u64 truncated;     // payload bytes beyond max_copy (sent as Missing)
	__u64 load_err;      // payload bytes lost because a load helper failed
	__u64 nonlinear;     // packets whose headers were not all in the linear data (not parsed)
	__u64 reply_bytes;   // reply payload bytes not copied because replies are off
	__u64 pad[6];        // to 128 bytes: see above
};

// ports is a bitmap of the 65536 TCP ports: bit p set means port p is a cache
// port. One array lookup that the verifier inlines, whatever the port count.
struct port_bitmap {
	__u8 bits[8192];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct port_bitmap);
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HOOK_MAX); // possible CPUs × HOOK_MAX, set at load
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct counters);
} stats SEC(".maps");

// rings holds one ring buffer per possible CPU; a record goes to the ring
// of the CPU the program runs on. One shared ring serialises every CPU on
// its reserve spinlock and bounces its lines between them: with BPF_PROG_TEST_RUN
// on both vCPUs of the development VM at once, a matched GET cost 3× what
// it costs on one, and the two together wrote fewer records per second than
// one alone. Records carry a fine timestamp so the reader can merge the
// rings back into the order the packets were seen (a flow whose sender
// moves between CPUs has its segments in two rings). The outer map's size
// and the rings' size are set from Go at load time.
struct ring {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct ring);
} rings SEC(".maps");

static __always_inline void *cpu_ring(void)
{
	__u32 cpu = bpf_get_smp_processor_id();
	return bpf_map_lookup_elem(&rings, &cpu);
}

// reply_skips tells the programs, per reply direction (server to client),
// a range of sequence numbers that user space does not need: the rest of a
// value it has read the header of. User space writes it (bpf.Capture.
// SetReplySkip) when a reply parser asks to skip a large value; the
// programs drop reply bytes inside [start, end) without copying them, and
// copy from end on. Bytes the programs drop this way reach user space as a
// hole inside the skip it asked for, which costs it nothing. An entry for an
// old connection on the same ports is harmless: a new connection's sequence
// numbers fall in its range with negligible probability. LRU: bounded.
struct skip_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;
	__u16 dport;
};

struct skip_range {
	__u32 start;
	__u32 end;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct skip_key);
	__type(value, struct skip_range);
} reply_skips SEC(".maps");

// Make the record and counters types visible to bpf2go.
const struct rec_hdr *unused_rec_hdr __attribute__((unused));
const struct counters *unused_counters __attribute__((unused));
const struct port_bitmap *unused_port_bitmap __attribute__((unused));
const struct skip_key *unused_skip_key __attribute__((unused));
const struct skip_range *unused_skip_range __attribute__((unused));

// TCP flag bits in byte 13 of the header.
#define F_FIN 0x01
#define F_SYN 0x02
#define F_RST 0x04

#define VLAN_HDR_LEN 4
#define ETH_P_8021AD_OLD 0x9100

// parsed is what parse() learns from the headers.
struct parsed {
	__u32 pay_off; // offset of the TCP payload from the start of the packet
	__u32 pay_len; // TCP payload length per the IP header (0 = unknown: use the packet length)
	__u32 reply;   // the segment comes from the server
};

// port_match returns 2 for a segment to a configured port (a request), 1 for
// one from it (a reply), 0 otherwise.
static __always_inline int port_match(__u16 sport, __u16 dport)
{
	__u32 zero = 0;
	struct port_bitmap *pm = bpf_map_lookup_elem(&ports, &zero);
	if (!pm)
		return 0;
	if (pm->bits[(dport >> 3) & 8191] & (1 << (dport & 7)))
		return 2;
	return (pm->bits[(sport >> 3) & 8191] & (1 << (sport & 7))) ? 1 : 0;
}

// parse_ip reads the IPv4 or IPv6 header (and IPv6 extension headers) at
// *curp and leaves *curp at its payload, *l4 the protocol carried and
// *l4_len the payload length per the header (0 = unknown). It returns 0,
// 1 when the packet is not one to follow, -1 when the headers are not all
// within end.
static __always_inline int parse_ip(void **curp, void *end, __u16 proto, struct rec_hdr *h,
				    __u32 *l4_len, __u8 *l4)
{
	void *cur = *curp;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = cur;
		if ((void *)(ip + 1) > end)
			return -1;
		if (ip->frag_off & bpf_htons(0x3fff)) // fragments are not followed
			return 1;
		__u32 ihl = ip->ihl * 4;
		if (ihl < sizeof(*ip))
			return 1;
		__u32 tot = bpf_ntohs(ip->tot_len);
		// GSO/BIG TCP super-packets may carry tot_len 0: length unknown.
		*l4_len = tot > ihl ? tot - ihl : 0;
		*l4 = ip->protocol;
		__builtin_memset(h->saddr, 0, sizeof(h->saddr));
		__builtin_memset(h->daddr, 0, sizeof(h->daddr));
		__builtin_memcpy(h->saddr, &ip->saddr, 4);
		__builtin_memcpy(h->daddr, &ip->daddr, 4);
		h->family = 4;
		*curp = cur + (ihl & 0x3c);
		return 0;
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = cur;
		if ((void *)(ip6 + 1) > end)
			return -1;
		__u8 next = ip6->nexthdr;
		__u32 len = bpf_ntohs(ip6->payload_len);
		__builtin_memcpy(h->saddr, &ip6->saddr, 16);
		__builtin_memcpy(h->daddr, &ip6->daddr, 16);
		h->family = 6;
		cur = ip6 + 1;
		// Step over the extension headers a cache connection may carry.
#pragma unroll
		for (int i = 0; i < 3; i++) {
			if (next != IPPROTO_HOPOPTS && next != IPPROTO_ROUTING && next != IPPROTO_DSTOPTS)
				break;
			__u8 *ext = cur;
			if ((void *)(ext + 2) > end)
				return -1;
			__u32 elen = ((__u32)ext[1] + 1) * 8;
			next = ext[0];
			cur += elen;
			if (len >= elen)
				len -= elen;
		}
		*l4_len = len;
		*l4 = next;
		*curp = cur;
		return 0;
	}
	return 1;
}

// Overlay encapsulations followed on uplinks: the cache's flow is the inner
// one (pod addresses), which is also what the pod's veth and a cgroup hook
// see, so the same segment captured on both reads as one flow.
#define ETH_P_TEB 0x6558 // Geneve payload: an Ethernet frame

// A tunnel packet is a plain UDP datagram (or IP packet) anyone who reaches
// the node can send, and these hooks run before the host firewall, so only
// the tunnels the node terminates are followed: decap_cfg, filled from user
// space (bpf.Capture.SetDecap), names them. Keys by type:
//   DECAP_UDP  {port}:       a UDP tunnel port; value DECAP_VXLAN or
//                            DECAP_GENEVE, | DECAP_ANY_VNI when every VNI is
//                            carried (external/collect_metadata devices)
//   DECAP_VNI  {port, vni}:  a VNI carried on port
//   DECAP_IPIP {}:           IP-in-IP and IPv6-in-IP are followed
//   DECAP_ADDR {family, addr}: a local tunnel endpoint address; the outer
//                            packet must come from or go to one
// Empty (the default): nothing is decapsulated.
#define DECAP_UDP 1
#define DECAP_VNI 2
#define DECAP_IPIP 3
#define DECAP_ADDR 4
#define DECAP_VXLAN 1
#define DECAP_GENEVE 2
#define DECAP_ANY_VNI 0x80

struct decap_key {
	__u8 type;
	__u8 family;   // DECAP_ADDR: 4 or 6
	__u16 port;    // DECAP_UDP, DECAP_VNI: UDP destination port, host order
	__u32 vni;     // DECAP_VNI
	__u8 addr[16]; // DECAP_ADDR: IPv4 in the first 4 bytes
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct decap_key);
	__type(value, __u8);
} decap_cfg SEC(".maps");

// decap_local reports whether the outer packet in h comes from or goes to a
// local tunnel endpoint.
static __always_inline int decap_local(struct rec_hdr *h)
{
	struct decap_key k;
	__builtin_memset(&k, 0, sizeof(k));
	k.type = DECAP_ADDR;
	k.family = h->family;
	__builtin_memcpy(k.addr, h->daddr, 16);
	if (bpf_map_lookup_elem(&decap_cfg, &k))
		return 1;
	__builtin_memcpy(k.addr, h->saddr, 16);
	return bpf_map_lookup_elem(&decap_cfg, &k) != 0;
}

// decap steps from an outer IP payload (*curp, protocol l4; h holds the outer
// addresses) to the inner IP header of a tunnel decap_cfg names: IP-in-IP,
// IPv6-in-IP, VXLAN and Geneve. It sets *proto to the inner EtherType and
// returns 0; 1 when the payload is not a tunnel the node terminates, -1
// when the headers are not all within end.
static __always_inline int decap(void **curp, void *end, __u8 l4, __u16 *proto, struct rec_hdr *h)
{
	void *cur = *curp;
	struct decap_key k;
	__builtin_memset(&k, 0, sizeof(k));
	if (l4 == IPPROTO_IPIP || l4 == IPPROTO_IPV6) {
		k.type = DECAP_IPIP;
		if (!bpf_map_lookup_elem(&decap_cfg, &k) || !decap_local(h))
			return 1;
		*proto = l4 == IPPROTO_IPIP ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
		return 0;
	}
	if (l4 != IPPROTO_UDP)
		return 1;
	__u8 *udp = cur;
	if ((void *)(udp + 8) > end)
		return -1;
	k.type = DECAP_UDP;
	k.port = ((__u16)udp[2] << 8) | udp[3];
	__u8 *kindp = bpf_map_lookup_elem(&decap_cfg, &k);
	if (!kindp)
		return 1;
	__u8 kind = *kindp;
	cur += 8;
	__u8 *th = cur; // VXLAN or Geneve header: the VNI is in bytes 4-6 of both
	if ((void *)(th + 8) > end)
		return -1;
	if (!(kind & DECAP_ANY_VNI)) {
		k.type = DECAP_VNI;
		k.vni = ((__u32)th[4] << 16) | ((__u32)th[5] << 8) | th[6];
		if (!bpf_map_lookup_elem(&decap_cfg, &k))
			return 1;
	}
	if (!decap_local(h))
		return 1;
	__u16 inner;
	kind &= ~DECAP_ANY_VNI;
	if (kind == DECAP_VXLAN) {
		if (!(th[0] & 0x08)) // VNI flag: a VXLAN header
			return 1;
		cur += 8;
		inner = bpf_htons(ETH_P_TEB);
	} else if (kind == DECAP_GENEVE) {
		if (th[0] >> 6) // version 0 only
			return 1;
		inner = *(__u16 *)(th + 2);
		cur += 8 + (th[0] & 0x3f) * 4;
	} else {
		return 1;
	}
	if (inner == bpf_htons(ETH_P_TEB)) {
		struct ethhdr *eth = cur;
		if ((void *)(eth + 1) > end)
			return -1;
		inner = eth->h_proto;
		cur = eth + 1;
	}
	if (inner != bpf_htons(ETH_P_IP) && inner != bpf_htons(ETH_P_IPV6))
		return 1;
	*proto = inner;
	*curp = cur;
	return 0;
}

// parse reads the Ethernet/VLAN/IP/TCP headers between data and end and fills
// h and p; l3 says the packet starts at the IP header (cgroup hooks). A
// tunnel's inner packet is followed (decap). It returns 0 for a TCP segment
// on a configured port, 1 when the packet is not one (the caller passes it
// on) and -1 when the headers are not all within [data, end).
static __always_inline int parse(void *data, void *end, struct rec_hdr *h, struct parsed *p, int l3)
{
	void *cur = data;
	__u16 proto;

	if (raw_ip || l3) {
		if (cur + 1 > end)
			return -1;
		proto = ((*(__u8 *)cur) >> 4) == 6 ? bpf_htons(ETH_P_IPV6) : bpf_htons(ETH_P_IP);
	} else {
		struct ethhdr *eth = cur;
		if ((void *)(eth + 1) > end)
			return -1;
		proto = eth->h_proto;
		cur = eth + 1;
#pragma unroll
		for (int i = 0; i < 2; i++) {
			if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD) &&
			    proto != bpf_htons(ETH_P_8021AD_OLD))
				break;
			if (cur + VLAN_HDR_LEN > end)
				return -1;
			proto = *(__u16 *)(cur + 2);
			cur += VLAN_HDR_LEN;
		}
	}

	__u32 l4_len; // TCP header + payload per the IP header; 0 = unknown
	__u8 l4;
	int r = parse_ip(&cur, end, proto, h, &l4_len, &l4);
	if (r)
		return r;
	if (l4 != IPPROTO_TCP) {
		// Sockets (cgroup hooks) only ever see decapsulated packets.
		if (l3)
			return 1;
		r = decap(&cur, end, l4, &proto, h);
		if (r)
			return r;
		r = parse_ip(&cur, end, proto, h, &l4_len, &l4);
		if (r)
			return r;
		if (l4 != IPPROTO_TCP)
			return 1;
	}

	struct tcphdr *tcp = cur;
	if ((void *)(tcp + 1) > end)
		return -1;
	h->sport = bpf_ntohs(tcp->source);
	h->dport = bpf_ntohs(tcp->dest);
	int m = port_match(h->sport, h->dport);
	if (!m)
		return 1;
	p->reply = m == 1;
	__u32 doff = tcp->doff * 4;
	if (doff < sizeof(*tcp))
		return 1;
	h->seq = bpf_ntohl(tcp->seq);
	h->ack = bpf_ntohl(tcp->ack_seq);
	h->flags = ((__u8 *)tcp)[13];
	p->pay_off = (__u32)(cur - data) + doff;
	p->pay_len = l4_len > doff ? l4_len - doff : 0;
	if (l4_len == 0)
		p->pay_len = 0xffffffff; // unknown: the caller uses the packet length
	return 0;
}

// wake holds the time of the last forced wakeup. It is shared by all
// CPUs and attachments; written at most every wakeup_ns, it stays in every
// CPU's cache. Concurrent writers only cost a spare wakeup.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} wake SEC(".maps");

// wake_flags decides the wakeup for a record of size bytes, already
// reserved, stamped now. Waking only the record that makes the unread data
// cross wakeup_bytes keeps a slow reader that is catching up from being
// woken for every record.
static __always_inline __u64 wake_flags(void *rb, __u64 size, __u64 now)
{
	__u64 avail = bpf_ringbuf_query(rb, BPF_RB_AVAIL_DATA);
	if (avail >= wakeup_bytes && avail < wakeup_bytes + size + 8)
		return BPF_RB_FORCE_WAKEUP;
	__u32 zero = 0;
	__u64 *last = bpf_map_lookup_elem(&wake, &zero);
	if (last && now - *last >= wakeup_ns) {
		*last = now;
		return BPF_RB_FORCE_WAKEUP;
	}
	return BPF_RB_NO_WAKEUP;
}

// EMIT_CLASS reserves a record with room for exactly N payload bytes and
// fills it with c <= N bytes from offset off. N must be a constant: the
// verifier wants ringbuf reservations of known size. Size classes keep small
// segments (most cache requests) from taking a whole CHUNK of the ring; they
// are 8 bytes apart up to 64 because every cache line a record spans is a
// cache miss under load (the reader on another CPU read it a lap earlier):
// a 5-byte reply takes 88 bytes of ring instead of 144.
#define EMIT_CLASS(N, LOAD)                                                         \
	if (c <= N) {                                                               \
		struct rec_hdr *r = bpf_ringbuf_reserve(rb, sizeof(*r) + N, 0);      \
		if (!r)                                                             \
			return -1;                                                  \
		*r = *h;                                                            \
		if (N > 0 && c > 0 && LOAD(ctx, off, (void *)(r + 1), c) < 0) {      \
			bpf_ringbuf_discard(r, BPF_RB_NO_WAKEUP);                   \
			return -2;                                                  \
		}                                                                   \
		bpf_ringbuf_submit(r, wake_flags(rb, sizeof(*r) + N, h->ts));            \
		return 0;                                                           \
	}

// The emit functions are global functions, so the verifier checks the size
// classes once per program, apart from the state of each caller (as static
// subprograms they were checked again for every call site's states: two
// thirds of all the instructions it processed). c is 64-bit so the bounds
// the verifier learns from the comparisons reach the helper call.
#define DEFINE_EMIT(NAME, CTX, LOAD)                                                \
	__attribute__((noinline)) int NAME(CTX *ctx, struct rec_hdr *h, __u32 off, __u64 c) \
	{                                                                             \
		if (!h || c > CHUNK)                                                  \
			return -2;                                                    \
		void *rb = cpu_ring();                                                \
		if (!rb)                                                              \
			return -1;                                                    \
		EMIT_CLASS(0, LOAD)                                                           \
		EMIT_CLASS(8, LOAD)                                                           \
		EMIT_CLASS(16, LOAD)                                                          \
		EMIT_CLASS(24, LOAD)                                                          \
		EMIT_CLASS(32, LOAD)                                                          \
		EMIT_CLASS(40, LOAD)                                                          \
		EMIT_CLASS(48, LOAD)                                                          \
		EMIT_CLASS(56, LOAD)                                                          \
		EMIT_CLASS(64, LOAD)                                                          \
		EMIT_CLASS(96, LOAD)                                                          \
		EMIT_CLASS(128, LOAD)                                                         \
		EMIT_CLASS(192, LOAD)                                                         \
		EMIT_CLASS(256, LOAD)                                                         \
		EMIT_CLASS(384, LOAD)                                                         \
		EMIT_CLASS(512, LOAD)                                                         \
		EMIT_CLASS(768, LOAD)                                                         \
		EMIT_CLASS(1024, LOAD)                                                        \
		EMIT_CLASS(1536, LOAD)                                                        \
		EMIT_CLASS(2048, LOAD)                                                        \
		EMIT_CLASS(3072, LOAD)                                                        \
		EMIT_CLASS(CHUNK, LOAD)                                                       \
		return -2;                                                            \
	}

DEFINE_EMIT(emit_skb, struct __sk_buff, bpf_skb_load_bytes)
DEFINE_EMIT(emit_xdp, struct xdp_md, bpf_xdp_load_bytes)

// count_emit counts an emit of c payload bytes by its result err: a record
// sent, or (ring full, load error) the left bytes of the payload, this
// record's and those after it, lost. It returns err.
static __always_inline int count_emit(struct counters *cnt, int err, __u32 c, __u32 left)
{
	if (err == -1) {
		cnt->rb_full++;
		cnt->rb_full_bytes += left;
	} else if (err) {
		cnt->load_err += left;
	} else {
		cnt->records++;
		cnt->bytes += c;
	}
	return err;
}

static __always_inline struct counters *counters_for(__u32 hook)
{
	__u32 i = bpf_get_smp_processor_id() * HOOK_MAX + hook;
	return bpf_map_lookup_elem(&stats, &i);
}

// copy_state carries one packet's copy through bpf_loop, which the verifier
// checks once instead of once per chunk.
struct copy_state {
	void *ctx; // struct __sk_buff or struct xdp_md
	struct counters *cnt;
	struct rec_hdr h;
	__u32 pay_off; // payload offset in the packet
	__u32 n;       // payload bytes to copy
	__u32 missing; // payload bytes not copied (beyond max_copy, or not captured)
	__u32 done;    // payload bytes copied so far
	__u32 seq0;
	__u8 flags;
};

// copy_chunk sends one record: the next CHUNK bytes or fewer. Only the first
// record carries SYN and only the last FIN and Missing, so each reads as a
// segment of its own. It returns 1 to stop the loop.
#define DEFINE_COPY_CHUNK(NAME, CTX, EMIT)                                            \
	static long NAME(__u64 i, struct copy_state *st)                              \
	{                                                                             \
		__u32 c = st->n - st->done;                                           \
		if (c > CHUNK)                                                        \
			c = CHUNK;                                                    \
		int last = st->done + c >= st->n;                                     \
		st->h.flags = st->flags;                                              \
		if (i > 0)                                                            \
			st->h.flags &= ~F_SYN;                                        \
		if (!last)                                                            \
			st->h.flags &= ~F_FIN;                                        \
		st->h.seq = st->seq0 + st->done + (i > 0 && (st->flags & F_SYN) ? 1 : 0); \
		st->h.len = c;                                                        \
		st->h.missing = last ? st->missing : 0;                               \
		int err = EMIT((CTX *)st->ctx, &st->h, st->pay_off + st->done, c);    \
		if (count_emit(st->cnt, err, c, st->n - st->done))                    \
			return 1;                                                     \
		st->done += c;                                                        \
		return last;                                                          \
	}

DEFINE_COPY_CHUNK(copy_chunk_skb, struct __sk_buff, emit_skb)
DEFINE_COPY_CHUNK(copy_chunk_xdp, struct xdp_md, emit_xdp)

// copy_out sends the payload at pay_off: avail bytes are in the packet, wire
// bytes were sent (more when a header claims more than was captured). What
// is not copied is counted and reported as Missing on the last record.
//
// The common case, a segment of at most CHUNK bytes (every cache request
// and reply that is not a GSO/GRO super-packet), takes one direct emit call;
// only larger segments pay for the bpf_loop state. Pure ACKs return before
// the timestamp is read.
static __always_inline int copy_out_x(void *ctx, int xdp, struct counters *cnt, struct rec_hdr *h,
				      __u32 pay_off, __u32 avail, __u32 wire, __u32 uncopied);

static __always_inline __attribute__((unused)) void copy_out(void *ctx, int xdp, struct counters *cnt,
							      struct rec_hdr *h, __u32 pay_off, __u32 avail,
							      __u32 wire)
{
	copy_out_x(ctx, xdp, cnt, h, pay_off, avail, wire, 0);
}

// copy_out_x is copy_out for a segment whose last uncopied bytes were left
// out on purpose (reply heads): they are reported as Missing, not counted
// as truncated. Nonzero when not all of the payload reached the ring
// (truncated, ring full, load error): reply records need to know.
static __always_inline int copy_out_x(void *ctx, int xdp, struct counters *cnt, struct rec_hdr *h,
				      __u32 pay_off, __u32 avail, __u32 wire, __u32 uncopied)
{
	__u32 n = avail;
	if (n > wire)
		n = wire;
	if (n > max_copy)
		n = max_copy;
	if (n > CHUNK * MAX_CHUNKS)
		n = CHUNK * MAX_CHUNKS;
	int short_ = wire > n;
	if (wire > n)
		cnt->truncated += wire - n;
	if (n == 0 && !(h->flags & (F_SYN | F_FIN | F_RST)) && !(h->pad2 & REC_ANCHOR))
		return short_; // a pure ACK (or a reply dropped whole) tells the stream layer nothing
	// A fine clock (CLOCK_MONOTONIC): the reader merges the per-CPU rings
	// by it, and tick resolution would leave a flow that moved between
	// CPUs within one tick in no defined order.
	h->ts = bpf_ktime_get_ns();
	if (n <= CHUNK) {
		h->len = n;
		h->missing = wire - n + uncopied;
		int err = xdp ? emit_xdp(ctx, h, pay_off, n) : emit_skb(ctx, h, pay_off, n);
		return count_emit(cnt, err, n, n) || short_;
	}
	struct copy_state st = {
		.ctx = ctx,
		.cnt = cnt,
		.h = *h,
		.pay_off = pay_off,
		.n = n,
		.missing = wire - n + uncopied,
		.seq0 = h->seq,
		.flags = h->flags,
	};
	__u32 chunks = (n + CHUNK - 1) / CHUNK;
	if (xdp)
		bpf_loop(chunks, copy_chunk_xdp, &st, 0);
	else
		bpf_loop(chunks, copy_chunk_skb, &st, 0);
	return st.done < st.n || short_;
}


// Flow sampling (--max-cpu). A flow (client address and port, server port:
// both directions hash alike) is kept while the top 16 bits of its hash are
// below keep: keep/65536 of the flows are copied and the others are skipped
// whole, so the stream layer never sees part of a request, and the flows
// kept at a smaller keep are a subset of those kept at a larger one. The
// rate moves in levels of a sixteenth of an octave (level L keeps about
// 2^(-L/16) of the flows: level 16 is 1/2, 127 about 1/244), fine enough
// for user space to hold a CPU budget to a few per cent; the record carries
// the level, so user space scales every record by what was in effect when
// it was copied. User space sets the level from its CPU budget; the
// programs raise it themselves (a halving: 16 levels) when a ring fills
// past three quarters, so under overload whole flows are shed on purpose
// instead of records being dropped at random.
struct sampling {
	__u32 level;        // current level (0 = all flows)
	__u32 keep;         // keep the flows whose hash16 < keep (65536 = all)
	__u32 resume_keep;  // flows with hash16 >= resume_keep were skipped lately
	__u32 pad;
	__u64 resume_until; // ...until this time (ns): their records carry REC_RESUMED
	__u64 raised_ns;    // last time the programs raised the level
	__u64 raised_avail; // unread bytes in the ring that raised it, then
	__u64 raises;       // times the programs raised the level (ring filling)
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE); // read every tick without a system call
	__type(key, __u32);
	__type(value, struct sampling);
} sampling SEC(".maps");

const struct sampling *unused_sampling __attribute__((unused));

// sample_counts is per CPU, counted only while sampling (level > 0):
// segments of sampled-out flows (skipped on purpose, not lost), and the
// request payload bytes of skipped and of kept flows, from which user space
// measures the fraction of requests it really sees: with few connections
// the flows kept differ from keep/65536 by chance, and counts scaled by the
// nominal rate would be off by as much.
struct sample_counts {
	__u64 out_segs;
	__u64 out_bytes;
	__u64 kept_bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sample_counts);
} sampled_out SEC(".maps");

const struct sample_counts *unused_sample_counts __attribute__((unused));

#define MAX_LEVEL 127
#define LEVELS_PER_HALVING 16
#define KEEP_ALL 65536
#define REC_RESUMED 0x80
// A ring more than three quarters full (the reader is woken at a
// sixteenth, so it is far behind; below that a burst still fits, as it did
// before sampling existed) raises the level by a halving, at most once per
// RAISE_GAP_NS, and again only while the backlog keeps growing: what the
// last step left in the ring takes the reader a moment to drain, and a ring
// that is still over three quarters full but no longer filling needs no
// further step.
#define RAISE_GAP_NS 1000000ULL
#define RAISE_RESET_NS 1000000000ULL

// sample_check is the sampling decision for a connection given as its
// client address (four words, network order) and ports (client << 16 |
// server): -1 to skip it, else the record's sample byte. how: bit 0, the
// segment will make a record (payload to copy, or SYN/FIN/RST): only then
// is the ring's fill looked at, so pure ACKs and uncopied replies pay for
// a hash at most; bit 1, it is a request (its payload, pay, counts toward
// the kept fraction); bit 2, it carries SYN, FIN or RST: kept whatever the
// flow's hash, so the stream layer sees every connection open and close
// and a shed connection's requests, when it is kept again, are a counted
// gap on a connection it knows (not requests of one it cannot confirm).
// It is a global function so the verifier checks it once, apart from its
// callers, and the callers continue from one state
// whatever it did: a static function's branches multiplied the states the
// copy code after it was verified in, and loading took four times as long.
__attribute__((noinline)) int sample_check(__u64 a01, __u64 a23, __u32 ports, __u32 how, __u32 pay)
{
	__u32 zero = 0;
	struct sampling *s = bpf_map_lookup_elem(&sampling, &zero);
	if (!s)
		return 0;
	__u32 level = s->level;
	__u32 keep = s->keep;
	__u32 rk = s->resume_keep;
	__u32 h16 = 0;
	if (level || rk < KEEP_ALL) {
		__u64 x = a01 * 0x9E3779B97F4A7C15ULL ^ a23 * 0xC2B2AE3D27D4EB4FULL ^
			  (__u64)ports * 0x94D049BB133111EBULL;
		x ^= x >> 31;
		x *= 0xBF58476D1CE4E5B9ULL;
		x ^= x >> 29;
		h16 = x >> 48;
	}
	if (level) {
		struct sample_counts *n = bpf_map_lookup_elem(&sampled_out, &zero);
		if (h16 >= keep && !(how & 4)) {
			if (n) {
				n->out_segs++;
				if (how & 2)
					n->out_bytes += pay;
			}
			return -1;
		}
		if (n && (how & 2))
			n->kept_bytes += pay;
	}
	if (level > MAX_LEVEL)
		level = MAX_LEVEL;
	// Still kept: if this CPU's ring is more than 3/4 full, shed more
	// flows from now on, before the ring fills and records are lost.
	void *rb = (how & 1) && level + LEVELS_PER_HALVING <= MAX_LEVEL ? cpu_ring() : 0;
	if (rb) {
		__u64 avail = bpf_ringbuf_query(rb, BPF_RB_AVAIL_DATA);
		__u64 size = bpf_ringbuf_query(rb, BPF_RB_RING_SIZE);
		if (avail > size / 4 * 3) {
			__u64 now = bpf_ktime_get_ns();
			// Plain stores (the programs build for BPF v1, without
			// cmpxchg): two CPUs racing here raise it twice at worst.
			// A starved reader lets every record grow the backlog:
			// step again only once it grew by another 1/32 of
			// the ring, so the rate falls with the fill level, not
			// with time (each step halves the growth, the next takes
			// twice as long). A second later, start over. Halving
			// keep is level + 16 to within one part in keep.
			if (now - s->raised_ns >= RAISE_GAP_NS &&
			    (avail >= s->raised_avail + size / 32 || now - s->raised_ns >= RAISE_RESET_NS)) {
				s->raised_ns = now;
				s->raised_avail = avail;
				s->keep = keep / 2;
				s->level = level + LEVELS_PER_HALVING;
				__sync_fetch_and_add(&s->raises, 1);
			}
		}
	}
	int flags = level & 0x7f;
	if (rk < keep && h16 >= rk && bpf_ktime_get_ns() < s->resume_until)
		flags |= REC_RESUMED;
	return flags;
}

// sample_skip returns 1 when the segment's connection is sampled out, and
// sets h->sample for a kept one. It is the only sampling code on the packet
// path: a call and one array lookup when sampling is off.
static __always_inline int sample_skip(struct rec_hdr *h, struct parsed *p)
{
	int reply = p->reply;
	int ctl = h->flags & (F_SYN | F_FIN | F_RST);
	int emit = (p->pay_len != 0 && (!reply || replies)) || ctl || (h->pad2 & REC_ANCHOR);
	__u32 how = (emit ? 1 : 0) | (reply ? 0 : 2) | (ctl ? 4 : 0);
	const __u32 *a = (const __u32 *)(reply ? h->daddr : h->saddr);
	__u32 cport = reply ? h->dport : h->sport;
	__u32 sport = reply ? h->sport : h->dport;
	int r = sample_check((__u64)a[0] << 32 | a[1], (__u64)a[2] << 32 | a[3], cport << 16 | sport, how,
			     p->pay_len == 0xffffffff ? 0 : p->pay_len);
	if (r < 0)
		return 1;
	h->sample = r;
	return 0;
}
// In-kernel counting (--kernel-count): kcount.h.
#include "kcount.h"

// kc_emit_range_* emit one reply range (kcount.h "Reply records") as
// records of at most CHUNK bytes (their counting spelled out, not
// count_emit: inlined here it cost the function 24 bytes of stack, past
// the cgroup programs' 512 on the reply chain):
// range i of the segment framed last (kc_state.rs.rr), pay_off its
// payload's offset in the packet. 0, or nonzero when it did
// not reach the ring whole. Global functions with a plain loop (no
// bpf_loop frame): the reply records' chain stays within 512 bytes of
// stack under the cgroup programs' main frame.
#define DEFINE_KC_EMIT(NAME, CTX, EMIT)                                                          \
	__attribute__((noinline)) int NAME(CTX *ctx, struct rec_hdr *h0, struct counters *cnt,          \
					   __u32 pay_off, __u32 i)                                     \
	{                                                                                        \
		__u32 cpu = kc_cpu();                                                            \
		struct kc_state *s = bpf_map_lookup_elem(&kc_scratch, &cpu);                     \
		if (!h0 || !cnt || !s)                                                           \
			return 1;                                                                \
		struct kc_rrange *g = &s->rs.rr[i & (KC_RR - 1)];                                \
		__u32 off = pay_off + g->off, n = g->len, seq = h0->seq + g->off;                \
		struct rec_hdr *h = &s->rs.rh;                                                   \
		__builtin_memcpy(h, h0, sizeof(*h));                                             \
		h->flags &= ~(F_SYN | F_FIN | F_RST);                                            \
		h->pad2 = g->flags;                                                              \
		h->missing = 0;                                                                  \
		h->ts = s->rs.ts; /* kcount.h kc_reply_in */                                     \
		__u32 done = 0;                                                                  \
		for (int i = 0; i < MAX_CHUNKS; i++) {                                           \
			if (done >= n)                                                           \
				break;                                                           \
			__u32 c = n - done;                                                      \
			if (c > CHUNK)                                                           \
				c = CHUNK;                                                       \
			h->seq = seq + done;                                                     \
			h->len = c;                                                              \
			int err = EMIT(ctx, h, off + done, c);                                   \
			if (err) {                                                               \
				if (err == -1) {                                                 \
					cnt->rb_full++;                                          \
					cnt->rb_full_bytes += n - done;                          \
				} else {                                                         \
					cnt->load_err += n - done;                               \
				}                                                                \
				return 1;                                                        \
			}                                                                        \
			cnt->records++;                                                          \
			cnt->bytes += c;                                                         \
			done += c;                                                               \
		}                                                                                \
		return done < n;                                                                 \
	}

DEFINE_KC_EMIT(kc_emit_range_skb, struct __sk_buff, emit_skb)
DEFINE_KC_EMIT(kc_emit_range_xdp, struct xdp_md, emit_xdp)

// kc_rsent_fail: a reply record of the segment framed last (s->rs) did not
// reach user space (kcount.h kc_rcfail for the cost).
__attribute__((noinline)) int kc_rsent_fail(__u32 cpu)
{
	struct kc_state *s = bpf_map_lookup_elem(&kc_scratch, &cpu);
	if (!s)
		return 0;
	struct kc_rflow *rf = bpf_map_lookup_elem(&kc_rflows, &s->rs.k);
	if (!rf)
		return 0;
	s->stats.rc_fail++;
	kc_rblock(rf);
	return 0;
}

// kc_emit_replies emits the reply records the framer chose for this
// segment, in order, stopping at the first that fails: a later one would
// pair with the wrong request. 1 when the segment lies in a copied reply.
static __always_inline int kc_emit_replies_x(void *ctx, int xdp, struct rec_hdr *h, struct parsed *p,
					     struct counters *cnt, __u32 wire)
{
	if (!h || !p || !cnt)
		return 0;
	__u32 cpu = kc_cpu();
	struct kc_state *s = bpf_map_lookup_elem(&kc_scratch, &cpu);
	if (!s)
		return 0;
	__u32 nrr = s->rs.nrr;
	int quiet = s->rs.quiet || nrr;
	if (!nrr)
		return quiet;
	if (sample_skip(h, p)) {
		kc_rsent_fail(cpu);
		return quiet;
	}
	for (__u32 i = 0; i < KC_RR; i++) {
		if (i >= nrr)
			break;
		struct kc_rrange *g = &s->rs.rr[i];
		__u32 off = g->off, n = g->len;
		if (off > wire || n > wire - off) {
			kc_rsent_fail(cpu);
			break;
		}
		int err = xdp ? kc_emit_range_xdp(ctx, h, cnt, p->pay_off, i) : kc_emit_range_skb(ctx, h, cnt, p->pay_off, i);
		if (err) {
			kc_rsent_fail(cpu);
			break;
		}
		s->stats.rc_records++;
		s->stats.rc_bytes += n;
	}
	// A FIN or RST record after them, where the segment ends.
	h->seq += wire;
	return quiet;
}

// Global functions: the packet path's frame keeps nothing for them.
__attribute__((noinline)) int kc_emit_replies_skb(struct __sk_buff *skb, struct rec_hdr *h, struct parsed *p,
						  struct counters *cnt, __u32 wire)
{
	return kc_emit_replies_x(skb, 0, h, p, cnt, wire);
}

__attribute__((noinline)) int kc_emit_replies_xdp(struct xdp_md *ctx, struct rec_hdr *h, struct parsed *p,
						  struct counters *cnt, __u32 wire)
{
	return kc_emit_replies_x(ctx, 1, h, p, cnt, wire);
}

// reply_done ends a reply segment's run early when replies are off and it
// carries no SYN, FIN or RST: it would yield no record whatever the
// sampling decision, so only its bytes are counted (in every flow, sampled
// out or not: they are left uncopied either way). Most segments of a busy
// cache port are such replies, one per request segment.
//
// Under kernel counting, a reply of a connection whose requests user space
// cannot confirm yet (kc_anchor_take) goes on instead, as a header without
// payload; and as the requests that say where the replies stand are mostly
// not copied either, a reply record (a FIN, an RST, an anchor) resumes the
// reply stream (KC_REC_GAP) instead of landing out of the window user
// space last knew.
//
// With kc_bytes, every reply segment is first framed and paired with the
// connection's requests (kcount.h, "Reply bytes").
static __always_inline int reply_done(void *ctx, int xdp, struct parsed *p, struct rec_hdr *h, struct counters *cnt,
				      __u32 wire)
{
	if (kc_on && kc_bytes && p->reply) {
		if (xdp)
			kc_reply_xdp(ctx, h, p);
		else
			kc_reply_skb(ctx, h, p);
		int quiet = xdp ? kc_emit_replies_xdp(ctx, h, p, cnt, wire) : kc_emit_replies_skb(ctx, h, p, cnt, wire);
		if (quiet && !(h->flags & (F_SYN | F_FIN | F_RST))) {
			// In a copied reply: the records say where the stream
			// stands; a resume or an anchor here would cut the reply.
			cnt->reply_bytes += wire;
			return 1;
		}
	}
	if (!p->reply || replies != REPLIES_OFF)
		return 0;
	if (kc_on && !(h->flags & F_SYN))
		h->pad2 |= KC_REC_GAP;
	if (h->flags & (F_SYN | F_FIN | F_RST))
		return 0;
	if (kc_on && kc_anchor_take(h)) {
		h->pad2 |= REC_ANCHOR;
		return 0;
	}
	cnt->reply_bytes += wire;
	return 1;
}


// reply_heads trims a reply segment to what reply parsing needs
// (REPLIES_HEADS): bytes inside the skip user space registered for the flow
// are dropped (the segment starts after them, or yields nothing), and at
// most reply_copy bytes are copied from there plus the segment's last
// REPLY_TAIL bytes (*tail); the middle is reported as Missing. User space parses the reply headers in what it gets and skips
// values by sequence arithmetic: a value's uncopied bytes fall inside the
// skip it asks for. A header beyond the copied part (replies of medium
// values packed in one large segment) is lost: user space then stops
// pairing that connection's replies until it is quiet again. All reply
// bytes not copied are counted in reply_bytes.
static __always_inline void reply_heads(struct rec_hdr *h, struct counters *cnt, __u32 *pay_off,
					__u32 *avail, __u32 *wire, __u32 *uncopied, __u32 *tail)
{
	struct skip_key k = {};
	__builtin_memcpy(k.saddr, h->saddr, 16);
	__builtin_memcpy(k.daddr, h->daddr, 16);
	k.sport = h->sport;
	k.dport = h->dport;
	struct skip_range *r = bpf_map_lookup_elem(&reply_skips, &k);
	if (r && (__s32)(h->seq - r->start) >= 0 && (__s32)(r->end - h->seq) > 0) {
		__u32 d = r->end - h->seq;
		if (d >= *wire) {
			cnt->reply_bytes += *wire;
			*avail = *wire = 0;
			return;
		}
		cnt->reply_bytes += d;
		h->seq += d;
		*pay_off += d;
		*wire -= d;
		*avail = *avail > d ? *avail - d : 0;
	}
	__u32 keep = reply_copy;
	if (*wire > keep) {
		__u32 rest = *wire - keep;
		if (*avail >= *wire) {
			// The tail is in the packet: copy it after the head.
			*tail = rest < REPLY_TAIL ? rest : REPLY_TAIL;
			rest -= *tail;
		}
		cnt->reply_bytes += rest;
		*uncopied = rest;
		*wire = keep;
		if (*avail > keep)
			*avail = keep;
	}
}

// copy_reply_tail sends the tail reply_heads set aside, after the head
// (which then carries no FIN: the tail does).
#define COPY_REPLY_TAIL(CTX, XDP)                                                      \
	do {                                                                           \
		__u8 fl = h.flags;                                                     \
		h.flags &= ~F_FIN;                                                     \
		copy_out_x(CTX, XDP, cnt, &h, p.pay_off, avail, wire, uncopied);       \
		h.seq += wire + uncopied;                                              \
		h.flags = fl & ~F_SYN;                                                 \
		copy_out_x(CTX, XDP, cnt, &h, p.pay_off + wire + uncopied, tail, tail, 0); \
	} while (0)

static __always_inline void handle_skb(struct __sk_buff *skb, __u32 hook)
{
	// cgroup hooks see the packet from its IP header on.
	int l3 = hook == HOOK_CGROUP_INGRESS || hook == HOOK_CGROUP_EGRESS;
	struct counters *cnt = counters_for(hook);
	if (!cnt)
		return;
	cnt->packets++;

	struct rec_hdr h;
	struct parsed p;
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	int ret = parse(data, end, &h, &p, l3);
	if (ret < 0) {
		// Headers beyond the linear part of the skb. The stack keeps
		// TCP/IP headers linear (GRO and the TCP output path pull them),
		// so this is counted rather than handled with bpf_skb_pull_data,
		// which would change the skb under the stack.
		cnt->nonlinear++;
		return;
	}
	if (ret != 0)
		return;
	cnt->matched++;
	h.pad2 = 0;
	h.ifindex = skb->ifindex;
	h.hook = hook;
	__u32 len = skb->len;
	__u32 avail = len > p.pay_off ? len - p.pay_off : 0;
	__u32 wire = p.pay_len == 0xffffffff ? avail : p.pay_len;
	if (reply_done(skb, 0, &p, &h, cnt, wire))
		return;
	if (kc_on && !p.reply && kc_handle(skb, 0, &h, p.pay_off, avail, wire))
		return; // counted here, not needed in user space
	int framed = kc_on && kc_bytes && (h.pad2 & (KC_REC_FRAMED | KC_REC_UNFRAMED));
	if (sample_skip(&h, &p)) {
		if (framed)
			kc_unsent(kc_cpu());
		return;
	}
	__u32 uncopied = 0, tail = 0;
	if (p.reply && replies == REPLIES_HEADS) {
		reply_heads(&h, cnt, &p.pay_off, &avail, &wire, &uncopied, &tail);
	} else if (p.reply && replies == REPLIES_OFF) {
		// Count the reply's bytes and keep only its control flags.
		cnt->reply_bytes += wire;
		avail = wire = 0;
	}
	if (tail) {
		COPY_REPLY_TAIL(skb, 0);
		return;
	}
	if (copy_out_x(skb, 0, cnt, &h, p.pay_off, avail, wire, uncopied) && framed)
		kc_unsent(kc_cpu());
}

SEC("tc")
int hotsniff_tc_ingress(struct __sk_buff *skb)
{
	handle_skb(skb, HOOK_TC_INGRESS);
	return TC_ACT_UNSPEC; // TCX_NEXT: let the next program and the stack decide
}

SEC("tc")
int hotsniff_tc_egress(struct __sk_buff *skb)
{
	handle_skb(skb, HOOK_TC_EGRESS);
	return TC_ACT_UNSPEC;
}

// xdp.frags: the program copes with multi-buffer frames (bpf_xdp_load_bytes
// reads across fragments), so attaching it does not force a smaller MTU.
SEC("xdp.frags")
int hotsniff_xdp(struct xdp_md *ctx)
{
	struct counters *cnt = counters_for(HOOK_XDP);
	if (!cnt)
		return XDP_PASS;
	cnt->packets++;

	struct rec_hdr h;
	struct parsed p;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	int ret = parse(data, end, &h, &p, 0);
	if (ret < 0)
		cnt->nonlinear++;
	if (ret != 0)
		return XDP_PASS;
	cnt->matched++;
	h.pad2 = 0;
	h.ifindex = ctx->ingress_ifindex;
	h.hook = HOOK_XDP;
	__u32 len = bpf_xdp_get_buff_len(ctx);
	__u32 avail = len > p.pay_off ? len - p.pay_off : 0;
	__u32 wire = p.pay_len == 0xffffffff ? avail : p.pay_len;
	if (reply_done(ctx, 1, &p, &h, cnt, wire))
		return XDP_PASS;
	if (kc_on && !p.reply && kc_handle(ctx, 1, &h, p.pay_off, avail, wire))
		return XDP_PASS;
	int framed = kc_on && kc_bytes && (h.pad2 & (KC_REC_FRAMED | KC_REC_UNFRAMED));
	if (sample_skip(&h, &p)) {
		if (framed)
			kc_unsent(kc_cpu());
		return XDP_PASS;
	}
	__u32 uncopied = 0, tail = 0;
	if (p.reply && replies == REPLIES_HEADS) {
		reply_heads(&h, cnt, &p.pay_off, &avail, &wire, &uncopied, &tail);
	} else if (p.reply && replies == REPLIES_OFF) {
		// Count the reply's bytes and keep only its control flags.
		cnt->reply_bytes += wire;
		avail = wire = 0;
	}
	if (tail) {
		COPY_REPLY_TAIL(ctx, 1);
		return XDP_PASS;
	}
	if (copy_out_x(ctx, 1, cnt, &h, p.pay_off, avail, wire, uncopied) && framed)
		kc_unsent(kc_cpu());
	return XDP_PASS;
}

// cgroup_skb programs, attached once to the cgroup v2 root, see every
// socket's packets on the host whatever interface, namespace or tunnel
// they use, after decapsulation and before encapsulation. They must return
// 1: 0 would drop the packet, and programs of every cgroup on the path run
// and all must allow.
SEC("cgroup_skb/ingress")
int hotsniff_cgroup_ingress(struct __sk_buff *skb)
{
	handle_skb(skb, HOOK_CGROUP_INGRESS);
	return 1;
}

SEC("cgroup_skb/egress")
int hotsniff_cgroup_egress(struct __sk_buff *skb)
{
	handle_skb(skb, HOOK_CGROUP_EGRESS);
	return 1;
}
