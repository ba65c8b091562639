// `skippy serve` over a chain: --stages 2 (stages in one process) and --topology with a
// `skippy serve-stage` process (which also serves its own /metrics). Greedy outputs
// equal --stages 1, a repeated prefix is served from the cache, and an over-long
// prompt_cache_key is refused the same way on every topology.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer, startStage, freePorts, parseMetrics, promtoolCheck, assertErrorBody } from './harness.mjs';

const flags = ['--lanes', '2', '-c', '1024'];
// A prefix long enough for the cache (--kv-cache-min-tokens) whatever the question.
const system = 'You are a careful assistant. ' + 'Follow the house rules exactly and answer in one line. '.repeat(12);
const questions = ['What is the first rule?', 'And the second one?', 'Name a colour.'];

// The test model has random weights: ban its EOS (id 2) so that outputs run to max_tokens.
async function ask(server, q, extra = {}) {
  return server.client().chat.completions.create({
    model: 'm', messages: [{ role: 'system', content: system }, { role: 'user', content: q }], max_tokens: 12,
    temperature: 0, logit_bias: { 2: -100 }, ...extra,
  });
}

// What every topology must answer: the greedy texts of `questions` (one at a time).
async function answers(server) {
  const out = [];
  for (const q of questions) out.push(await ask(server, q));
  return out;
}

