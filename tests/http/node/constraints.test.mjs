// Constrained output through the official openai client: response_format json_schema
// and json_object, llama-server's `grammar`, and tool_choice "required" / named (the
// call grammar applied during sampling), streaming and not, on random weights over
// Qwen3's real vocabulary (so that the grammar, not the model, makes the output valid).
// The grammar tests' whole schema corpus (tests/grammar/schema_corpus.json) goes through
// the client too, each answer checked by an independent validator (ajv, JSON Schema
// 2020-12 with formats). Malformed schemas and grammars are 400s naming the field.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { startServer, inCi, SKIP_MARKER } from './harness.mjs';

const data = process.env.SKIPPY_TEST_DATA || process.env.SKIPPY_DEFAULT_TEST_DATA || '';
const vocab = join(data, 'vocab', 'ggml-vocab-qwen3.gguf');
const work = mkdtempSync(join(tmpdir(), 'skippy-constraints-'));
let server = null;

before(async () => {
  if (!existsSync(vocab)) return;
  const model = join(work, 'qwen3-random.gguf');
  const r = spawnSync(process.env.SKIPPY_BINARY, ['make-model', '--arch', 'llama', '--n-embd', '32', '--n-layer', '2',
    '--n-head', '2', '--n-head-kv', '1', '--n-ff', '64', '--vocab-from', vocab, '--type', 'F32', '--seed', '5', '-o', model],
  { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  server = await startServer(['--lanes', '2', '--ctx-size', '2048'], { model });
});
after(async () => {
  await server?.stop();
  rmSync(work, { recursive: true, force: true });
});

function skipNoData(t) {
  if (inCi) assert.fail(`shared vocabulary missing: ${vocab} (CI)`);
  console.log(`${SKIP_MARKER}: shared vocabulary missing: ${vocab}`);
  t.skip('no test data');
}

const messages = [{ role: 'user', content: 'Describe a pet as JSON.' }];

// Bounded values only (enums, integers, booleans, short strings): random weights end
// the document well within max_tokens.
const pet = {
  type: 'object',
  properties: {
    kind: { enum: ['cat', 'dog', 'fish'] },
    age: { type: 'integer', minimum: 0, maximum: 30 },
    name: { type: 'string', maxLength: 6 },
    vaccinated: { type: 'boolean' },
    tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 3 },
  },
  required: ['kind', 'age', 'name', 'vaccinated'],
  additionalProperties: false,
};

function checkPet(text) {
  const v = JSON.parse(text);
  assert.deepEqual(Object.keys(v).filter((k) => k !== 'tags'), ['kind', 'age', 'name', 'vaccinated'], text);
  assert.ok(['cat', 'dog', 'fish'].includes(v.kind), text);
  assert.ok(Number.isInteger(v.age) && v.age >= 0 && v.age <= 30, text);
  assert.equal(typeof v.name, 'string');
  assert.ok([...v.name].length <= 6, text);
  assert.equal(typeof v.vaccinated, 'boolean');
  if ('tags' in v) assert.ok(Array.isArray(v.tags) && v.tags.length <= 3 && v.tags.every((x) => x === 'a' || x === 'b'), text);
}

const petFormat = { type: 'json_schema', json_schema: { name: 'pet', schema: pet, strict: true } };

test('response_format json_schema: every answer is JSON matching the schema', async (t) => {
  if (!server) return skipNoData(t);
  const client = server.client();
  for (let seed = 1; seed <= 8; seed++) {
    const r = await client.chat.completions.create({
      model: 'm', messages, response_format: petFormat, max_tokens: 300, temperature: 1.0, seed,
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop', JSON.stringify(r));
    checkPet(c.message.content);
  }
});

test('response_format json_schema, streaming: the chunks join into a valid document', async (t) => {
  if (!server) return skipNoData(t);
  const client = server.client();
  const stream = await client.chat.completions.create({
    model: 'm', messages, response_format: petFormat, max_tokens: 300, temperature: 1.0, seed: 42, stream: true,
  });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.choices.length === 0) continue;
    if (chunk.choices[0].delta.content) text += chunk.choices[0].delta.content;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(finish, 'stop');
  checkPet(text);
  // The same request without streaming gives the same text (same seed).
  const again = await client.chat.completions.create({
    model: 'm', messages, response_format: petFormat, max_tokens: 300, temperature: 1.0, seed: 42,
  });
  assert.equal(again.choices[0].message.content, text);
});

test('response_format json_object and grammar', async (t) => {
  if (!server) return skipNoData(t);
  const client = server.client();
  const obj = await client.chat.completions.create({
    model: 'm', messages, response_format: { type: 'json_object' }, max_tokens: 400, temperature: 0.7, seed: 3,
  });
  if (obj.choices[0].finish_reason === 'stop') {
    const v = JSON.parse(obj.choices[0].message.content);
    assert.equal(typeof v, 'object');
    assert.ok(v !== null && !Array.isArray(v));
  } else {
    assert.equal(obj.choices[0].finish_reason, 'length');
    assert.ok(obj.choices[0].message.content.startsWith('{'));
  }
  const yn = await client.completions.create({
    model: 'm', prompt: 'Is the sky blue? Answer:', max_tokens: 10, temperature: 1.0, seed: 9,
    // llama-server's field: the client passes unknown fields through.
    grammar: 'root ::= " " ("yes" | "no") "."',
  });
  assert.equal(yn.choices[0].finish_reason, 'stop');
  assert.match(yn.choices[0].text, /^ (yes|no)\.$/);
});

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather of a city',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', maxLength: 8 }, unit: { enum: ['C', 'F'] } },
        required: ['city', 'unit'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { enum: ['UTC', 'CET'] } }, required: ['zone'] } },
  },
];

