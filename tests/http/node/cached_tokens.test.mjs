// usage.prompt_tokens_details.cached_tokens > 0 when a prompt repeats a prefix.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './harness.mjs';

let server;
let openai;
before(async () => {
  server = await startServer(['--lanes', '2', '-c', '1024']);
  openai = server.client();
});
after(async () => {
  await server?.stop();
});

const system = 'You are a careful assistant. ' + 'Follow the house rules exactly and answer in one line. '.repeat(12);

test('a repeated prefix reports cached tokens', async () => {
  const ask = (q) => openai.chat.completions.create({
    model: 'm', messages: [{ role: 'system', content: system }, { role: 'user', content: q }], max_tokens: 4, temperature: 0,
  });
  const first = await ask('What is the first rule?');
  assert.ok(first.usage.prompt_tokens > 64);
  const second = await ask('And the second one?');
  const cached = second.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached > 0, `cached_tokens is ${cached} on a repeated ${first.usage.prompt_tokens}-token prefix`);
  assert.ok(cached < second.usage.prompt_tokens);

  // The streaming usage chunk reports it too.
  let usage = null;
  for await (const chunk of await openai.chat.completions.create({
    model: 'm', messages: [{ role: 'system', content: system }, { role: 'user', content: 'A third?' }], max_tokens: 4,
    temperature: 0, stream: true, stream_options: { include_usage: true },
  })) {
    if (chunk.usage) usage = chunk.usage;
  }
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0);
});
