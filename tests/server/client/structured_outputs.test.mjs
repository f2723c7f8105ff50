// Structured outputs through the official OpenAI client against `k3 serve` on tiny checkpoints of
// both architectures (random weights: only the grammar makes their replies valid). Every reply under
// response_format json_schema validates under ajv (an implementation independent of k3's); json_object
// gives a JSON object; tool_choice required and a named function give tool calls of declared tools
// whose arguments validate against the tool's parameters; a schema k3 cannot honour is a 400.
// Run by ctest with K3_CLI and K3_NODE_MODULES set (scripts/setup_node.sh installs the packages).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
import { K3, KEY, startServer, stopServer } from './serve_process.mjs';

const require = createRequire(join(process.env.K3_NODE_MODULES, 'openai', 'package.json'));
const OpenAI = require('openai').default ?? require('openai');
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats').default;
const ajv = new Ajv2020({ strict: false });
addFormats(ajv);

// Schemas whose every string and array is bounded, so that a random model's reply ends within
// max_tokens (a trained model closes them by itself); thinking off for the same reason.
const SCHEMAS = {
  person: { type: 'object', properties: { name: { type: 'string', maxLength: 6 }, age: { type: 'integer', minimum: 0, maximum: 120 },
    admin: { type: 'boolean' } }, required: ['name', 'age', 'admin'], additionalProperties: false },
  choice: { type: 'object', properties: { color: { enum: ['red', 'green', 'blue'] }, score: { type: 'number', minimum: -1, maximum: 1 } },
    required: ['color'], additionalProperties: false },
  list: { type: 'object', properties: { tags: { type: 'array', items: { type: 'string', enum: ['a', 'b', 'c'] }, maxItems: 3 },
    when: { type: 'string', format: 'date' } }, required: ['tags', 'when'], additionalProperties: false },
  nested: { type: 'object', $defs: { point: { type: 'object', properties: { x: { type: 'integer', maximum: 99, minimum: 0 },
    y: { type: 'integer', maximum: 99, minimum: 0 } }, required: ['x', 'y'], additionalProperties: false } },
    properties: { from: { $ref: '#/$defs/point' }, to: { $ref: '#/$defs/point' }, label: { anyOf: [{ type: 'null' }, { type: 'string', maxLength: 4 }] } },
    required: ['from', 'to', 'label'], additionalProperties: false },
};

const WEATHER = { type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Oslo'] }, days: { type: 'integer', minimum: 1, maximum: 7 } },
    required: ['city', 'days'] } } };
const TIME = { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } },
  required: ['zone'] } } };

for (const arch of ['kimi-k3', 'kimi-linear']) {
  describe(`structured outputs (${arch})`, () => {
    let model, server, client;
    before(async () => {
      model = mkdtempSync(join(tmpdir(), `k3-structured-${arch}-`));
      execFileSync(K3, ['make-tiny', '--arch', arch, '--out', model, '--seed', '5']);
      server = startServer(model);
      client = new OpenAI({ apiKey: KEY, baseURL: await server.url, maxRetries: 0, timeout: 120000 });
    });
    after(async () => {
      if (server) await stopServer(server);
      rmSync(model, { recursive: true, force: true });
    });
    const name = () => model.split('/').pop();
    const messages = [{ role: 'user', content: 'Answer in JSON.' }];

    for (const [label, schema] of Object.entries(SCHEMAS)) {
      test(`json_schema ${label}: every sampled reply validates`, async () => {
        const validate = ajv.compile(schema);
        const r = await client.chat.completions.create({ model: name(), messages, n: 8, temperature: 1, seed: 11, max_tokens: 400,
          chat_template_kwargs: { thinking: false }, response_format: { type: 'json_schema', json_schema: { name: label, schema } } });
        assert.equal(r.choices.length, 8);
        for (const c of r.choices) {
          assert.equal(c.finish_reason, 'stop', `choice ${c.index}: ${c.message.content}`);
          const value = JSON.parse(c.message.content);
          assert.ok(validate(value), `${c.message.content}: ${ajv.errorsText(validate.errors)}`);
        }
      });
    }

    test('json_object: a JSON object', async () => {
      const r = await client.chat.completions.create({ model: name(), messages, temperature: 0, max_tokens: 200,
        chat_template_kwargs: { thinking: false }, response_format: { type: 'json_object' } });
      const c = r.choices[0];
      if (c.finish_reason === 'stop') assert.equal(typeof JSON.parse(c.message.content), 'object');
      else assert.ok(c.message.content.startsWith('{'), c.message.content);
    });

    test('tool_choice required: a call of a declared tool with valid arguments', async () => {
      const validate = { get_weather: ajv.compile(WEATHER.function.parameters), get_time: ajv.compile(TIME.function.parameters) };
      const r = await client.chat.completions.create({ model: name(), messages: [{ role: 'user', content: 'Weather?' }], n: 4,
        temperature: 1, seed: 3, max_tokens: 300, tools: [WEATHER, TIME], tool_choice: 'required', parallel_tool_calls: false,
        chat_template_kwargs: { thinking: false } });
      for (const c of r.choices) {
        assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
        assert.equal(c.message.tool_calls.length, 1);
        for (const call of c.message.tool_calls) {
          const args = JSON.parse(call.function.arguments);
          assert.ok(validate[call.function.name](args), `${call.function.name} ${call.function.arguments}`);
        }
      }
    });

    test('a named function is the only tool called', async () => {
      const r = await client.chat.completions.create({ model: name(), messages: [{ role: 'user', content: 'Time?' }], temperature: 0,
        max_tokens: 300, tools: [WEATHER, TIME], tool_choice: { type: 'function', function: { name: 'get_time' } },
        chat_template_kwargs: { thinking: false } });
      const calls = r.choices[0].message.tool_calls;
      assert.ok(calls.length >= 1, JSON.stringify(r.choices[0].message));
      for (const call of calls) assert.equal(call.function.name, 'get_time');
    });

    test('max_tokens below the shortest valid reply is a 400 naming it', async () => {
      await assert.rejects(client.chat.completions.create({ model: name(), messages, max_tokens: 3, chat_template_kwargs: { thinking: false },
        response_format: { type: 'json_schema', json_schema: { name: 'person', schema: SCHEMAS.person } } }),
      (e) => e.status === 400 && e.param === 'max_tokens' && /shortest reply/.test(e.message));
    });

    test('a reply that max_tokens would cut closes early, valid, with finish_reason length', async () => {
      const schema = { type: 'object', properties: { text: { type: 'string' } }, required: ['text'], additionalProperties: false };
      const ask = (max_tokens) => client.chat.completions.create({ model: name(), messages, n: 4, temperature: 1, seed: 2, max_tokens,
        chat_template_kwargs: { thinking: false }, response_format: { type: 'json_schema', json_schema: { name: 't', schema } } });
      // The shortest reply's length, from the refusal of a budget below it.
      const needed = await ask(1).then(() => assert.fail('max_tokens 1 was accepted'),
        (e) => Number(e.message.match(/below the (\d+) tokens/)[1]));
      const r = await ask(needed + 2);
      for (const c of r.choices) {
        assert.equal(c.finish_reason, 'length', c.message.content);
        assert.equal(typeof JSON.parse(c.message.content).text, 'string', c.message.content);
      }
      assert.ok(r.usage.completion_tokens <= 4 * (needed + 2), JSON.stringify(r.usage));
    });

    test('a schema k3 cannot honour is a 400 naming it', async () => {
      await assert.rejects(client.chat.completions.create({ model: name(), messages, max_tokens: 5,
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'number', multipleOf: 3 } } } }),
      (e) => e.status === 400 && /multipleOf/.test(e.message));
    });
  });
}

