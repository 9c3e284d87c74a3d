#!/bin/sh
# Regenerates the real captures in this directory (see README.md). Needs root
# (tcpdump/dumpcap on lo), redis-server, redis-cli, redis-benchmark, editcap.
# Only loopback traffic to a private redis-server is captured.
set -eu
cd "$(dirname "$0")"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
TMP=$(mktemp -d)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" --protected-mode no >/dev/null &
RPID=$!
trap 'kill $RPID 2>/dev/null; rm -rf "$TMP"' EXIT
sleep 0.5

traffic() {
	redis-cli -p "$PORT" SET item:1 hello >/dev/null
	redis-cli -p "$PORT" GET item:1 >/dev/null
	redis-cli -p "$PORT" MGET item:1 item:2 "key with space" >/dev/null
	redis-benchmark -p "$PORT" -c 1 -n 64 -P 16 -t get -q >/dev/null
}

# capture OUT ARGS...: runs tcpdump with ARGS around one round of traffic.
capture() {
	out=$1; shift
	tcpdump -U -n --immediate-mode "$@" -w "$TMP/cap" "tcp port $PORT" 2>"$TMP/log" &
	tpid=$!
	until grep -q listening "$TMP/log"; do sleep 0.1; done
	traffic
	sleep 1.5
	kill -INT $tpid; wait $tpid || true
	mv "$TMP/cap" "$out"
}

capture redis-eth.pcap -i lo
capture redis-sll.pcap -i any -y LINUX_SLL
capture redis-sll2-nano.pcap -i any -y LINUX_SLL2 --time-stamp-precision nano
# pcapng with two interfaces of different link types (lo: Ethernet, any:
# SLL2), so every packet appears twice.
dumpcap -q -f "tcp port $PORT" -i lo -i any -y LINUX_SLL2 -w "$TMP/cap.pcapng" 2>"$TMP/log" &
dpid=$!
sleep 2
traffic
sleep 0.5
kill -INT $dpid; wait $dpid || true
mv "$TMP/cap.pcapng" redis-lo-any.pcapng
# The Ethernet capture converted to pcapng with nanosecond resolution, then
# gzipped under a name without .gz: content, not names, decides.
editcap -F pcapng redis-eth.pcap "$TMP/eth.pcapng"
gzip -9 -n -c "$TMP/eth.pcapng" > redis-eth-gzipped.pcapng

# Golden files: tshark's view of every TCP packet, the independent truth the
# tests compare against.
for f in redis-eth.pcap redis-sll.pcap redis-sll2-nano.pcap redis-lo-any.pcapng redis-eth-gzipped.pcapng; do
	tshark -r "$f" -Y tcp -T fields -E separator=/t \
		-e frame.time_epoch -e ip.src -e ipv6.src -e tcp.srcport -e ip.dst -e ipv6.dst -e tcp.dstport \
		-e tcp.seq_raw -e tcp.ack_raw -e tcp.flags -e tcp.len -e tcp.payload > "$f.tshark.tsv"
done
