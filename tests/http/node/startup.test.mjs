// `skippy serve` logs load progress and a startup line with the resolved configuration.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './harness.mjs';

test('load progress lines, then the resolved configuration on the startup line', async () => {
  const server = await startServer(['--lanes', '3', '--queue', '5', '-c', '256', '--kv-cache', 'record', '--stages', '2']);
  try {
    const log = server.stderr();
    // Progress: percentages of the weights read, ascending, ending at 100%.
    const percents = [...log.matchAll(/loading weights: (\d+)% \([\d.]+ of [\d.]+ MiB, (\d+) of (\d+) tensors\)/g)];
    assert.ok(percents.length >= 2, `no load progress lines in:\n${log}`);
    const values = percents.map((m) => Number(m[1]));
    assert.deepEqual(values, [...values].sort((a, b) => a - b));
    assert.equal(values.at(-1), 100);
    const last = percents.at(-1);
    assert.equal(last[2], last[3], 'every tensor read at 100%');
    assert.ok(log.indexOf('loading weights: 100%') < log.indexOf('listening on'));

    const line = log.split('\n').find((l) => l.includes('listening on'));
    assert.ok(line.includes(`listening on http://127.0.0.1:${server.port} (`), line);
    assert.match(line, /\bstages 2,/);
    assert.match(line, /\blanes 3,/);
    assert.match(line, /\bctx 256,/);
    assert.match(line, /\bqueue 5,/);
    assert.match(line, /\bprefix cache record,/);
    assert.match(line, /\bthreads 1,/);
    // The line tells the truth: the server runs with it.
    const r = await fetch(`${server.origin}/metrics`);
    const text = await r.text();
    assert.match(text, /^skippy_lanes 3$/m);
    assert.match(text, /^skippy_queue_capacity_requests 5$/m);
  } finally {
    await server.stop();
  }
});

test('a chat template that does not parse stops serve at startup, naming the construct', async () => {
  const { spawnSync } = await import('node:child_process');
  const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const dir = mkdtempSync(join(tmpdir(), 'skippy-template-'));
  try {
    const bad = join(dir, 'bad.jinja');
    writeFileSync(bad, '{% for m in messages %}{{ m.content }}{% endfor %}\n{% extends "base.html" %}\n');
    const r = spawnSync(process.env.SKIPPY_BINARY, ['serve', '-m', process.env.SKIPPY_HTTP_MODEL, '--port', '0',
      '--chat-template', bad], { encoding: 'utf8', timeout: 60000 });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /line 2, column \d+: .*'extends'/);
    const named = spawnSync(process.env.SKIPPY_BINARY, ['serve', '-m', process.env.SKIPPY_HTTP_MODEL, '--port', '0',
      '--chat-template', 'no-such-template'], { encoding: 'utf8', timeout: 60000 });
    assert.notEqual(named.status, 0);
    assert.match(named.stderr, /neither a built-in template/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the startup line names the chat template in use', async () => {
  const server = await startServer(['--lanes', '1', '--chat-template', 'chatml']);
  try {
    assert.match(server.stderr().split('\n').find((l) => l.includes('listening on')), /chat template builtin chatml,/);
  } finally {
    await server.stop();
  }
});
