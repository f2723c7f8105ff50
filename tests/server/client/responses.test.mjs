// The official OpenAI JavaScript client's `responses` API (the `openai` npm package, 6.x) against
// `k3 serve` on tiny checkpoints of both architectures: whole and streamed responses checked
// against the equivalent chat completions, a function call round trip, previous_response_id served
// from the prefix cache, and hostile requests. Run by ctest (tests/CMakeLists.txt) with K3_CLI and
// K3_NODE_MODULES set; node:test runner.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { K3, KEY, startServer, stopServer } from './serve_process.mjs';

const require = createRequire(join(process.env.K3_NODE_MODULES, 'openai', 'package.json'));
const OpenAI = require('openai').default ?? require('openai');

// The chat messages of a Response's output items (what a chat client would send back).
function assistantMessage(output) {
  const m = { role: 'assistant', content: null };
  for (const item of output) {
    if (item.type === 'reasoning') m.reasoning_content = item.content.map((c) => c.text).join('');
    if (item.type === 'message') m.content = item.content.map((c) => c.text).join('');
    if (item.type === 'function_call') {
      (m.tool_calls ??= []).push({ id: item.call_id, type: 'function', function: { name: item.name, arguments: item.arguments } });
    }
  }
  return m;
}

const reasoningOf = (r) => r.output.filter((i) => i.type === 'reasoning').map((i) => i.content[0].text).join('');
// Output items without their ids, nor the `parsed` member the client's stream helper adds to text parts.
const withoutIds = (output) => output.map(({ id, ...rest }) => (rest.content
  ? { ...rest, content: rest.content.map(({ parsed, ...part }) => part) } : rest));

