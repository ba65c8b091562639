// /metrics passes `promtool check metrics` (Prometheus's linter).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startServer, havePromtool, inCi, SKIP_MARKER } from './harness.mjs';

let server;
before(async () => {
  server = await startServer(['--lanes', '2', '-c', '256']);
});
after(async () => {
  await server?.stop();
});

test('/metrics passes promtool check metrics', async (t) => {
  if (!havePromtool()) {
    if (inCi) assert.fail('promtool is missing (scripts/setup.sh installs Debian package prometheus)');
    console.log(`${SKIP_MARKER}: promtool not installed (apt-get install --no-install-recommends prometheus)`);
    t.skip('promtool not installed');
    return;
  }
  const openai = server.client();
  // Put samples into the labelled families and histograms first.
  await openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, temperature: 0 });
  for await (const _ of await openai.completions.create({ model: 'm', prompt: 'x', max_tokens: 3, stream: true })) { /* drain */ }
  await fetch(`${server.origin}/v1/nope`);
  const r = await fetch(`${server.origin}/metrics`);
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
  const text = await r.text();
  for (const name of ['skippy_http_requests_total', 'skippy_time_to_first_token_seconds_bucket', 'skippy_kv_pool_blocks',
    'skippy_lanes_busy', 'skippy_cached_prompt_tokens_total']) {
    assert.ok(text.includes(name), `${name} missing`);
  }
  const check = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  assert.equal(check.status, 0, `promtool check metrics failed:\n${check.stdout}${check.stderr}`);
  assert.equal((check.stdout + check.stderr).trim(), '', `promtool lint findings:\n${check.stdout}${check.stderr}`);
});
