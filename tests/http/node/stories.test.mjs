// A real trained model (stories260K, shared test data) behind the openai client.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { startServer, inCi, SKIP_MARKER } from './harness.mjs';

const root = process.env.SKIPPY_TEST_DATA || process.env.SKIPPY_DEFAULT_TEST_DATA || '';
const model = path.join(root, 'models', 'stories260K.gguf');
const present = existsSync(model);

let server;
before(async () => {
  if (present) server = await startServer(['--lanes', '2'], { model });
});
after(async () => {
  await server?.stop();
});

test('greedy completion of "Once upon a time" tells the known story', async (t) => {
  if (!present) {
    if (inCi) assert.fail(`test data ${model} missing (CI is set; see SKIPPY_TEST_DATA)`);
    console.log(`${SKIP_MARKER}: ${model} not found; set SKIPPY_TEST_DATA to the shared folder`);
    t.skip('stories260K.gguf not found');
    return;
  }
  const openai = server.client();
  const r = await openai.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 24, temperature: 0 });
  assert.ok(r.choices[0].text.startsWith(', there was a little girl named Lily.'), JSON.stringify(r.choices[0].text));
  let streamed = '';
  for await (const chunk of await openai.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 24, temperature: 0, stream: true })) {
    for (const c of chunk.choices) streamed += c.text;
  }
  assert.equal(streamed, r.choices[0].text);
  const chat = await openai.chat.completions.create({ model: 'stories260K', messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 16, temperature: 0 });
  assert.equal(chat.choices[0].message.role, 'assistant');
  assert.ok(chat.usage.completion_tokens > 0);
});
