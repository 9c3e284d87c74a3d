// Real redis-servers for the tests: started on free ports, stopped by the
// PID this module started (never by name).
import { spawn, spawnSync, ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';

export async function freePort(): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
    s.on('error', reject);
  });
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class Server {
  proc: ChildProcess | undefined;
  constructor(readonly port: number, readonly dir: string, readonly extra: string[]) {}

  static async start(extra: string[] = [], port?: number): Promise<Server> {
    const s = new Server(port ?? (await freePort()), fs.mkdtempSync(path.join(os.tmpdir(), 'hsnode')), extra);
    await s.run();
    return s;
  }

  async run(): Promise<void> {
    this.proc = spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--dir', this.dir, ...this.extra], { stdio: 'ignore' });
    for (let i = 0; ; i++) {
      if (await this.pingable()) return;
      if (i > 400) throw new Error(`redis-server on ${this.port} did not start`);
      await sleep(25);
    }
  }

  private pingable(): Promise<boolean> {
    return new Promise((resolve) => {
      const c = net.connect(this.port, '127.0.0.1');
      c.on('error', () => resolve(false));
      c.on('connect', () => c.write('PING\r\n'));
      c.on('data', (d) => { c.destroy(); resolve(d.toString().startsWith('+PONG')); });
    });
  }

  /** Stops the server this object started (SIGKILL: an outage, not a shutdown). */
  async stop(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null) return;
    const done = new Promise((r) => p.once('exit', r));
    p.kill('SIGKILL');
    await done;
    this.proc = undefined;
  }
}

/** A Redis Cluster of n masters on loopback, created with redis-cli. */
export class Cluster {
  constructor(readonly nodes: Server[]) {}

  static async start(n = 3): Promise<Cluster> {
    const nodes: Server[] = [];
    for (let i = 0; i < n; i++) nodes.push(await Server.start(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '5000']));
    const c = new Cluster(nodes);
    const r = spawnSync('redis-cli', ['--cluster', 'create', ...nodes.map((s) => `127.0.0.1:${s.port}`), '--cluster-replicas', '0', '--cluster-yes'], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`redis-cli --cluster create: ${r.stdout}${r.stderr}`);
    for (let i = 0; ; i++) {
      const ok = nodes.every((s) => /cluster_state:ok/.test(cli(s.port, 'CLUSTER', 'INFO')));
      if (ok) break;
      if (i > 400) throw new Error('cluster never became ok');
      await sleep(25);
    }
    return c;
  }

  async stop(): Promise<void> {
    for (const s of this.nodes) await s.stop();
  }
}

export function cli(port: number, ...args: string[]): string {
  const r = spawnSync('redis-cli', ['-p', String(port), ...args], { encoding: 'utf8' });
  return r.stdout;
}
