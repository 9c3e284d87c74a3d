// npm's prepare step. In a clone with the dev dependencies (npm ci) it
// builds dist/. Installed straight from the directory (npm install
// ./client/node), where TypeScript is not there, it says in one line what
// to run instead, rather than failing on a missing tsc.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');

const root = path.join(__dirname, '..');
let tsc;
try {
  tsc = require.resolve('typescript/bin/tsc', { paths: [root] });
} catch {
  if (fs.existsSync(path.join(root, 'dist', 'index.js'))) process.exit(0);
  console.error('hotsniff-shim is not built: run `npm ci && npm pack` in client/node, then `npm install <that directory>/hotsniff-shim-<version>.tgz` in your application');
  process.exit(1);
}
// From scratch: a file whose source is gone must not be packed.
fs.rmSync(path.join(root, 'dist'), { recursive: true, force: true });
execFileSync(process.execPath, [tsc, '-p', path.join(root, 'tsconfig.json')], { stdio: 'inherit' });
fs.copyFileSync(path.join(root, 'src', 'writes.json'), path.join(root, 'dist', 'writes.json'));
