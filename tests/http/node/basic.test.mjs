// Chat and text completions, streaming and not, through the official openai client.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './harness.mjs';

let server;
let openai;
before(async () => {
  server = await startServer(['--lanes', '2', '-c', '512', '--alias', 'skippy-test']);
  openai = server.client();
});
after(async () => {
  await server?.stop();
});

// The test model has random weights: ban its EOS (id 2) so that outputs run to max_tokens.
const noEos = { 2: -100 };
const messages = [
  { role: 'system', content: 'You answer briefly.' },
  { role: 'user', content: 'Tell me a story about a cat.' },
];

async function collectChatStream(stream) {
  const out = { text: '', chunks: 0, roles: [], finish: null, usage: null, ids: new Set() };
  for await (const chunk of stream) {
    out.ids.add(chunk.id);
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) out.usage = chunk.usage;
    if (chunk.choices.length === 0) continue;
    const c = chunk.choices[0];
    if (c.delta.role) out.roles.push(c.delta.role);
    if (c.delta.content) out.text += c.delta.content;
    if (c.finish_reason) out.finish = c.finish_reason;
    out.chunks++;
  }
  return out;
}

test('GET /v1/models lists the served model', async () => {
  const ids = [];
  for await (const m of openai.models.list()) ids.push(m.id);
  assert.deepEqual(ids, ['skippy-test']);
  const one = await openai.models.retrieve('skippy-test');
  assert.equal(one.id, 'skippy-test');
  assert.equal(one.object, 'model');
});

test('non-streaming chat completion has the message, finish_reason and usage', async () => {
  const r = await openai.chat.completions.create({
    model: 'skippy-test', messages, max_tokens: 12, temperature: 0, logit_bias: noEos,
  });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.model, 'skippy-test');
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(c.message.content.length > 0);
  assert.equal(c.finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 12);
  assert.ok(r.usage.prompt_tokens > 10);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  const cached = r.usage.prompt_tokens_details.cached_tokens;
  assert.ok(Number.isInteger(cached) && cached >= 0 && cached <= r.usage.prompt_tokens);
});

test('streaming chat equals non-streaming chat and reports usage when asked', async () => {
  const params = { model: 'skippy-test', messages, max_tokens: 16, temperature: 0, logit_bias: noEos };
  const whole = await openai.chat.completions.create(params);
  const s = await collectChatStream(await openai.chat.completions.create({
    ...params, stream: true, stream_options: { include_usage: true },
  }));
  assert.equal(s.text, whole.choices[0].message.content);
  assert.deepEqual(s.roles, ['assistant']);
  assert.equal(s.finish, 'length');
  assert.equal(s.ids.size, 1);
  assert.ok(s.chunks > 2);
  assert.ok(s.usage, 'no usage chunk');
  assert.equal(s.usage.completion_tokens, 16);
  assert.equal(s.usage.prompt_tokens, whole.usage.prompt_tokens);
  assert.equal(s.usage.total_tokens, s.usage.prompt_tokens + 16);
  assert.ok(Number.isInteger(s.usage.prompt_tokens_details.cached_tokens));
});

test('streaming chat without include_usage sends no usage', async () => {
  const s = await collectChatStream(await openai.chat.completions.create({
    model: 'skippy-test', messages, max_tokens: 4, temperature: 0, logit_bias: noEos, stream: true,
  }));
  assert.equal(s.usage, null);
  assert.equal(s.finish, 'length');
});

test('text completions, streaming and not, agree', async () => {
  const params = { model: 'skippy-test', prompt: 'Once upon a time', max_tokens: 20, temperature: 0, logit_bias: noEos };
  const whole = await openai.completions.create(params);
  assert.equal(whole.object, 'text_completion');
  assert.match(whole.id, /^cmpl-/);
  assert.equal(whole.choices[0].finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 20);
  assert.ok(whole.usage.prompt_tokens >= 4);

  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of await openai.completions.create({ ...params, stream: true, stream_options: { include_usage: true } })) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 20);
});

test('completions default to 16 tokens like OpenAI', async () => {
  const r = await openai.completions.create({ model: 'skippy-test', prompt: 'Hello', temperature: 0, logit_bias: noEos });
  assert.equal(r.usage.completion_tokens, 16);
});

test('a stop string ends the text before it with finish_reason stop', async () => {
  const params = { model: 'skippy-test', prompt: 'The weather today', max_tokens: 40, temperature: 0, logit_bias: noEos };
  const full = (await openai.completions.create(params)).choices[0].text;
  // A short ASCII run from the middle of the greedy text, at its first occurrence.
  let stop = null;
  for (let i = 3; i + 2 <= full.length && !stop; i++) {
    const s = full.slice(i, i + 2);
    if (/^[a-z]{2}$/i.test(s) && full.indexOf(s) === i) stop = s;
  }
  assert.ok(stop, `no usable stop string in ${JSON.stringify(full)}`);
  const expected = full.slice(0, full.indexOf(stop));
  for (const stream of [false, true]) {
    let text = '';
    let finish = null;
    if (stream) {
      for await (const chunk of await openai.completions.create({ ...params, stop: [stop, 'never-there'], stream })) {
        for (const c of chunk.choices) {
          text += c.text;
          if (c.finish_reason) finish = c.finish_reason;
        }
      }
    } else {
      const r = await openai.completions.create({ ...params, stop });
      text = r.choices[0].text;
      finish = r.choices[0].finish_reason;
    }
    assert.equal(text, expected, `stream=${stream}`);
    assert.equal(finish, 'stop', `stream=${stream}`);
  }
});

test('a seed makes sampling reproducible', async () => {
  const params = { model: 'skippy-test', prompt: 'Roll the dice', max_tokens: 24, temperature: 1.0, top_k: 0, top_p: 1, min_p: 0, seed: 1234 };
  const a = await openai.completions.create(params);
  const b = await openai.completions.create(params);
  assert.equal(a.choices[0].text, b.choices[0].text);
});

test('sampling fields and prompt_cache_key are accepted', async () => {
  const r = await openai.chat.completions.create({
    model: 'skippy-test', messages, max_tokens: 3, temperature: 0.7, top_p: 0.9, top_k: 20, min_p: 0.05,
    presence_penalty: 0.5, frequency_penalty: 0.5, repetition_penalty: 1.1, seed: 7, n: 1,
    prompt_cache_key: 'tenant-a', user: 'someone',
  });
  assert.equal(r.choices.length, 1);
  assert.ok(r.usage.completion_tokens <= 3);
});

test('a token-id prompt is accepted', async () => {
  const r = await openai.completions.create({ model: 'skippy-test', prompt: [1, 300, 301, 302], max_tokens: 2, temperature: 0 });
  assert.equal(r.usage.prompt_tokens, 4);
});

test('GET /health answers ok', async () => {
  const r = await fetch(`${server.origin}/health`);
  assert.equal(r.status, 200);
  assert.deepEqual(await r.json(), { status: 'ok' });
});