test('tool_choice required and named: the answer is a parseable tool call', async (t) => {
  if (!server) return skipNoData(t);
  const client = server.client();
  for (const [choice, names] of [['required', ['get_weather', 'get_time']],
    [{ type: 'function', function: { name: 'get_time' } }, ['get_time']]]) {
    for (let seed = 1; seed <= 3; seed++) {
      const r = await client.chat.completions.create({
        model: 'm', messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, tool_choice: choice,
        max_tokens: 300, temperature: 1.0, seed,
      });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(r));
      assert.ok(c.message.tool_calls.length >= 1);
      for (const call of c.message.tool_calls) {
        assert.ok(names.includes(call.function.name), call.function.name);
        const args = JSON.parse(call.function.arguments);
        if (call.function.name === 'get_weather') {
          assert.ok(['C', 'F'].includes(args.unit));
          assert.equal(typeof args.city, 'string');
        } else {
          assert.ok(['UTC', 'CET'].includes(args.zone));
        }
      }
    }
  }
});

test('malformed schemas and grammars are 400s naming the field', async (t) => {
  if (!server) return skipNoData(t);
  const client = server.client();
  const cases = [
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'nope' } } } }, 'response_format.json_schema.schema'],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', strict: true, schema: { type: 'string', format: 'hostname' } } } },
      'response_format.json_schema.schema'],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x' } } }, 'response_format.json_schema.schema'],
    [{ response_format: { type: 'xml' } }, 'response_format.type'],
    [{ grammar: 'root ::= "unclosed' }, 'grammar'],
    [{ grammar: 'root ::= a\na ::= a "x"' }, 'grammar'],
  ];
  for (const [extra, param] of cases) {
    await assert.rejects(client.chat.completions.create({ model: 'm', messages, max_tokens: 5, ...extra }), (e) => {
      assert.equal(e.status, 400, JSON.stringify(extra));
      assert.equal(e.param, param, `${JSON.stringify(extra)}: ${e.message}`);
      return true;
    });
  }
});

// Every schema of the grammar tests' corpus (43: nested objects, arrays, tuples, enums,
// required and optional fields, integer ranges, numbers, string lengths, patterns,
// formats, $ref, recursion, anyOf/oneOf/allOf) through the client, sampled at
// temperature 0.9 with a seed per schema. Random weights do not always end a document
// within max_tokens (an unbounded string or array may go on): an answer cut by `length`
// is retried with the next seed (three in all), every answer that stops must validate,
// and at least 30 schemas must get one.
function wellFormed(v) {
  if (typeof v === 'string') return v.isWellFormed();
  if (Array.isArray(v)) return v.every(wellFormed);
  if (v && typeof v === 'object') return Object.entries(v).every(([k, x]) => k.isWellFormed() && wellFormed(x));
  return true;
}

const corpus = JSON.parse(readFileSync(new URL('../../grammar/schema_corpus.json', import.meta.url), 'utf8'));

test('response_format json_schema over the schema corpus: each finished answer validates (ajv)', async (t) => {
  if (!server) return skipNoData(t);
  assert.ok(corpus.length >= 30, `corpus has ${corpus.length} schemas`);
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  const client = server.client();
  const seed = 100;
  const ended = [];
  const cut = [];
  await Promise.all([0, 1].map(async (worker) => {  // two lanes: two requests at a time
    for (let i = worker; i < corpus.length; i += 2) {
      const c = corpus[i];
      const validate = ajv.compile(c.schema);
      // The corpus's own documents first: the two validators agree on what is valid.
      for (const doc of c.valid) assert.ok(validate(JSON.parse(doc)), `${c.name}: corpus document ${doc} fails ajv`);
      for (const doc of c.invalid) {
        let value;
        try { value = JSON.parse(doc); } catch { continue; }
        // JSON.parse keeps a lone surrogate that the C++ parser refuses: invalid as text.
        if (!wellFormed(value)) continue;
        // ajv-formats takes RFC 3339's note that a space may replace the "T"; the corpus
        // (and the grammar) follow its ABNF, which has only "T".
        if (c.name === 'format-date-time' && / \d\d:/.test(doc)) continue;
        assert.ok(!validate(value), `${c.name}: corpus calls ${doc} invalid, ajv accepts it`);
      }
      let text = null;
      for (let attempt = 0; attempt < 3 && text === null; attempt++) {
        const r = await client.chat.completions.create({
          model: 'm', messages: [{ role: 'user', content: `Write a ${c.name} as JSON.` }],
          response_format: { type: 'json_schema', json_schema: { name: c.name, schema: c.schema } },
          max_tokens: 200, temperature: 0.9, seed: seed + 100 * attempt + i,
        });
        const choice = r.choices[0];
        if (choice.finish_reason === 'length') {
          assert.equal(r.usage.completion_tokens, 200, `${c.name}: cut short before max_tokens`);
          continue;
        }
        assert.equal(choice.finish_reason, 'stop', `${c.name}: ${JSON.stringify(r)}`);
        text = choice.message.content;
      }
      if (text === null) {
        cut.push(c.name);
        continue;
      }
      let value;
      assert.doesNotThrow(() => { value = JSON.parse(text); }, `${c.name}: not JSON: ${text}`);
      assert.ok(validate(value), `${c.name}: ${text}\n${JSON.stringify(validate.errors)}`);
      ended.push(c.name);
    }
  }));
  console.log(`schema corpus: ${corpus.length} schemas, ${ended.length} answers ended and validated, ` +
    `${cut.length} cut by max_tokens three times (${cut.join(', ')})`);
  assert.ok(ended.length >= 30, `only ${ended.length} answers ended within max_tokens`);
});
