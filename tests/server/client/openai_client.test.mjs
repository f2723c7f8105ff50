// The official OpenAI JavaScript client (the `openai` npm package, 6.x) against `k3 serve` on tiny
// checkpoints of both architectures: every endpoint and feature the client exposes, contents
// checked against `k3 generate` / `k3 chat` runs of the same prompts, and every error status.
// Run by ctest (tests/CMakeLists.txt) with K3_CLI and K3_NODE_MODULES set; node:test runner.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { K3, KEY, startServer, stopServer } from './serve_process.mjs';

const require = createRequire(join(process.env.K3_NODE_MODULES, 'openai', 'package.json'));
const OpenAI = require('openai').default ?? require('openai');

// Completions text, like k3 generate's, leaves every added token out (skip_special_tokens); the
// /detokenize text keeps their names.
const withoutSpecials = (text) => text.replace(/<\|[A-Za-z0-9_]+\|>|\[(BOS|EOS|UNK|PAD)\]/g, '');

function generate(model, args) {
  const out = execFileSync(K3, ['generate', '--model', model, '--threads', '2', '--json', ...args], { encoding: 'utf8' });
  return JSON.parse(out.trim().split('\n').pop());
}

function chatCli(model, messages, maxTokens) {
  const dir = mkdtempSync(join(tmpdir(), 'k3-chat-'));
  const file = join(dir, 'messages.json');
  writeFileSync(file, JSON.stringify({ messages }));
  const out = execFileSync(K3, ['chat', '--model', model, '--threads', '2', '--greedy', '--max-tokens', String(maxTokens),
    '--messages', file], { encoding: 'utf8' });
  rmSync(dir, { recursive: true });
  return JSON.parse(out.trim().split('\n').pop());
}

