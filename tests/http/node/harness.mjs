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
