// Token log-probabilities through the official openai client: chat (logprobs +
// top_logprobs) and completions (logprobs: N), streaming and not. Shapes, that the
// probabilities of the listed alternatives sum to at most 1, that greedy decoding's
// token is its own best alternative, that streaming carries the same values as the
// whole response, and the 400s for bad values.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, assertErrorBody } from './harness.mjs';

let server = null;
let openai = null;

before(async () => {
  server = await startServer(['--lanes', '1', '-c', '512']);
  openai = server.client();
});
after(async () => {
  await server?.stop();
});

const messages = [{ role: 'user', content: 'Say something about the sea.' }];

// ordered: the list is best first (a completions map is not: JavaScript puts
// integer-like keys first).
function checkProbabilities(logprob, top, ordered = true) {
  assert.ok(Number.isFinite(logprob) && logprob <= 0, `logprob ${logprob}`);
  let sum = 0;
  for (const lp of top) {
    assert.ok(Number.isFinite(lp) && lp <= 0, `top logprob ${lp}`);
    sum += Math.exp(lp);
  }
  assert.ok(sum <= 1 + 1e-6, `alternatives sum to ${sum}`);
  if (ordered) for (let i = 1; i < top.length; i++) assert.ok(top[i - 1] >= top[i], 'alternatives best first');
}

function checkChatContent(content, nTop, greedy) {
  assert.ok(Array.isArray(content) && content.length > 0);
  for (const t of content) {
    assert.equal(typeof t.token, 'string');
    assert.ok(Array.isArray(t.bytes) && t.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256));
    assert.equal(t.top_logprobs.length, nTop);
    for (const a of t.top_logprobs) {
      assert.equal(typeof a.token, 'string');
      assert.ok(Array.isArray(a.bytes));
    }
    checkProbabilities(t.logprob, t.top_logprobs.map((a) => a.logprob));
    if (greedy && nTop > 0) {
      assert.ok(t.top_logprobs.some((a) => a.token === t.token && a.logprob === t.logprob),
        `greedy token ${JSON.stringify(t.token)} among its alternatives`);
      assert.equal(t.top_logprobs[0].logprob, t.logprob);
    }
  }
}

test('chat: logprobs with top_logprobs, greedy', async () => {
  const r = await openai.chat.completions.create({
    model: 'm', messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 5,
  });
  const c = r.choices[0];
  const content = c.logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  checkChatContent(content, 5, true);
  // logprobs without alternatives.
  const plain = await openai.chat.completions.create({ model: 'm', messages, max_tokens: 8, temperature: 0, logprobs: true });
  checkChatContent(plain.choices[0].logprobs.content, 0, true);
  assert.deepEqual(plain.choices[0].logprobs.content.map((t) => t.logprob), content.map((t) => t.logprob));
  // Not asked for: null.
  const none = await openai.chat.completions.create({ model: 'm', messages, max_tokens: 4, temperature: 0 });
  assert.equal(none.choices[0].logprobs, null);
});

test('chat, streaming: the chunks carry the same logprobs as the whole response', async () => {
  const args = { model: 'm', messages, max_tokens: 10, temperature: 0.8, seed: 12, logprobs: true, top_logprobs: 3 };
  const whole = await openai.chat.completions.create(args);
  const stream = await openai.chat.completions.create({ ...args, stream: true });
  const streamed = [];
  for await (const chunk of stream) {
    if (chunk.choices.length === 0) continue;
    const lp = chunk.choices[0].logprobs;
    if (lp) streamed.push(...lp.content);
  }
  checkChatContent(streamed, 3, false);
  assert.deepEqual(streamed, whole.choices[0].logprobs.content);
});

test('completions: logprobs N, streaming and not', async () => {
  const args = { model: 'm', prompt: 'Once upon a time', max_tokens: 8, temperature: 0, logprobs: 4 };
  const r = await openai.completions.create(args);
  const lp = r.choices[0].logprobs;
  const n = r.usage.completion_tokens;
  assert.equal(lp.tokens.length, n);
  assert.equal(lp.token_logprobs.length, n);
  assert.equal(lp.top_logprobs.length, n);
  assert.equal(lp.text_offset.length, n);
  let offset = 0;
  assert.equal(lp.text_offset[0], 0);
  for (let i = 0; i < n; i++) {
    const top = lp.top_logprobs[i];
    assert.ok(Object.keys(top).length >= 1 && Object.keys(top).length <= 4);
    checkProbabilities(lp.token_logprobs[i], Object.values(top), false);
    assert.equal(Math.max(...Object.values(top)), lp.token_logprobs[i], 'greedy token is the best');
    assert.equal(top[lp.tokens[i]], lp.token_logprobs[i], 'greedy token among its alternatives');
    // Byte offsets of the raw pieces: a piece that is part of a character shows
    // U+FFFD, whose length is not its own.
    if (offset !== null) assert.equal(lp.text_offset[i], offset);
    offset = lp.tokens[i].includes('\ufffd') ? null : lp.text_offset[i] + Buffer.byteLength(lp.tokens[i], 'utf8');
    if (i > 0) assert.ok(lp.text_offset[i] > lp.text_offset[i - 1] || lp.tokens[i - 1] === '');
  }
  const stream = await openai.completions.create({ ...args, stream: true });
  const tokens = [];
  const values = [];
  for await (const chunk of stream) {
    const l = chunk.choices[0]?.logprobs;
    if (!l) continue;
    tokens.push(...l.tokens);
    values.push(...l.token_logprobs);
  }
  assert.deepEqual(tokens, lp.tokens);
  assert.deepEqual(values, lp.token_logprobs);
});

test('bad logprobs values are 400s naming the field', async () => {
  const cases = [
    ['/v1/chat/completions', { messages, logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
    ['/v1/chat/completions', { messages, logprobs: true, top_logprobs: -1 }, 'top_logprobs'],
    ['/v1/chat/completions', { messages, top_logprobs: 2 }, 'top_logprobs'],
    ['/v1/chat/completions', { messages, logprobs: 'yes' }, 'logprobs'],
    ['/v1/completions', { prompt: 'x', logprobs: 21 }, 'logprobs'],
    ['/v1/completions', { prompt: 'x', logprobs: true }, 'logprobs'],
    ['/v1/completions', { prompt: 'x', logprobs: 2.5 }, 'logprobs'],
  ];
  for (const [path, body, param] of cases) {
    const r = await fetch(server.origin + path, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model: 'm', max_tokens: 2, ...body }),
    });
    assert.equal(r.status, 400, JSON.stringify(body));
    const j = await r.json();
    assertErrorBody(assert, j, r.status);
    assert.equal(j.error.param, param, JSON.stringify(body));
  }
});