// The 20 schemas of tests/grammar/schemas.json (unbounded strings, arrays and recursion included),
// sampled replies from the random tiny model with a budget of 16 tokens over each schema's
// shortest reply: every reply parses and validates under ajv, whether it ended by itself or was
// closed early to fit max_tokens. K3_SCHEMA_CORPUS_REPLIES sets the replies per schema (5; 50
// gives the 1000 of docs/structured-outputs.md).
const REPLIES = Number(process.env.K3_SCHEMA_CORPUS_REPLIES ?? 5);
describe(`schema corpus: 20 schemas × ${REPLIES} constrained replies`, () => {
  const corpus = JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), '../../grammar/schemas.json'), 'utf8'));
  let model, server, client;
  before(async () => {
    model = mkdtempSync(join(tmpdir(), 'k3-schema-corpus-'));
    execFileSync(K3, ['make-tiny', '--arch', 'kimi-k3', '--out', model, '--seed', '9']);
    server = startServer(model);
    client = new OpenAI({ apiKey: KEY, baseURL: await server.url, maxRetries: 0, timeout: 1200000 });
  });
  after(async () => {
    if (server) await stopServer(server);
    rmSync(model, { recursive: true, force: true });
  });

  test('every reply validates', async () => {
    assert.equal(corpus.length, 20);
    const finishes = { stop: 0, length: 0 };
    const ask = (name, schema, n, seed, max_tokens) => client.chat.completions.create({ model: model.split('/').pop(),
      messages: [{ role: 'user', content: `A ${name}.` }], n, temperature: 1, seed, max_tokens, chat_template_kwargs: { thinking: false },
      response_format: { type: 'json_schema', json_schema: { name, schema } } });
    const t0 = performance.now();
    await Promise.all(corpus.map(async ({ name, schema }, i) => {
      const validate = ajv.compile(schema);
      const needed = await ask(name, schema, 1, 0, 1).then(() => assert.fail(`${name}: max_tokens 1 was accepted`),
        (e) => Number(e.message.match(/below the (\d+) tokens/)[1]));
      // Requests of n ≤ 10, all in flight at once.
      const sizes = Array.from({ length: Math.ceil(REPLIES / 10) }, (_, k) => Math.min(10, REPLIES - 10 * k));
      await Promise.all(sizes.map(async (n, k) => {
        const r = await ask(name, schema, n, 1000 * i + k, needed + 16);
        assert.equal(r.choices.length, n);
        for (const c of r.choices) {
          finishes[c.finish_reason] += 1;
          let value;
          assert.doesNotThrow(() => { value = JSON.parse(c.message.content); }, `${name} choice ${c.index}: ${c.message.content}`);
          assert.ok(validate(value), `${name} choice ${c.index}: ${c.message.content}: ${ajv.errorsText(validate.errors)}`);
        }
      }));
    }));
    assert.equal(finishes.stop + finishes.length, 20 * REPLIES);
    console.log(`# schema corpus: ${20 * REPLIES} replies over 20 schemas valid under ajv (${finishes.stop} ended by themselves, ` +
                `${finishes.length} closed to fit max_tokens) in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  });
});
