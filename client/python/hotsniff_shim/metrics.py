"""Prometheus metrics in prometheus_client's collector form; no key is ever a
label. prometheus_client is optional: without it, ``Shim.stats()`` still
has every counter."""

from __future__ import annotations

from typing import Iterator


def collect(shim) -> Iterator:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    st = shim.stats()

    def c(name, doc, value):
        return CounterMetricFamily("hotsniff_client_" + name, doc, value=value)

    yield c("hits", "Reads of hot keys served from local memory with a fresh value.", st["hits"])
    yield c("stale_hits", "Reads served the previous value while one caller refreshed it.", st["stale_hits"])
    yield c("misses", "Reads of hot keys that went to Redis.", st["misses"])
    yield c("admissions", "Hot keys admitted to the local cache (on their second read).", st["admissions"])
    yield c("refreshes", "Fetches of a hot key's value from Redis by the single refreshing caller.", st["refreshes"])
    yield c("fetch_errors", "Refreshes that failed.", st["fetch_errors"])
    yield c("absorbed_reports", "Absorbed-demand reports sent after refresh reads.", st["absorbed_reports"])
    inv = CounterMetricFamily("hotsniff_client_invalidations", "Cached values dropped, by reason.", labels=["reason"])
    for r, v in st["invalidations"].items():
        inv.add_metric([r], v)
    yield inv
    ev = CounterMetricFamily("hotsniff_client_evictions", "Entries removed from the local cache, by reason.", labels=["reason"])
    for r, v in st["evictions"].items():
        ev.add_metric([r], v)
    yield ev
    yield GaugeMetricFamily("hotsniff_client_entries", "Keys in the local cache.", value=st["entries"])
    yield GaugeMetricFamily("hotsniff_client_hot_keys", "Keys hot for this client (its servers and DB).", value=st["hot_keys"])
    yield GaugeMetricFamily("hotsniff_client_hot_mode", "1 while in hot-running mode.", value=1 if st["hot_mode"] else 0)
    yield GaugeMetricFamily("hotsniff_client_tracking", "1 while server-assisted invalidation is established (not implemented in this shim).", value=0)
    yield c("snapshot_reloads", "Snapshot loads by the channel subscriber.", st["channel_reloads"])
    yield c("seq_gaps", "Sequence gaps seen on the channel.", st["channel_gaps"])
    yield c("channel_reconnects", "Channel subscription reconnects.", st["channel_reconnects"])
    yield c("channel_messages", "Messages received on the channel.", st["channel_messages"])
    bad = CounterMetricFamily("hotsniff_client_bad_messages", "Channel messages and snapshot entries rejected, by reason.", labels=["reason"])
    for r, v in st["bad_messages"].items():
        bad.add_metric([r], v)
    yield bad
    yield GaugeMetricFamily("hotsniff_client_channel_up", "1 while the hot-key channel is followed.", value=1 if st["channel_up"] else 0)
    yield GaugeMetricFamily("hotsniff_client_served_without_channel", "Cached keys served on while the channel is down.", value=st["keys_without_channel"])
    yield GaugeMetricFamily("hotsniff_client_bytes", "Bytes held by the local cache (keys, values, overhead).", value=st["bytes"])
    yield c("uncacheable", "Keys found too big to cache (hashes over max_hash_fields by HLEN).", st["uncacheable"])
    yield c("too_large_values", "Values over max_value_bytes, not cached.", st["too_large_values"])
    yield c("absorbed_hits", "Local reads carried by absorbed-demand reports.", st["absorbed_hits"])
    yield GaugeMetricFamily("hotsniff_client_absorbed_reporting", "1 while absorbed-demand reports are sent.", value=1 if st["absorbed_reporting"] else 0)
    yield c("namespace_passes", "Hot reads passed to Redis because a connection was on another DB.", st["namespace_passes"])
