package tair

// kind says how much of a frame the parser reads.
type kind uint8

const (
	kindUnknown        kind = iota // pcode not in the table
	kindOpaque                     // known, layout not needed: skipped by body_len, no keys
	kindGetFamily                  // server_flag, area, key_count, entries [+ trailer] (spec §4.2)
	kindSimpleGet                  // pcode 36 (spec §4.3)
	kindGetRange                   // pcode 18 (spec §4.4)
	kindPut                        // pcode 1
	kindIncDec                     // pcode 11
	kindLock                       // pcode 14
	kindPrefixPuts                 // pcode 24
	kindKeyed                      // server_flag, area, u32, entry: expire 2127, uniq_remove 38
	kindGetExpire                  // Java-only 1600 / 1702: u8, area, u32, key_count, entries
	kindFeedback                   // hot-key feedback push, 1123 / 1113 (spec §8.1)
	kindRespReturn                 // 101
	kindRespGet                    // 102
	kindRespPrefixGets             // 30
	kindRespMReturn                // 28
	kindFlowControl                // 9001
)

// trailer is what follows the entries of a get-family body.
type trailer uint8

const (
	trailNone     trailer = iota
	trailPacketID         // u32 packet_id when server_flag != 0 (25, 31)
	trailGroup            // string group_name, u32 is_sync (21, 23, 32, 33)
)

// pinfo describes one pcode. op is the Request.Op reported for it; it comes
// only from this table, so it is safe as a metric label.
type pinfo struct {
	op    string
	kind  kind
	write bool
	trail trailer
}

// requests is the client-to-server table (spec §4.1, §6; alibaba/tair
// base_packet.hpp and the Java client's TairConstant). Pcodes whose layout
// is not needed are kindOpaque: recognised, skipped by body_len.
var requests = map[int32]pinfo{
	1:  {op: "put", kind: kindPut, write: true},
	2:  {op: "get", kind: kindGetFamily},
	3:  {op: "remove", kind: kindGetFamily, write: true},
	4:  {op: "remove_area", kind: kindOpaque, write: true},
	5:  {op: "stat", kind: kindOpaque},
	6:  {op: "ping", kind: kindOpaque},
	7:  {op: "dump", kind: kindOpaque},
	8:  {op: "param", kind: kindOpaque},
	9:  {op: "heartbeat", kind: kindOpaque},
	11: {op: "incdec", kind: kindIncDec, write: true},
	13: {op: "mupdate", kind: kindOpaque, write: true},
	14: {op: "lock", kind: kindLock, write: true},
	15: {op: "mput", kind: kindOpaque, write: true},
	16: {op: "op_cmd", kind: kindOpaque},
	18: {op: "get_range", kind: kindGetRange},
	20: {op: "hide", kind: kindGetFamily, write: true},
	21: {op: "hide_by_proxy", kind: kindGetFamily, write: true, trail: trailGroup},
	22: {op: "get_hidden", kind: kindGetFamily},
	23: {op: "invalidate", kind: kindGetFamily, write: true, trail: trailGroup},
	24: {op: "prefix_puts", kind: kindPrefixPuts, write: true},
	25: {op: "prefix_removes", kind: kindGetFamily, write: true, trail: trailPacketID},
	26: {op: "prefix_incdec", kind: kindOpaque, write: true},
	29: {op: "prefix_gets", kind: kindGetFamily},
	31: {op: "prefix_hides", kind: kindGetFamily, write: true, trail: trailPacketID},
	32: {op: "prefix_invalids", kind: kindGetFamily, write: true, trail: trailGroup},
	33: {op: "prefix_hides_by_proxy", kind: kindGetFamily, write: true, trail: trailGroup},
	34: {op: "prefix_get_hiddens", kind: kindGetFamily},
	36: {op: "simple_prefix_gets", kind: kindSimpleGet},
	38: {op: "uniq_remove", kind: kindKeyed, write: true},

	1002: {op: "get_group", kind: kindOpaque},
	1003: {op: "get_server_table", kind: kindOpaque},
	1004: {op: "config_heartbeat", kind: kindOpaque},
	1005: {op: "set_master", kind: kindOpaque},
	1006: {op: "group_names", kind: kindOpaque},
	1009: {op: "query_info", kind: kindOpaque},
	1010: {op: "statistics", kind: kindOpaque},
	1011: {op: "admin_config", kind: kindOpaque},
	1012: {op: "non_down_ds", kind: kindOpaque},
	1113: {op: "feedback", kind: kindFeedback},
	1121: {op: "req_rt", kind: kindOpaque},
	1123: {op: "feedback", kind: kindFeedback},
	1200: {op: "dump_bucket", kind: kindOpaque},
	1201: {op: "migrate_finish", kind: kindOpaque},
	1202: {op: "recovery_finish", kind: kindOpaque},
	1299: {op: "batch_duplicate", kind: kindOpaque, write: true},
	1300: {op: "duplicate", kind: kindOpaque, write: true},
	1400: {op: "add_items", kind: kindOpaque, write: true},
	1401: {op: "get_items", kind: kindOpaque},
	1402: {op: "remove_items", kind: kindOpaque, write: true},
	1403: {op: "get_and_remove_items", kind: kindOpaque, write: true},
	1404: {op: "get_items_count", kind: kindOpaque},
	1406: {op: "retry_all", kind: kindOpaque},
	1407: {op: "inval_stat", kind: kindOpaque},
	1500: {op: "dataserver_ctrl", kind: kindOpaque},
	1501: {op: "get_migrate_machine", kind: kindOpaque},
	1600: {op: "get_expire", kind: kindGetExpire},
	1702: {op: "get_modify_date", kind: kindGetExpire},
	1704: {op: "incdec_bounded", kind: kindOpaque, write: true},
	1706: {op: "prefix_incdec_bounded", kind: kindOpaque, write: true},
	2000: {op: "sync", kind: kindOpaque, write: true},
	2127: {op: "expire", kind: kindKeyed, write: true},
	2222: {op: "mc_ops", kind: kindOpaque, write: true},
	9000: {op: "stat_cmd_view", kind: kindOpaque},
	9002: {op: "flow_control_set", kind: kindOpaque},
	9003: {op: "flow_view", kind: kindOpaque},
	9005: {op: "flow_check", kind: kindOpaque},
}

