// Starts and stops `skippy serve` for the integration tests, and small helpers.
//
// Environment (set by tests/http/CMakeLists.txt):
//   SKIPPY_BINARY       the skippy executable
//   SKIPPY_HTTP_MODEL   the test model (made by `skippy make-model`)
//   SKIPPY_TEST_DATA    the shared test data folder (for the stories260K test)
//   CI                  set under CI: a missing prerequisite fails instead of skipping
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { once } from 'node:events';
import OpenAI from 'openai';

export const inCi = !!process.env.CI && process.env.CI !== '0' && process.env.CI !== 'false';

// CTest marks a test skipped when its output holds this word (SKIP_REGULAR_EXPRESSION).
export const SKIP_MARKER = 'SKIPPY_TEST_SKIPPED';

// Starts `skippy serve` on a free loopback port; resolves once its startup line names
// the port. `args` are extra flags (e.g. ['--lanes', '1']).
export async function startServer(args = [], { model = process.env.SKIPPY_HTTP_MODEL } = {}) {
  const bin = process.env.SKIPPY_BINARY;
  if (!bin || !existsSync(bin)) throw new Error(`SKIPPY_BINARY (${bin}) does not exist`);
  if (!model || !existsSync(model)) throw new Error(`model ${model} does not exist`);
  const child = spawn(bin, ['serve', '-m', model, '--host', '127.0.0.1', '--port', '0', '-t', '1', ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no startup line after 60 s:\n${stderr}`)), 60000);
    child.stderr.on('data', (d) => {
      stderr += d;
      const m = stderr.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`skippy serve exited (${code}) before listening:\n${stderr}`));
    });
  });
  const origin = `http://127.0.0.1:${port}`;
  return {
    port,
    origin,
    baseURL: `${origin}/v1`,
    stderr: () => stderr,
    // The official client, without retries: a 429 or 503 must reach the test.
    client: (opts = {}) => new OpenAI({ baseURL: `${origin}/v1`, apiKey: 'sk-unused', maxRetries: 0, timeout: 120000, ...opts }),
    async stop() {
      if (child.exitCode !== null) throw new Error(`server already exited (${child.exitCode}):\n${stderr}`);
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      const [code] = await exited;
      if (code !== 0) throw new Error(`skippy serve exited with ${code} on SIGTERM:\n${stderr}`);
    },
  };
}

// The value of one sample of /metrics ("name{labels}" exactly as rendered), or 0.
export async function metricValue(server, sample) {
  const text = await (await fetch(`${server.origin}/metrics`)).text();
  for (const line of text.split('\n')) {
    if (line.startsWith(sample + ' ')) return Number(line.slice(sample.length + 1));
  }
  return 0;
}

// Polls `pred` (async) until true or `ms` pass; returns its last value.
export async function eventually(pred, ms = 10000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await pred();
    if (v || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 10));
  }
}

// Checks an OpenAI error object body.
export function assertErrorBody(assert, body, status) {
  assert.ok(body && typeof body === 'object' && body.error, `status ${status}: no error object in ${JSON.stringify(body)}`);
  assert.equal(typeof body.error.message, 'string');
  assert.ok(body.error.message.length > 0);
  assert.equal(typeof body.error.type, 'string');
  assert.ok('param' in body.error, 'error.param missing');
  assert.ok('code' in body.error, 'error.code missing');
}

export function havePromtool() {
  return spawnSync('promtool', ['--version']).status === 0;
}

// n distinct TCP ports free on 127.0.0.1 right now (closed again before return). As
// tests/common/test_data.cpp's free_port(): random ports below the kernel's ephemeral
// range, where no bind(0) or outgoing connection of a test running beside this one
// can take them first; and all n are held open at once while they are picked (one
// probe after another may get the same port back: a CI run failed on "endpoint
// 127.0.0.1:45473 is used twice").
export async function freePorts(n) {
  const { createServer } = await import('node:net');
  const { readFileSync } = await import('node:fs');
  let rangeStart = 32768;
  try {
    rangeStart = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || rangeStart;
  } catch {
    // not Linux: the default
  }
  const lowest = 10000;
  const listen = (port) => new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(null));
    srv.listen(port, '127.0.0.1', () => resolve(srv));
  });
  const servers = [];
  try {
    for (let attempt = 0; servers.length < n && attempt < 100 * n; ++attempt) {
      const random = rangeStart > lowest + 1000 && attempt < 99 * n;
      const port = random ? lowest + Math.floor(Math.random() * (rangeStart - lowest)) : 0;
      const srv = await listen(port);
      if (srv !== null) servers.push(srv);
    }
    if (servers.length < n) throw new Error(`found ${servers.length} of ${n} free ports`);
    return servers.map((srv) => srv.address().port);
  } finally {
    await Promise.all(servers.map((srv) => new Promise((resolve) => srv.close(resolve))));
  }
}

// Starts `skippy serve-stage --topology T --stage I` (extra flags in `args`); resolves
// once its log line `waitFor` (a RegExp) appears, with the match.
export async function startStage(topology, index, args = [], waitFor = /listening on/) {
  const bin = process.env.SKIPPY_BINARY;
  const child = spawn(bin, ['serve-stage', '--topology', topology, '--stage', String(index), '-t', '1', ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  const match = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`stage ${index}: no ${waitFor} after 60 s:\n${stderr}`)), 60000);
    child.stderr.on('data', (d) => {
      stderr += d;
      const m = stderr.match(waitFor);
      if (m) {
        clearTimeout(timer);
        resolve(m);
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`skippy serve-stage exited (${code}) before ${waitFor}:\n${stderr}`));
    });
  });
  return {
    match,
    stderr: () => stderr,
    async stop() {
      if (child.exitCode !== null) throw new Error(`stage ${index} already exited (${child.exitCode}):\n${stderr}`);
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      const [code] = await exited;
      if (code !== 0) throw new Error(`skippy serve-stage exited with ${code} on SIGTERM:\n${stderr}`);
    },
  };
}

// The samples of a Prometheus text exposition: Map "name{labels}" -> number.
export function parseMetrics(text) {
  const out = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return out;
}

// Runs `promtool check metrics` on `text` when promtool is installed; returns false
// when it is not (a note, not the skip marker: the rest of the test still counts),
// failing under CI.
export function promtoolCheck(assert, text) {
  if (!havePromtool()) {
    if (inCi) assert.fail('promtool is missing (scripts/setup.sh installs Debian package prometheus)');
    console.log('promtool not installed: exposition not linted (apt-get install --no-install-recommends prometheus)');
    return false;
  }
  const check = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  assert.equal(check.status, 0, `promtool check metrics failed:\n${check.stdout}${check.stderr}`);
  assert.equal((check.stdout + check.stderr).trim(), '', `promtool lint findings:\n${check.stdout}${check.stderr}`);
  return true;
}
