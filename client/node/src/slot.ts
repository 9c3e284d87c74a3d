// The Redis Cluster hash slot of a key, as the cluster specification
// defines it (and as the Go shim computes it): CRC16 (XMODEM) of the key, or
// of its hash tag (the part between the first '{' and the next '}' when not
// empty), modulo 16384. The key is in its binary-string form (keyString).

const TABLE = (() => {
  const t = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i << 8;
    for (let j = 0; j < 8; j++) c = c & 0x8000 ? ((c << 1) ^ 0x1021) & 0xffff : (c << 1) & 0xffff;
    t[i] = c;
  }
  return t;
})();

export function keySlot(key: string): number {
  let s = 0;
  let e = key.length;
  const open = key.indexOf('{');
  if (open >= 0) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) {
      s = open + 1;
      e = close;
    }
  }
  let c = 0;
  for (let i = s; i < e; i++) c = ((c << 8) & 0xffff) ^ TABLE[((c >> 8) ^ key.charCodeAt(i)) & 0xff];
  return c & 16383;
}