for (const arch of ['kimi-k3', 'kimi-linear']) {
  describe(`k3 serve /v1/responses (${arch})`, () => {
    let model, server, client, base;
    before(async () => {
      model = mkdtempSync(join(tmpdir(), `k3-responses-${arch}-`));
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
    const instructions = 'You are a terse assistant.';
    const input = 'Name three colours.';
    const chatMessages = [{ role: 'system', content: instructions }, { role: 'user', content: input }];

    test('a whole response equals the chat completion of the same conversation', async () => {
      const r = await client.responses.create({ model: name(), instructions, input, max_output_tokens: 16, temperature: 0 });
      const chat = await client.chat.completions.create({ model: name(), messages: chatMessages, max_tokens: 16, temperature: 0 });
      assert.equal(r.object, 'response');
      assert.match(r.id, /^resp_/);
      assert.equal(r.model, name());
      assert.equal(r.instructions, instructions);
      const finish = chat.choices[0].finish_reason;
      assert.equal(r.status, finish === 'length' ? 'incomplete' : 'completed');
      if (r.status === 'incomplete') assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
      const message = chat.choices[0].message;
      assert.equal(reasoningOf(r), message.reasoning_content ?? '');
      if (!message.tool_calls) assert.equal(r.output_text, message.content ?? '');
      assert.equal(r.usage.input_tokens, chat.usage.prompt_tokens);
      assert.equal(r.usage.output_tokens, chat.usage.completion_tokens);
      assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
      assert.ok(r.usage.output_tokens_details.reasoning_tokens <= r.usage.output_tokens);
      assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
    });

    test('streaming: event order, numbering, and deltas that add up to the final response', async () => {
      const whole = await client.responses.create({ model: name(), instructions, input, max_output_tokens: 16, temperature: 0 });
      const stream = await client.responses.create({ model: name(), instructions, input, max_output_tokens: 16, temperature: 0,
        stream: true });
      const events = [];
      for await (const e of stream) events.push(e);
      assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
      assert.equal(events[0].type, 'response.created');
      assert.equal(events[1].type, 'response.in_progress');
      const last = events.at(-1);
      assert.ok(['response.completed', 'response.incomplete'].includes(last.type), last.type);
      let text = '', reasoning = '';
      const open = new Map();  // item id → output index, between added and done
      for (const e of events.slice(2, -1)) {
        if (e.type === 'response.output_item.added') open.set(e.item.id, e.output_index);
        if ('item_id' in e) assert.equal(open.get(e.item_id), e.output_index, e.type);
        if (e.type === 'response.output_item.done') open.delete(e.item.id);
        if (e.type === 'response.output_text.delta') text += e.delta;
        if (e.type === 'response.reasoning_text.delta') reasoning += e.delta;
      }
      assert.equal(open.size, 0);
      assert.equal(text, whole.output_text);
      assert.equal(reasoning, reasoningOf(whole));
      assert.equal(last.response.status, whole.status);
      assert.deepEqual(withoutIds(last.response.output), withoutIds(whole.output));
      assert.deepEqual(last.response.usage.output_tokens, whole.usage.output_tokens);
      // The client's stream helper accumulates the same final response.
      const helper = client.responses.stream({ model: name(), instructions, input, max_output_tokens: 16, temperature: 0 });
      const final = await helper.finalResponse();
      assert.equal(final.output_text, whole.output_text);
      assert.deepEqual(withoutIds(final.output), withoutIds(whole.output));
    });

    test('a function call round trip renders as the chat conversation with tool calls', async () => {
      const tools = [{ type: 'function', name: 'get_weather', description: 'Weather in a city', strict: false,
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
      const first = await client.responses.create({ model: name(), input: 'Weather in Paris?', tools, tool_choice: 'auto',
        max_output_tokens: 8, temperature: 0 });
      assert.deepEqual(first.tools, tools);
      const followUp = [
        { role: 'user', content: 'Weather in Paris?' },
        { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call_output', call_id: 'call_1', output: '{"temp_c": 21}' },
      ];
      const second = await client.responses.create({ model: name(), input: followUp, tools, max_output_tokens: 8, temperature: 0 });
      const chat = await client.chat.completions.create({ model: name(), max_tokens: 8, temperature: 0,
        tools: [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city', strict: false,
          parameters: tools[0].parameters } }],
        messages: [
          { role: 'user', content: 'Weather in Paris?' },
          { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
            function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
          { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 21}' },
        ] });
      assert.equal(second.usage.input_tokens, chat.usage.prompt_tokens);
      assert.equal(reasoningOf(second), chat.choices[0].message.reasoning_content ?? '');
      assert.deepEqual(assistantMessage(second.output).tool_calls?.map((c) => c.function.name),
        chat.choices[0].message.tool_calls?.map((c) => c.function.name));
      for (const item of second.output.filter((i) => i.type === 'function_call')) {
        assert.match(item.id, /^fc_/);
        assert.ok(item.call_id && item.name && typeof item.arguments === 'string');
      }
    });

    test('a forced function call by the model, streamed, answered through previous_response_id', async () => {
      const tools = [{ type: 'function', name: 'get_weather', description: 'Weather in a city', strict: true,
        parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Oslo'] }, days: { type: 'integer',
          minimum: 1, maximum: 7 } }, required: ['city', 'days'], additionalProperties: false } }];
      const ask = { model: name(), input: 'Weather in Paris?', tools, tool_choice: { type: 'function', name: 'get_weather' },
        max_output_tokens: 200, temperature: 1, store: true };
      const first = await client.responses.create(ask);
      assert.deepEqual(first.tool_choice, { type: 'function', name: 'get_weather' });
      const calls = first.output.filter((i) => i.type === 'function_call');
      assert.ok(calls.length >= 1, JSON.stringify(first.output));
      for (const call of calls) {
        assert.equal(call.name, 'get_weather');
        const args = JSON.parse(call.arguments);
        assert.ok(['Paris', 'Oslo'].includes(args.city) && Number.isInteger(args.days) && args.days >= 1 && args.days <= 7, call.arguments);
      }
      // Streamed: the argument deltas of each call add up to its arguments.
      const stream = await client.responses.create({ ...ask, stream: true });
      const deltas = new Map();
      let completed;
      for await (const e of stream) {
        if (e.type === 'response.function_call_arguments.delta') deltas.set(e.item_id, (deltas.get(e.item_id) ?? '') + e.delta);
        // incomplete: a reply that had to close early to fit max_output_tokens (still whole calls).
        if (e.type === 'response.completed' || e.type === 'response.incomplete') completed = e.response;
      }
      const streamedCalls = completed.output.filter((i) => i.type === 'function_call');
      assert.ok(streamedCalls.length >= 1);
      for (const call of streamedCalls) assert.equal(deltas.get(call.id), call.arguments);
      // The tool's result goes back on the stored response.
      const second = await client.responses.create({ model: name(), previous_response_id: first.id, tools, max_output_tokens: 8,
        temperature: 0, input: calls.map((c) => ({ type: 'function_call_output', call_id: c.call_id, output: '{"temp_c": 21}' })) });
      assert.equal(second.previous_response_id, first.id);
      // The stored conversation grew by the call and its output (K3 drops the earlier turn's reasoning).
      assert.ok(second.usage.input_tokens > first.usage.input_tokens, JSON.stringify([first.usage, second.usage]));
    });

    test('previous_response_id continues the conversation from the prefix cache', async () => {
      const long = 'Tell me a story about a lighthouse keeper who collects sea glass on a windy northern island.';
      const first = await client.responses.create({ model: name(), instructions, input: long, max_output_tokens: 8, temperature: 0 });
      const second = await client.responses.create({ model: name(), instructions, previous_response_id: first.id,
        input: 'And then?', max_output_tokens: 4, temperature: 0 });
      assert.equal(second.previous_response_id, first.id);
      assert.ok(second.usage.input_tokens_details.cached_tokens <= first.usage.input_tokens);
      const chat = await client.chat.completions.create({ model: name(), max_tokens: 4, temperature: 0, messages: [
        { role: 'system', content: instructions }, { role: 'user', content: long }, assistantMessage(first.output),
        { role: 'user', content: 'And then?' }] });
      assert.equal(second.usage.input_tokens, chat.usage.prompt_tokens);
      // A third turn chains through the second.
      const third = await client.responses.create({ model: name(), previous_response_id: second.id, input: 'Go on.',
        max_output_tokens: 2, temperature: 0 });
      assert.ok(third.usage.input_tokens > second.usage.input_tokens);
      // Unknown ids and unstored responses.
      await assert.rejects(client.responses.create({ model: name(), previous_response_id: 'resp_unknown', input: 'x' }),
        (e) => e.status === 400 && e.code === 'previous_response_not_found' && e.param === 'previous_response_id');
      const unstored = await client.responses.create({ model: name(), input: 'x', store: false, max_output_tokens: 2 });
      assert.equal(unstored.store, false);
      await assert.rejects(client.responses.create({ model: name(), previous_response_id: unstored.id, input: 'y' }),
        (e) => e.status === 400 && e.code === 'previous_response_not_found');
    });

    test('hostile input: 4xx naming the field, and the server stays up', async () => {
      const post = (body, headers = {}) => fetch(`${base}/responses`, { method: 'POST',
        headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json', ...headers }, body });
      for (const body of ['{"input": ', '[]', '"x"', '{"input":"\\ud800"}', '['.repeat(5000)]) {
        const r = await post(body);
        assert.equal(r.status, 400, body.slice(0, 40));
        assert.equal((await r.json()).error.type, 'invalid_request_error');
      }
      const refused = [
        [{ input: 5 }, 'input'],
        [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x' }] }] }, 'input[0].content[0].type'],
        [{ input: [{ type: 'computer_call', id: 'c' }] }, 'input[0].type'],
        [{ input: 'x', temperature: 'hot' }, 'temperature'],
        [{ input: 'x', max_output_tokens: -1 }, 'max_output_tokens'],
        [{ input: 'x', tools: [{ type: 'web_search' }] }, 'tools[0].type'],
        [{ input: 'x', reasoning: { effort: 'extreme' } }, 'reasoning.effort'],
        [{ input: 'x', text: { format: { type: 'json_schema', name: 'n', schema: { type: 'number', multipleOf: 2 } } } }, 'text.format.schema'],
        [{ input: 'x', metadata: { a: 1 } }, 'metadata.a'],
        [{ input: 'x', background: true }, 'background'],
      ];
      for (const [body, param] of refused) {
        await assert.rejects(client.responses.create({ model: name(), ...body }), (e) => e.status === 400 && e.param === param,
          JSON.stringify(body));
      }
      await assert.rejects(client.responses.create({ model: 'other', input: 'x' }), (e) => e.status === 404 && e.code === 'model_not_found');
      await assert.rejects(client.responses.create({ model: name(), input: 'x '.repeat(9000) }),
        (e) => e.status === 400 && e.code === 'context_length_exceeded' && e.param === 'input');
      const items = Array.from({ length: 20000 }, () => ({ role: 'user', content: 'hi' }));
      await assert.rejects(client.responses.create({ model: name(), input: items }), (e) => e.status === 400 && e.param === 'input');
      const big = await post(JSON.stringify({ model: name(), input: 'y'.repeat(9 << 20) }));
      assert.equal(big.status, 413);
      const get = await fetch(`${base}/responses`, { headers: { Authorization: `Bearer ${KEY}` } });
      assert.equal(get.status, 405);
      const ok = await client.responses.create({ model: name(), input: 'still there?', max_output_tokens: 2 });
      assert.ok(['completed', 'incomplete'].includes(ok.status));
    });
  });
}
