// A client that goes away cancels its generation and frees its lane at once.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, eventually, metricValue } from './harness.mjs';

const maxTokens = 8000;  // far more than is generated before the client leaves
let server;
let openai;
before(async () => {
  server = await startServer(['--lanes', '1', '--queue', '4', '-c', '8192']);
  openai = server.client();
});
after(async () => {
  await server?.stop();
});

const cancelled = (endpoint) =>
  metricValue(server, `skippy_generation_requests_total{endpoint="${endpoint}",finish_reason="cancelled"}`);

test('a dropped stream frees the only lane for the next request', async () => {
  const controller = new AbortController();
  const stream = await openai.chat.completions.create(
    { model: 'm', messages: [{ role: 'user', content: 'Go on forever' }], max_tokens: maxTokens, temperature: 0,
      logit_bias: { 2: -100 }, stream: true },
    { signal: controller.signal });
  const it = stream[Symbol.asyncIterator]();
  for (let got = ''; got.length === 0;) {
    const { value } = await it.next();
    got += value.choices[0]?.delta?.content ?? '';
  }
  controller.abort();
  await it.next().catch(() => {});  // ends or throws, depending on the client version

  // The next request gets the lane and completes.
  const next = await openai.completions.create({ model: 'm', prompt: 'next', max_tokens: 4, temperature: 0, logit_bias: { 2: -100 } });
  assert.equal(next.usage.completion_tokens, 4);
  assert.equal(await cancelled('chat_completions'), 1);
  assert.ok(await metricValue(server, 'skippy_generated_tokens_total') < maxTokens);
});

test('a dropped non-streaming request frees the only lane for the next request', async () => {
  const before = await metricValue(server, 'skippy_generated_tokens_total');
  const controller = new AbortController();
  const pending = openai.completions.create(
    { model: 'm', prompt: 'Go on forever', max_tokens: maxTokens, temperature: 0, logit_bias: { 2: -100 } },
    { signal: controller.signal });
  assert.ok(await eventually(async () => (await metricValue(server, 'skippy_lanes_busy')) === 1), 'never got a lane');
  controller.abort();
  await assert.rejects(pending);

  const next = await openai.completions.create({ model: 'm', prompt: 'next', max_tokens: 4, temperature: 0, logit_bias: { 2: -100 } });
  assert.equal(next.usage.completion_tokens, 4);
  assert.ok(await eventually(async () => (await cancelled('completions')) === 1));
  assert.ok((await metricValue(server, 'skippy_generated_tokens_total')) - before < maxTokens);
});
