// Which keys a command writes, from redis-server's COMMAND key specs.
// writes.json is generated from the same table the Go shim uses (see
// tools/gen/shimwrites), so every shim drops the same keys on the same
// writes; FLUSHDB, FLUSHALL and SWAPDB drop everything. Commands the table
// does not know (modules) are not writes: the shim caches strings and hashes.

import table from './writes.json';

interface Spec {
  begin: 'index' | 'keyword';
  index?: number;
  keyword?: string;
  startfrom?: number;
  find: 'range' | 'keynum';
  lastkey?: number;
  step: number;
  limit?: number;
  keynumidx?: number;
  firstkey?: number;
}
interface Cmd { all?: boolean; sort_store?: boolean; specs?: Spec[] }

const TABLE = (table as unknown as { commands: Record<string, Cmd> }).commands;

export type Arg = string | Buffer | number;

const argStr = (a: Arg): string => (Buffer.isBuffer(a) ? a.toString('latin1') : String(a));

function keywordPos(args: readonly Arg[], keyword: string, start: number): number {
  const kw = keyword.toUpperCase();
  if (start >= 0) {
    for (let i = Math.max(start, 1); i < args.length; i++) if (argStr(args[i]).toUpperCase() === kw) return i;
    return -1;
  }
  for (let i = args.length + start; i >= 1; i--) if (argStr(args[i]).toUpperCase() === kw) return i;
  return -1;
}

/** The command's table entry (undefined: writes no key). */
export function writeSpec(name: string): Cmd | undefined {
  return TABLE[name.toUpperCase()];
}

/** The arguments a command may modify as keys, and whether every cached
 * value must go (the keys cannot be told). args[0] is the command name. */
export function writtenKeys(args: readonly Arg[]): { keys: Arg[]; all: boolean } {
  const keys: Arg[] = [];
  if (args.length === 0) return { keys, all: false };
  const c = TABLE[argStr(args[0]).toUpperCase()];
  if (!c) return { keys, all: false };
  if (c.all) return { keys, all: true };
  const argc = args.length;
  if (c.sort_store) {
    const p = keywordPos(args, 'STORE', 2);
    if (p >= 0 && p + 1 < argc) keys.push(args[p + 1]);
  }
  for (const ks of c.specs ?? []) {
    let first: number;
    if (ks.begin === 'index') {
      first = ks.index ?? 0;
    } else {
      first = keywordPos(args, ks.keyword!, ks.startfrom ?? 0);
      if (first < 0) continue; // the optional keyword is absent: no key
      first++;
    }
    if (first <= 0 || first >= argc) continue;
    const step = Math.max(ks.step ?? 1, 1);
    let last: number;
    if (ks.find === 'range') {
      const lk = ks.lastkey ?? 0, limit = ks.limit ?? 0;
      if (lk >= 0) last = first + lk;
      else if (limit > 0) last = first + Math.floor((argc - first) / limit) - 1;
      else last = argc + lk;
    } else {
      const ni = first + (ks.keynumidx ?? 0);
      if (ni >= argc) continue;
      const n = Number.parseInt(argStr(args[ni]), 10);
      if (!Number.isFinite(n) || n < 0) continue;
      first += ks.firstkey ?? 0;
      last = first + (n - 1) * step;
    }
    last = Math.min(last, argc - 1);
    for (let i = first; i <= last; i += step) keys.push(args[i]);
  }
  return { keys, all: false };
}