// responses is the server-to-client table (spec §7, §8). Only the layouts
// that are cheap to check are validated; the rest are skipped by body_len.
var responses = map[int32]pinfo{
	17:   {op: "resp_op_cmd", kind: kindOpaque},
	19:   {op: "resp_get_range", kind: kindOpaque},
	27:   {op: "resp_prefix_incdec", kind: kindOpaque},
	28:   {op: "resp_mreturn", kind: kindRespMReturn},
	30:   {op: "resp_prefix_gets", kind: kindRespPrefixGets},
	35:   {op: "resp_mreturn_dup", kind: kindOpaque},
	37:   {op: "resp_simple_get", kind: kindOpaque},
	101:  {op: "resp_return", kind: kindRespReturn},
	102:  {op: "resp_get", kind: kindRespGet},
	103:  {op: "resp_stat", kind: kindOpaque},
	104:  {op: "resp_heartbeat", kind: kindOpaque},
	105:  {op: "resp_incdec", kind: kindOpaque},
	1102: {op: "resp_get_group", kind: kindOpaque},
	1103: {op: "resp_get_server_table", kind: kindOpaque},
	1104: {op: "resp_group_names", kind: kindOpaque},
	1106: {op: "resp_query_info", kind: kindOpaque},
	1113: {op: "feedback", kind: kindFeedback},
	1123: {op: "feedback", kind: kindFeedback},
	1301: {op: "resp_duplicate", kind: kindOpaque},
	1302: {op: "resp_get_migrate_machine", kind: kindOpaque},
	1405: {op: "resp_get_items", kind: kindOpaque},
	1408: {op: "resp_inval_stat", kind: kindOpaque},
	9001: {op: "flow_control", kind: kindFlowControl},
	9004: {op: "resp_flow_view", kind: kindOpaque},
}

// Op names chosen by the shape of a get-family request rather than its pcode
// alone: pcode 2 carries get, mget and prefix_get; 22 carries get_hidden and
// the C++ prefix_get_hidden.
const (
	opMGet            = "mget"
	opPrefixGet       = "prefix_get"
	opPrefixGetHidden = "prefix_get_hidden"
	opDelRange        = "del_range"
	opLockStatus      = "lock_status"
	opUnknown         = "unknown"
)

// table is a dense copy of a map for the pcodes that matter on the hot path,
// so the per-request lookup is an index, not a map probe.
type table struct {
	small [128]pinfo
	rest  map[int32]pinfo
}

func newTable(m map[int32]pinfo) *table {
	t := &table{rest: make(map[int32]pinfo)}
	for pc, in := range m {
		if pc >= 0 && int(pc) < len(t.small) {
			t.small[pc] = in
		} else {
			t.rest[pc] = in
		}
	}
	return t
}

func (t *table) get(pcode int32) pinfo {
	if pcode >= 0 && int(pcode) < len(t.small) {
		return t.small[pcode]
	}
	return t.rest[pcode]
}

var (
	requestTable  = newTable(requests)
	responseTable = newTable(responses)
)
