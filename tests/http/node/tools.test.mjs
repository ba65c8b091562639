// Tool loops with the official openai client (non-streaming and streaming) and with the
// `ai` SDK, against `skippy serve` on random weights that carry the real vocabularies
// and chat templates of Qwen3, Llama 3 (the 3.1-style tool fixture) and gpt-oss.
//
// Random weights do not call tools, so the server runs with its TEST HOOK
// --test-canned-output: each completion is the next text of a file, written in the
// model's own tool-call format; the pipeline still runs. What is tested is everything
// around the model: the template renders tools and tool results, the output is parsed
// into tool_calls / reasoning_content, and streaming delivers them as OpenAI does.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, inCi, SKIP_MARKER } from './harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const data = process.env.SKIPPY_TEST_DATA || process.env.SKIPPY_DEFAULT_TEST_DATA || '';
const work = mkdtempSync(join(tmpdir(), 'skippy-tools-'));
after(() => rmSync(work, { recursive: true, force: true }));  // the models are tens of MiB

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather of a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
];

// Per template: the model's tool call and its answer after the tool result.
const families = {
  qwen3: {
    vocab: 'ggml-vocab-qwen3.gguf',
    call: '<think>\nI need the weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    answer: '<think>\nThe tool said sunny.\n</think>\n\nIt is sunny in Paris.',
    reasoning: 'I need the weather.',
  },
  llama31: {
    vocab: 'ggml-vocab-llama3.gguf',
    template: join(here, '..', '..', 'jinja', 'templates', 'llama31_tools.jinja'),
    call: '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    answer: 'It is sunny in Paris.',
    reasoning: undefined,
  },
  gptoss: {
    vocab: 'ggml-vocab-gptoss.gguf',
    call:
      '<|channel|>analysis<|message|>I need the weather.<|end|><|start|>assistant<|channel|>commentary ' +
      'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}',
    answer:
      '<|channel|>analysis<|message|>The tool said sunny.<|end|><|start|>assistant<|channel|>final<|message|>It is sunny in Paris.',
    reasoning: 'I need the weather.',
  },
};