for (const arch of ['kimi-k3', 'kimi-linear']) {
  describe(`k3 serve (${arch})`, () => {
    let model, server, client, base;
    before(async () => {
      model = mkdtempSync(join(tmpdir(), `k3-serve-${arch}-`));
      execFileSync(K3, ['make-tiny', '--arch', arch, '--out', model, '--seed', '3']);
      server = startServer(model);
      base = await server.url;
      client = new OpenAI({ apiKey: KEY, baseURL: base, maxRetries: 0, timeout: 60000 });
    });
    after(async () => {
      if (server) await stopServer(server);
      rmSync(model, { recursive: true, force: true });
    });
    const name = () => model.split('/').pop();
    const prompt = 'The quick brown fox jumps over the lazy dog.';

    test('models', async () => {
      const list = await client.models.list();
      assert.deepEqual(list.data.map((m) => m.id), [name()]);
    });

    test('completion: greedy text equals k3 generate, with usage', async () => {
      const want = generate(model, ['--prompt', prompt, '--max-tokens', '12']);
      const r = await client.completions.create({ model: name(), prompt, max_tokens: 12, temperature: 0 });
      assert.equal(r.choices[0].text, want.text);
      assert.equal(r.usage.prompt_tokens, want.prompt_tokens);
      assert.equal(r.usage.completion_tokens, want.generated_tokens);
      assert.equal(r.choices[0].finish_reason, want.stopped_at_eos ? 'stop' : 'length');
    });

    test('completion: a token-id prompt equals k3 generate --ids', async () => {
      const ids = [5, 17, 99, 3, 250, 8, 41];
      const want = generate(model, ['--ids', ids.join(','), '--max-tokens', '10']);
      const r = await client.completions.create({ model: name(), prompt: ids, max_tokens: 10, temperature: 0 });
      assert.equal(r.usage.completion_tokens, want.generated_tokens);
      const text = want.generated_ids.slice(0, want.stopped_at_eos ? -1 : undefined);
      const d = await fetch(base.replace(/\/v1$/, '') + '/detokenize', { method: 'POST',
        headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' }, body: JSON.stringify({ tokens: text }) });
      assert.equal(r.choices[0].text, withoutSpecials((await d.json()).prompt));
    });

    test('completion: streaming with include_usage equals the whole response', async () => {
      const whole = await client.completions.create({ model: name(), prompt, max_tokens: 12, temperature: 0 });
      const stream = await client.completions.create({ model: name(), prompt, max_tokens: 12, temperature: 0,
        stream: true, stream_options: { include_usage: true } });
      let text = '', finish = null, usage = null;
      for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices) {
          text += c.text;
          if (c.finish_reason) finish = c.finish_reason;
        }
      }
      assert.equal(text, whole.choices[0].text);
      assert.equal(finish, whole.choices[0].finish_reason);
      assert.deepEqual(usage, whole.usage);
    });

    test('completion: n>1 with a seed is reproducible, and seeds differ', async () => {
      const ask = (seed) => client.completions.create({ model: name(), prompt, max_tokens: 16, temperature: 1.0, n: 3, seed });
      const a = await ask(7), b = await ask(7), c = await ask(8);
      assert.deepEqual(a.choices.map((x) => x.index).sort(), [0, 1, 2]);
      assert.deepEqual(a.choices.map((x) => x.text), b.choices.map((x) => x.text));
      assert.notDeepEqual(a.choices.map((x) => x.text), c.choices.map((x) => x.text));
      assert.ok(a.usage.completion_tokens > 0 && a.usage.completion_tokens <= 3 * 16);
    });

    test('completion: a stop string cuts the text before it', async () => {
      const whole = await client.completions.create({ model: name(), prompt, max_tokens: 24, temperature: 0 });
      const text = whole.choices[0].text;
      const stop = text.slice(6, 9);
      assert.ok(stop.length === 3, `greedy text too short: ${JSON.stringify(text)}`);
      const cut = await client.completions.create({ model: name(), prompt, max_tokens: 24, temperature: 0, stop: [stop] });
      assert.equal(cut.choices[0].text, text.slice(0, text.indexOf(stop)));
      assert.equal(cut.choices[0].finish_reason, 'stop');
    });

    test('completion: logprobs', async () => {
      const r = await client.completions.create({ model: name(), prompt, max_tokens: 5, temperature: 0, logprobs: 2 });
      const lp = r.choices[0].logprobs;
      assert.equal(lp.tokens.length, lp.token_logprobs.length);
      assert.equal(lp.top_logprobs.length, lp.tokens.length);
      for (const p of lp.token_logprobs) assert.ok(p <= 0);
      for (const t of lp.top_logprobs) assert.equal(Object.keys(t).length >= 1, true);
    });

    const messages = [
      { role: 'system', content: 'You are a terse assistant.' },
      { role: 'user', content: 'Name three colours.' },
    ];

    test('chat: greedy reply equals k3 chat', async () => {
      const want = chatCli(model, messages, 16);
      const r = await client.chat.completions.create({ model: name(), messages, max_tokens: 16, temperature: 0 });
      const got = r.choices[0].message;
      assert.equal(got.content, want.content);
      assert.equal(got.reasoning_content ?? null, want.reasoning_content ?? null);
      assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
    });

    test('chat: streaming deltas add up to the whole message, with usage', async () => {
      const whole = await client.chat.completions.create({ model: name(), messages, max_tokens: 16, temperature: 0 });
      const stream = await client.chat.completions.create({ model: name(), messages, max_tokens: 16, temperature: 0,
        stream: true, stream_options: { include_usage: true } });
      let content = '', reasoning = '', role = null, usage = null;
      for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices) {
          if (c.delta.role) role = c.delta.role;
          content += c.delta.content ?? '';
          reasoning += c.delta.reasoning_content ?? '';
        }
      }
      assert.equal(role, 'assistant');
      assert.equal(content, whole.choices[0].message.content ?? '');
      assert.equal(reasoning, whole.choices[0].message.reasoning_content ?? '');
      assert.deepEqual(usage, whole.usage);
    });

    test('chat: logprobs with top_logprobs', async () => {
      const r = await client.chat.completions.create({ model: name(), messages, max_tokens: 6, temperature: 0,
        logprobs: true, top_logprobs: 3 });
      const content = r.choices[0].logprobs.content;
      assert.ok(content.length >= 1);
      for (const t of content) {
        assert.ok(t.logprob <= 0);
        assert.ok(t.top_logprobs.length <= 3);
      }
    });

    test('chat: a tool round trip', async () => {
      const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
      const first = await client.chat.completions.create({ model: name(), max_tokens: 8, temperature: 0, tools,
        tool_choice: 'auto', messages: [{ role: 'user', content: 'Weather in Paris?' }] });
      assert.ok(['stop', 'length', 'tool_calls'].includes(first.choices[0].finish_reason));
      const second = await client.chat.completions.create({ model: name(), max_tokens: 8, temperature: 0, tools,
        messages: [
          { role: 'user', content: 'Weather in Paris?' },
          { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
            function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
          { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 21}' },
        ] });
      assert.equal(second.choices[0].message.role, 'assistant');
      assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens);
      const named = await client.chat.completions.create({ model: name(), max_tokens: 300, temperature: 0, tools,
        tool_choice: { type: 'function', function: { name: 'get_weather' } }, messages: [{ role: 'user', content: 'Paris?' }] });
      assert.equal(named.object, 'chat.completion');
      assert.deepEqual(named.choices[0].message.tool_calls.map((c) => c.function.name), ['get_weather']);
    });

    test('tokenize and detokenize round trip', async () => {
      const t = await fetch(base.replace(/\/v1$/, '') + '/tokenize', { method: 'POST',
        headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' }, body: JSON.stringify({ prompt }) });
      const tokens = (await t.json()).tokens;
      const d = await fetch(base.replace(/\/v1$/, '') + '/detokenize', { method: 'POST',
        headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' }, body: JSON.stringify({ tokens }) });
      assert.equal((await d.json()).prompt, prompt);
    });

    test('errors: 401, 404, 400, 405, 413', async () => {
      const noKey = new OpenAI({ apiKey: 'wrong', baseURL: base, maxRetries: 0 });
      await assert.rejects(noKey.models.list(), (e) => e.status === 401 && e.error?.type === 'authentication_error');
      await assert.rejects(client.completions.create({ model: 'other', prompt, max_tokens: 2 }),
        (e) => e.status === 404 && e.code === 'model_not_found');
      await assert.rejects(client.completions.create({ model: name(), prompt, max_tokens: 2, temperature: 7 }),
        (e) => e.status === 400 && e.param === 'temperature');
      await assert.rejects(client.completions.create({ model: name(), prompt: 'x '.repeat(9000), max_tokens: 2 }),
        (e) => e.status === 400 && e.code === 'context_length_exceeded');
      await assert.rejects(client.completions.create({ model: name(), prompt, max_tokens: 2, logit_bias: { 5: 1 } }),
        (e) => e.status === 400 && e.param === 'logit_bias');
      const get = await fetch(base + '/completions', { headers: { Authorization: `Bearer ${KEY}` } });
      assert.equal(get.status, 405);
      assert.equal(get.headers.get('allow'), 'POST');
      assert.equal((await get.json()).error.type, 'invalid_request_error');
      const missing = await fetch(base + '/nothing', { headers: { Authorization: `Bearer ${KEY}` } });
      assert.equal(missing.status, 404);
      const big = await fetch(base + '/completions', { method: 'POST', headers: { Authorization: `Bearer ${KEY}`,
        'Content-Type': 'application/json' }, body: JSON.stringify({ model: name(), prompt: 'y'.repeat(9 << 20) }) });
      assert.equal(big.status, 413);
      const bad = await fetch(base + '/completions', { method: 'POST', headers: { Authorization: `Bearer ${KEY}`,
        'Content-Type': 'application/json' }, body: '{"model": ' });
      assert.equal(bad.status, 400);
    });
  });
}

describe('k3 serve: a full queue', () => {
  let model, server, client;
  before(async () => {
    model = mkdtempSync(join(tmpdir(), 'k3-serve-queue-'));
    execFileSync(K3, ['make-tiny', '--out', model]);
    server = startServer(model, ['--max-queue', '0']);
    client = new OpenAI({ apiKey: KEY, baseURL: await server.url, maxRetries: 0 });
  });
  after(async () => {
    if (server) await stopServer(server);
    rmSync(model, { recursive: true, force: true });
  });
  test('503 when no request may wait', async () => {
    await assert.rejects(client.completions.create({ model: model.split('/').pop(), prompt: 'hi', max_tokens: 2 }),
      (e) => e.status === 503 && e.code === 'queue_full');
  });
});