async function assertLongCacheKeyRefused(server) {
  const r = await fetch(`${server.baseURL}/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 1, prompt_cache_key: 'k'.repeat(300) }),
  });
  const body = await r.json();
  assert.equal(r.status, 400);
  assertErrorBody(assert, body, r.status);
  assert.equal(body.error.param, 'prompt_cache_key');
  assert.equal(body.error.code, 'string_above_max_length');
  assert.match(body.error.message, /256 bytes/);
  // At the limit it is accepted.
  const ok = await ask(server, 'hi', { prompt_cache_key: 'k'.repeat(256), max_tokens: 1 });
  assert.equal(ok.choices[0].finish_reason, 'length');
}

let reference;  // answers of --stages 1
before(async () => {
  const one = await startServer(flags);
  try {
    reference = await answers(one);
    await assertLongCacheKeyRefused(one);
  } finally {
    await one.stop();
  }
  assert.ok(reference.every((r) => r.choices[0].message.content.length > 0));
  assert.ok(new Set(reference.map((r) => r.choices[0].message.content)).size > 1, 'the comparison would be vacuous');
});

test('serve --stages 2 answers as --stages 1 and serves a repeated prefix from the cache', async () => {
  const server = await startServer([...flags, '--stages', '2']);
  try {
    assert.match(server.stderr(), /listening on http:\/\/127\.0\.0\.1:\d+ \(model \S+, stages 2,/);
    assert.match(server.stderr(), /2 stage\(s\) in this process/);
    const got = await answers(server);
    for (let i = 0; i < questions.length; i++) {
      assert.equal(got[i].choices[0].message.content, reference[i].choices[0].message.content, questions[i]);
      assert.equal(got[i].usage.prompt_tokens, reference[i].usage.prompt_tokens);
    }
    assert.equal(got[0].usage.prompt_tokens_details.cached_tokens, 0);
    const cached = got[1].usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached > 0 && cached < got[1].usage.prompt_tokens, `cached_tokens ${cached} on a repeated prefix`);
    await assertLongCacheKeyRefused(server);
    // Both in-process stages report on stage 0's /metrics.
    const m = parseMetrics(await (await fetch(`${server.origin}/metrics`)).text());
    assert.ok(m.get('skippy_kv_pool_blocks{stage="0"}') > 0);
    assert.ok(m.get('skippy_kv_pool_blocks{stage="1"}') > 0);
    assert.ok(m.get('skippy_cache_hits_total{stage="1",tier="resident"}') > 0);
  } finally {
    await server.stop();
  }
});

test('serve --topology with a serve-stage process answers; the stage serves its own /metrics', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'skippy-http-topo-'));
  let stage;
  let server;
  try {
    // split-plan chooses the layers; the endpoints get free loopback ports.
    const plan = spawnSync(process.env.SKIPPY_BINARY, ['split-plan', '-m', process.env.SKIPPY_HTTP_MODEL, '--stages', '2'],
      { encoding: 'utf8' });
    assert.equal(plan.status, 0, plan.stderr);
    const topo = JSON.parse(plan.stdout);
    assert.equal(topo.stages.length, 2);
    const ports = await freePorts(topo.stages.length + 1);
    topo.stages.forEach((s, i) => { s.endpoint = `127.0.0.1:${ports[i]}`; });
    const topoPath = join(dir, 'topology.json');
    writeFileSync(topoPath, JSON.stringify(topo));

    const metricsPort = ports[topo.stages.length];
    stage = await startStage(topoPath, 1, ['--lanes', '2', '-c', '1024', '--metrics-port', String(metricsPort)],
      /metrics on (http:\/\/127\.0\.0\.1:\d+)\/metrics/);
    const stageMetricsUrl = `${stage.match[1]}/metrics`;
    assert.equal(stageMetricsUrl, `http://127.0.0.1:${metricsPort}/metrics`);
    const scrape = async () => {
      const r = await fetch(stageMetricsUrl);
      assert.equal(r.status, 200);
      assert.match(r.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
      return r.text();
    };
    const before = parseMetrics(await scrape());
    assert.ok(before.get('skippy_kv_pool_blocks{stage="1"}') > 0);
    assert.equal(before.get('skippy_kv_pool_used_blocks{stage="1"}'), 0);
    assert.equal(before.get('skippy_cache_misses_total{stage="1",tier="resident"}'), 0);
    assert.ok(![...before.keys()].some((k) => k.includes('stage="0"')), 'stage 0 reported by the stage 1 process');
    assert.ok(!before.has('skippy_lanes'), 'front-end families belong to skippy serve');

    server = await startServer([...flags, '--topology', topoPath]);
    assert.match(server.stderr(), /2 stage\(s\) \(stage 0 in this process\)/);
    assert.match(server.stderr(), /listening on http:\/\/127\.0\.0\.1:\d+ \(model \S+, stages 2 from /);
    const got = await answers(server);
    for (let i = 0; i < questions.length; i++) {
      assert.equal(got[i].choices[0].message.content, reference[i].choices[0].message.content, questions[i]);
    }
    assert.ok(got[1].usage.prompt_tokens_details.cached_tokens > 0);
    await assertLongCacheKeyRefused(server);

    // The stage's counters moved with the requests that went through the chain.
    const text = await scrape();
    promtoolCheck(assert, text);
    const after = parseMetrics(text);
    const v = (name, tier) => after.get(`${name}{stage="1",tier="${tier}"}`) ?? 0;
    assert.ok(v('skippy_cache_hits_total', 'resident') > 0, text);
    assert.ok(v('skippy_cache_misses_total', 'resident') > 0, text);
    assert.ok(v('skippy_cache_entries', 'resident') > 0, text);
    // Per-tier truth: what resident did not serve reached exact_state.
    assert.equal(v('skippy_cache_misses_total', 'resident'),
      v('skippy_cache_hits_total', 'exact_state') + v('skippy_cache_misses_total', 'exact_state'));
    assert.ok(after.get('skippy_kv_pool_used_blocks{stage="1"}') > 0, 'cached prefixes hold blocks');
    // Stage 0's /metrics covers the stage in its own process only.
    const front = parseMetrics(await (await fetch(`${server.origin}/metrics`)).text());
    assert.ok(front.get('skippy_kv_pool_blocks{stage="0"}') > 0);
    assert.ok(!front.has('skippy_kv_pool_blocks{stage="1"}'));
  } finally {
    await server?.stop();
    await stage?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