function makeModel(name, vocabPath) {
  const out = join(work, `${name}.gguf`);
  if (existsSync(out)) return out;
  const r = spawnSync(process.env.SKIPPY_BINARY, ['make-model', '--arch', 'llama', '--n-embd', '32', '--n-layer', '1',
    '--n-head', '2', '--n-head-kv', '1', '--n-ff', '64', '--vocab-from', vocabPath, '--type', 'F32', '--seed', '3', '-o', out],
  { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return out;
}

async function serveFamily(name, outputs) {
  const f = families[name];
  const vocab = join(data, 'vocab', f.vocab);
  if (!existsSync(vocab)) return null;
  const canned = join(work, `${name}-canned.json`);
  writeFileSync(canned, JSON.stringify(outputs));
  const args = ['--lanes', '1', '--ctx-size', '2048', '--test-canned-output', canned];
  if (f.template) args.push('--chat-template', f.template);
  return startServer(args, { model: makeModel(name, vocab) });
}

function skipNoData(t) {
  if (inCi) assert.fail(`shared vocabularies missing under ${data} (CI)`);
  console.log(`${SKIP_MARKER}: shared vocabularies missing under ${data}`);
  t.skip('no test data');
}

const question = [{ role: 'user', content: 'What is the weather in Paris?' }];

for (const name of Object.keys(families)) {
  const f = families[name];

  test(`${name}: tool loop, non-streaming`, async (t) => {
    const server = await serveFamily(name, [f.call, f.answer]);
    if (!server) return skipNoData(t);
    try {
      const client = server.client();
      const first = await client.chat.completions.create({ model: 'm', messages: question, tools, max_tokens: 200 });
      const choice = first.choices[0];
      assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(first));
      assert.equal(choice.message.content, null);
      assert.equal(choice.message.reasoning_content, f.reasoning);
      assert.equal(choice.message.tool_calls.length, 1);
      const call = choice.message.tool_calls[0];
      assert.equal(call.type, 'function');
      assert.match(call.id, /^call_/);
      assert.equal(call.function.name, 'get_weather');
      assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
      assert.match(first.system_fingerprint, /^fp_/);

      const messages = [...question, choice.message, { role: 'tool', tool_call_id: call.id, content: '{"sky": "sunny"}' }];
      const second = await client.chat.completions.create({ model: 'm', messages, tools, max_tokens: 200 });
      assert.equal(second.choices[0].finish_reason, 'stop');
      assert.equal(second.choices[0].message.content, 'It is sunny in Paris.');
      assert.equal(second.choices[0].message.tool_calls, undefined);
      // The tool result reached the prompt through the template.
      const tokens = second.usage.prompt_tokens;
      assert.ok(tokens > first.usage.prompt_tokens, `${tokens} prompt tokens`);
      // /tokenize and /detokenize on the real vocabulary (the route alias without /v1).
      const post = async (path, body) => (await fetch(`${server.origin}${path}`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })).json();
      const { tokens: ids } = await post('/tokenize', { content: 'sunny <tool_call>' });
      assert.ok(ids.length >= 2);
      assert.equal((await post('/detokenize', { tokens: ids })).content, 'sunny <tool_call>');
    } finally {
      await server.stop();
    }
  });

  test(`${name}: tool loop, streaming`, async (t) => {
    const server = await serveFamily(name, [f.call, f.answer]);
    if (!server) return skipNoData(t);
    try {
      const client = server.client();
      const stream = await client.chat.completions.create({ model: 'm', messages: question, tools, stream: true, max_tokens: 200 });
      let reasoning = '';
      let content = '';
      let finish = null;
      const calls = [];
      for await (const chunk of stream) {
        assert.match(chunk.system_fingerprint, /^fp_/);
        const c = chunk.choices[0];
        if (!c) continue;
        if (c.delta.reasoning_content) reasoning += c.delta.reasoning_content;
        if (c.delta.content) content += c.delta.content;
        for (const tc of c.delta.tool_calls ?? []) {
          if (tc.id) {
            assert.equal(calls.length, tc.index);
            assert.ok(tc.function.name, 'the first chunk of a call names it');
            calls.push({ id: tc.id, name: tc.function.name, arguments: tc.function.arguments ?? '' });
          } else {
            calls[tc.index].arguments += tc.function.arguments;
          }
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
      assert.equal(finish, 'tool_calls');
      assert.equal(content, '');
      assert.equal(reasoning || undefined, f.reasoning);
      assert.equal(calls.length, 1);
      assert.equal(calls[0].name, 'get_weather');
      assert.deepEqual(JSON.parse(calls[0].arguments), { city: 'Paris' });

      const messages = [
        ...question,
        { role: 'assistant', content: null, tool_calls: [{ id: calls[0].id, type: 'function', function: { name: calls[0].name, arguments: calls[0].arguments } }] },
        { role: 'tool', tool_call_id: calls[0].id, content: '{"sky": "sunny"}' },
      ];
      const again = await client.chat.completions.create({ model: 'm', messages, tools, stream: true, max_tokens: 200 });
      let answer = '';
      let last = null;
      for await (const chunk of again) {
        const c = chunk.choices[0];
        if (c?.delta.content) answer += c.delta.content;
        if (c?.delta.tool_calls) assert.fail('no tool call expected');
        if (c?.finish_reason) last = c.finish_reason;
      }
      assert.equal(answer, 'It is sunny in Paris.');
      assert.equal(last, 'stop');
    } finally {
      await server.stop();
    }
  });
}

test('qwen3: the ai SDK runs a tool loop', async (t) => {
  const f = families.qwen3;
  const server = await serveFamily('qwen3', [f.call, f.answer]);
  if (!server) return skipNoData(t);
  try {
    const { generateText, tool, stepCountIs } = await import('ai');
    const { createOpenAICompatible } = await import('@ai-sdk/openai-compatible');
    const { z } = await import('zod');
    const provider = createOpenAICompatible({ name: 'skippy', baseURL: server.baseURL, apiKey: 'sk-test' });
    const seen = [];
    const result = await generateText({
      model: provider.chatModel('m'),
      prompt: 'What is the weather in Paris?',
      maxOutputTokens: 200,
      tools: {
        get_weather: tool({
          description: 'The weather of a city',
          inputSchema: z.object({ city: z.string() }),
          execute: async ({ city }) => {
            seen.push(city);
            return { sky: 'sunny' };
          },
        }),
      },
      stopWhen: stepCountIs(3),
    });
    assert.deepEqual(seen, ['Paris']);
    assert.equal(result.steps.length, 2);
    assert.equal(result.text, 'It is sunny in Paris.');
  } finally {
    await server.stop();
  }
});

test('an API key guards the server; the client sends it', async () => {
  const server = await startServer(['--lanes', '1', '--api-key', 'sk-secret']);
  try {
    await assert.rejects(server.client().models.list(), (e) => e.status === 401);
    const ok = await server.client({ apiKey: 'sk-secret' }).models.list();
    assert.equal(ok.data.length, 1);
    assert.equal((await fetch(`${server.origin}/health`)).status, 200);
  } finally {
    await server.stop();
  }
});
