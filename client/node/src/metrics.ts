// hotsniff_client_* metrics in prom-client's usual form: metrics registered
// on a Registry whose collect() reads the shim's counters at scrape time.
// No key is ever a label. prom-client is an optional peer dependency.

import type { Core } from './cache';
import { EVICT_REASONS, INVAL_REASONS } from './cache';
import { REASONS } from './subscriber';

/* eslint-disable @typescript-eslint/no-explicit-any */
export function registerMetrics(core: Core, registry?: any): void {
  const prom = require('prom-client');
  const registers = [registry ?? prom.register];
  const counter = (name: string, help: string, value: () => number) =>
    new prom.Counter({
      name: 'hotsniff_client_' + name, help, registers,
      collect(this: any) { this.reset(); this.inc(value()); },
    });
  const gauge = (name: string, help: string, value: () => number) =>
    new prom.Gauge({ name: 'hotsniff_client_' + name, help, registers, collect(this: any) { this.set(value()); } });
  const m = core.m;
  counter('hits_total', 'Reads of hot keys served from local memory with a fresh value.', () => m.hits);
  counter('stale_hits_total', 'Reads served the previous value while one caller refreshed it.', () => m.staleHits);
  counter('misses_total', 'Reads of hot keys that went to Redis.', () => m.misses);
  counter('admissions_total', 'Hot keys admitted to the local cache (on their second read).', () => m.admissions);
  counter('refreshes_total', "Fetches of a hot key's value from Redis by the single refreshing caller.", () => m.refreshes);
  counter('fetch_errors_total', 'Refreshes that failed.', () => m.fetchErrors);
  counter('absorbed_reports_total', 'Absorbed-demand reports sent after refresh reads.', () => m.absorbedReports);
  new prom.Counter({
    name: 'hotsniff_client_invalidations_total', help: 'Cached values dropped, by reason.', labelNames: ['reason'], registers,
    collect(this: any) {
      this.reset();
      for (const r of INVAL_REASONS) this.inc({ reason: r }, core.invalidations[r]);
    },
  });
  new prom.Counter({
    name: 'hotsniff_client_evictions_total', help: 'Entries removed from the local cache, by reason.', labelNames: ['reason'], registers,
    collect(this: any) {
      this.reset();
      for (const r of EVICT_REASONS) this.inc({ reason: r }, core.evictions[r]);
    },
  });
  gauge('entries', 'Keys in the local cache.', () => core.entries.size);
  gauge('hot_keys', 'Keys hot for this client (its servers and DB).', () => core.stats().hotKeys);
  gauge('hot_mode', '1 while in hot-running mode.', () => (core.active ? 1 : 0));
  gauge('tracking', '1 while server-assisted invalidation is established (not implemented in this shim).', () => 0);
  counter('snapshot_reloads_total', 'Snapshot loads by the channel subscriber.', () => core.sub.stats.reloads);
  counter('seq_gaps_total', 'Sequence gaps seen on the channel.', () => core.sub.stats.gaps);
  counter('channel_reconnects_total', 'Channel subscription reconnects.', () => core.sub.stats.reconnects);
  counter('channel_messages_total', 'Messages received on the channel.', () => core.sub.stats.messages);
  counter('uncacheable_total', 'Hashes found to have more than maxHashFields fields (by HLEN, never fetched whole); remembered for a minute.', () => m.uncacheable);
  gauge('bytes', 'Estimated bytes of the cached values (bounded by maxBytes).', () => core.bytes);
  new prom.Counter({
    name: 'hotsniff_client_bad_messages_total',
    help: 'Channel messages and snapshot entries rejected, by reason (too_large, out_of_range, undecodable, bad_signature, unconfirmed_seq, flapping).',
    labelNames: ['reason'], registers,
    collect(this: any) {
      this.reset();
      for (const r of REASONS) this.inc({ reason: r }, core.sub.bad[r]);
    },
  });
  gauge('channel_up', '1 while the channel is followed (subscribed and the snapshot read); 0 during an outage, when held keys are served on.', () => (core.sub.up ? 1 : 0));
  gauge('served_without_channel', 'Keys held and served while the channel is down (0 while it is up).', () => (core.sub.up ? 0 : core.stats().hotKeys));
}
