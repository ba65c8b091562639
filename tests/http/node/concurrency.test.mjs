// 8 concurrent streams over 4 lanes give the same greedy outputs as one at a time, and
// the server's high-water marks prove that they overlapped: 4 lanes busy and 4 requests
// waiting at one time.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, metricValue } from './harness.mjs';

let server;
let openai;
before(async () => {
  server = await startServer(['--lanes', '4', '--queue', '16', '-c', '512']);
  openai = server.client();
});
after(async () => {
  await server?.stop();
});

const prompts = [
  'Once upon a time',
  'The quick brown fox',
  'In a galaxy far away',
  'Write a poem about rain',
  'What is the capital of France?',
  'List three colours',
  'hello hello hello',
  'A long time ago, in a small village by the sea, there lived an old fisherman',
];

// Long enough that the first four are still generating when the last four arrive
// (the client sends all eight at once): the peaks below check that it was so.
const maxTokens = 400;

async function streamChat(content) {
  const stream = await openai.chat.completions.create({
    model: 'm', messages: [{ role: 'user', content }], max_tokens: maxTokens, temperature: 0,
    logit_bias: { 2: -100 }, stream: true,
  });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish };
}

test('8 concurrent greedy streams over 4 lanes equal the same prompts one at a time', async () => {
  const sequential = [];
  for (const p of prompts) sequential.push(await streamChat(p));
  // One at a time: one lane at most, nobody waited.
  assert.equal(await metricValue(server, 'skippy_lanes_busy_peak'), 1);
  assert.equal(await metricValue(server, 'skippy_queue_waiting_peak_requests'), 0);

  const concurrent = await Promise.all(prompts.map((p) => streamChat(p)));
  for (let i = 0; i < prompts.length; i++) {
    assert.equal(sequential[i].finish, 'length');
    assert.ok(sequential[i].text.length > 0);
    assert.equal(concurrent[i].text, sequential[i].text, `prompt ${i}: ${prompts[i]}`);
    assert.equal(concurrent[i].finish, sequential[i].finish);
  }
  // Different prompts gave different texts (the comparison above is not vacuous).
  assert.ok(new Set(sequential.map((s) => s.text)).size > 4);
  // The eight overlapped: every lane ran at once while the other four waited in the
  // queue (high-water marks kept by the lane pool, so no scrape has to catch the moment).
  assert.equal(await metricValue(server, 'skippy_lanes_busy_peak'), 4);
  assert.equal(await metricValue(server, 'skippy_queue_waiting_peak_requests'), 4);
  assert.equal(await metricValue(server, 'skippy_generation_requests_total{endpoint="chat_completions",finish_reason="length"}'), 16);
  assert.equal(await metricValue(server, 'skippy_lanes_busy'), 0);
  assert.equal(await metricValue(server, 'skippy_queue_waiting_requests'), 0);
});
