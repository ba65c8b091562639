// Errors: the right status and an OpenAI error object, never a crash.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, assertErrorBody, eventually, metricValue } from './harness.mjs';

const noEos = { 2: -100 };

describe('bad requests', () => {
  let server;
  let openai;
  before(async () => {
    server = await startServer(['--lanes', '1', '-c', '256', '--max-body-bytes', '65536']);
    openai = server.client();
  });
  after(async () => {
    await server?.stop();
  });

  async function raw(method, path, body, headers = { 'Content-Type': 'application/json' }) {
    const r = await fetch(`${server.origin}${path}`, { method, body, headers });
    const text = await r.text();
    let json = null;
    try { json = JSON.parse(text); } catch { /* asserted below */ }
    return { status: r.status, json, text, headers: r.headers };
  }

  test('unknown routes are 404', async () => {
    for (const [method, path] of [['GET', '/v1/nope'], ['POST', '/v1/embeddings'], ['GET', '/']]) {
      const r = await raw(method, path, method === 'POST' ? '{}' : undefined);
      assert.equal(r.status, 404, `${method} ${path}`);
      assertErrorBody(assert, r.json, 404);
    }
  });

  test('a known route with the wrong method is 405 with Allow', async () => {
    const r = await raw('GET', '/v1/chat/completions');
    assert.equal(r.status, 405);
    assert.equal(r.headers.get('allow'), 'POST');
    assertErrorBody(assert, r.json, 405);
    const p = await raw('PUT', '/v1/models', '{}');
    assert.equal(p.status, 405);
    assertErrorBody(assert, p.json, 405);
  });

  test('malformed JSON is 400', async () => {
    for (const body of ['{bad', '', '[]', 'null', '{"messages": [{"role": "user", "content": "hi"}]']) {
      const r = await raw('POST', '/v1/chat/completions', body);
      assert.equal(r.status, 400, body);
      assertErrorBody(assert, r.json, 400);
      assert.equal(r.json.error.type, 'invalid_request_error');
    }
  });

  test('a body over --max-body-bytes is 413', async () => {
    const body = JSON.stringify({ model: 'm', prompt: 'x'.repeat(100 * 1024) });
    const r = await raw('POST', '/v1/completions', body);
    assert.equal(r.status, 413);
    assertErrorBody(assert, r.json, 413);
  });

  test('invalid values are 400 BadRequestError naming the parameter', async () => {
    const base = { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };
    const cases = [
      [{ temperature: -1 }, 'temperature'],
      [{ top_p: 0 }, 'top_p'],
      [{ top_p: 1.5 }, 'top_p'],
      [{ max_tokens: -1 }, 'max_tokens'],
      [{ max_tokens: 1e12 }, 'max_tokens'],
      [{ n: 2 }, 'n'],
      [{ messages: [] }, 'messages'],
      [{ messages: [{ role: 'wizard', content: 'x' }] }, 'messages[0].role'],
      [{ messages: [{ role: 'user', content: 42 }] }, 'messages[0].content'],
      [{ stop: [1, 2] }, 'stop[0]'],
      [{ logit_bias: { nope: 1 } }, 'logit_bias'],
    ];
    for (const [override, param] of cases) {
      await assert.rejects(openai.chat.completions.create({ ...base, ...override }), (err) => {
        assert.ok(err instanceof OpenAI.BadRequestError, `${JSON.stringify(override)}: ${err}`);
        assert.equal(err.status, 400);
        assert.equal(err.param, param, JSON.stringify(override));
        assert.equal(err.type, 'invalid_request_error');
        assert.ok(err.message.length > 0);
        return true;
      });
    }
  });

  test('unsupported prompt forms and a prompt over the context are 400', async () => {
    await assert.rejects(openai.completions.create({ model: 'm', prompt: ['a', 'b'] }), (err) => err.status === 400 && err.param === 'prompt');
    await assert.rejects(openai.completions.create({ model: 'm', prompt: [1, 99999] }), (err) => err.status === 400);
    await assert.rejects(openai.completions.create({ model: 'm', prompt: 'word '.repeat(400) }),
      (err) => err.status === 400 && err.code === 'context_length_exceeded');
  });

  test('an unknown model id is 404 on /v1/models/{id}', async () => {
    await assert.rejects(openai.models.retrieve('no-such-model'), (err) => err instanceof OpenAI.NotFoundError && err.code === 'model_not_found');
  });

  test('the server is still healthy after all that', async () => {
    const r = await openai.completions.create({ model: 'm', prompt: 'ok', max_tokens: 2, temperature: 0 });
    assert.equal(r.choices.length, 1);
  });
});

describe('a busy server', () => {
  let server;
  let openai;
  before(async () => {
    // One lane, one queue place, a short queue timeout; a long request holds the lane.
    server = await startServer(['--lanes', '1', '--queue', '1', '--queue-timeout-s', '1', '-c', '16384']);
    openai = server.client();
  });
  after(async () => {
    await server?.stop();
  });

  test('a full queue is 429 and a wait past the queue timeout is 503', async () => {
    const holder = new AbortController();
    const stream = await openai.completions.create(
      { model: 'm', prompt: 'Hold the lane', max_tokens: 16000, temperature: 0, logit_bias: noEos, stream: true },
      { signal: holder.signal });
    const it = stream[Symbol.asyncIterator]();
    await it.next();  // the lane is busy now
    // A second request waits in the queue (its one place) ...
    const waiting = openai.completions.create({ model: 'm', prompt: 'wait', max_tokens: 2 });
    assert.ok(await eventually(async () => (await metricValue(server, 'skippy_queue_waiting_requests')) === 1));
    // ... so a third finds the queue full.
    await assert.rejects(openai.completions.create({ model: 'm', prompt: 'refused', max_tokens: 2 }), (err) => {
      assert.ok(err instanceof OpenAI.RateLimitError, String(err));
      assert.equal(err.status, 429);
      assertErrorBody(assert, { error: err.error }, 429);
      return true;
    });
    // The waiting one gives up after --queue-timeout-s.
    await assert.rejects(waiting, (err) => {
      assert.equal(err.status, 503, String(err));
      assert.equal(err.code, 'queue_timeout');
      assertErrorBody(assert, { error: err.error }, 503);
      return true;
    });
    holder.abort();
    await it.next().catch(() => {});  // ends or throws, depending on the client version
    assert.equal(await metricValue(server, 'skippy_queue_rejections_total{reason="full"}'), 1);
    assert.equal(await metricValue(server, 'skippy_queue_rejections_total{reason="timeout"}'), 1);
  });
});
