// `k3 serve` under load and while draining, on a tiny K3 checkpoint, with plain fetch and an SSE
// parser: 256 concurrent greedy streams each equal to the same prompt's response served alone, the
// server's memory bounded after the load and its gauges back to zero; SIGTERM with streams in
// flight lets them end with [DONE] (or, with --drain-timeout 0, cuts them) and exits 0.
// Run by ctest (tests/CMakeLists.txt) with K3_CLI set; node:test runner.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { K3, KEY, startServer, stopServer } from './serve_process.mjs';

const CLIENTS = 256;
const MAX_TOKENS = 16;
// Every prompt is also served alone first, as the reference of its stream (one after another they
// take most of the time; K3_LOAD_CHECK_EVERY=N checks every N-th prompt only, for quick local runs).
const CHECK_EVERY = Number(process.env.K3_LOAD_CHECK_EVERY ?? 1);
const DRAIN_STREAMS = 64;
const headers = { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' };
const prompts = Array.from({ length: CLIENTS }, (_, i) => `Request ${i}: tell me about the number ${i * 7919 % 1000}.`);

const rssMiB = (pid) => Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/)[1]) / 1024;

async function metrics(base) {
  const text = await (await fetch(base.replace(/\/v1$/, '/metrics'))).text();
  const m = {};
  for (const line of text.split('\n')) {
    const [name, value] = line.split(' ');
    if (name && !name.startsWith('#')) m[name] = Number(value);
  }
  return m;
}

// Polls /metrics until nothing runs, waits or holds a KDA slot (10 s at most).
async function expectIdle(base) {
  let m;
  for (let i = 0; i < 200; ++i) {
    m = await metrics(base);
    if (m.k3_requests_running === 0 && m.k3_requests_waiting === 0 && m.k3_kda_slots_used === 0) return m;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`not idle: ${JSON.stringify(m)}`);
}

// Streams one completion: resolves with its text, whether it ended with [DONE], and the events
// seen. `onFirst` runs when the first event arrives. Every event must be one `data: ...` line.
async function stream(base, body, onFirst = () => {}) {
  const res = await fetch(`${base}/completions`, { method: 'POST', headers,
    body: JSON.stringify({ ...body, stream: true }) });
  if (res.status !== 200) assert.fail(`status ${res.status}: ${await res.text()}`);
  assert.match(res.headers.get('content-type'), /^text\/event-stream/);
  const decoder = new TextDecoder();
  let buffer = '', text = '', done = false, events = 0, first = true, cut = false;
  try {
    for await (const bytes of res.body) {
      buffer += decoder.decode(bytes, { stream: true });
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        assert.ok(event.startsWith('data: ') && !event.includes('\n'), `bad SSE event ${JSON.stringify(event)}`);
        assert.ok(!done, 'an event after [DONE]');
        ++events;
        if (event === 'data: [DONE]') {
          done = true;
          continue;
        }
        const chunk = JSON.parse(event.slice(6));
        for (const c of chunk.choices) text += c.text;
        if (first) {
          first = false;
          onFirst();
        }
      }
    }
  } catch {
    cut = true;  // the connection ended mid-body
  }
  assert.equal(buffer, '', 'bytes after the last event');
  return { text, done, events, cut };
}

describe('k3 serve under load (kimi-k3)', () => {
  let model, server, base;
  before(async () => {
    model = mkdtempSync(join(tmpdir(), 'k3-load-'));
    execFileSync(K3, ['make-tiny', '--arch', 'kimi-k3', '--out', model, '--seed', '3']);
  });
  after(() => rmSync(model, { recursive: true, force: true }));

  test(`${CLIENTS} concurrent streams equal their responses served alone; memory and gauges come back`, async () => {
    server = startServer(model);
    base = await server.url;
    const pid = server.child.pid;
    const alone = new Map();
    let t0 = performance.now();
    for (let i = 0; i < CLIENTS; i += CHECK_EVERY) {
      const prompt = prompts[i];
      const r = await fetch(`${base}/completions`, { method: 'POST', headers,
        body: JSON.stringify({ prompt, max_tokens: MAX_TOKENS, temperature: 0 }) });
      assert.equal(r.status, 200);
      alone.set(i, (await r.json()).choices[0].text);
    }
    const sequentialS = (performance.now() - t0) / 1000;
    const warmRss = rssMiB(pid);
    t0 = performance.now();
    const results = await Promise.all(prompts.map((prompt) => stream(base, { prompt, max_tokens: MAX_TOKENS, temperature: 0 })));
    const concurrentS = (performance.now() - t0) / 1000;
    const loadRss = rssMiB(pid);
    for (let i = 0; i < CLIENTS; ++i) {
      assert.ok(results[i].done, `stream ${i} did not end with [DONE]`);
      if (alone.has(i)) assert.equal(results[i].text, alone.get(i), `stream ${i} differs from its response served alone`);
    }
    const m = await expectIdle(base);
    assert.equal(m['k3_requests_total{status="200"}'], alone.size + CLIENTS);
    const afterRss = rssMiB(pid);
    console.log(`load: ${alone.size} sequential requests ${sequentialS.toFixed(1)} s, ${CLIENTS} concurrent streams ` +
      `${concurrentS.toFixed(1)} s; VmRSS after warm-up ${warmRss.toFixed(0)} MiB, right after the load ` +
      `${loadRss.toFixed(0)} MiB, idle ${afterRss.toFixed(0)} MiB`);
    assert.ok(afterRss < 2 * warmRss + 256, `VmRSS ${afterRss} MiB after the load (${warmRss} MiB after warm-up)`);
    await stopServer(server);
  });

  // DRAIN_STREAMS streams of `maxTokens`, SIGTERM once each has its first event; `drain` is the
  // --drain-timeout.
  async function drainWith(drain, maxTokens) {
    server = startServer(model, ['--drain-timeout', String(drain)]);
    base = await server.url;
    let started = 0, stopping;
    const allStarted = new Promise((resolve) => {
      const onFirst = () => { if (++started === DRAIN_STREAMS) resolve(); };
      stopping = Promise.all(prompts.slice(0, DRAIN_STREAMS).map((prompt) => stream(base, { prompt, max_tokens: maxTokens,
        ignore_eos: true, temperature: 0 }, onFirst)));
    });
    await allStarted;
    const stopped = stopServer(server);
    const results = await stopping;
    return { results, exitS: await stopped };
  }

  test(`SIGTERM lets ${DRAIN_STREAMS} in-flight streams finish with [DONE], then exits 0`, async () => {
    const { results, exitS } = await drainWith(30, 48);
    for (const [i, r] of results.entries()) {
      assert.ok(r.done && !r.cut, `stream ${i} was cut (${r.events} events)`);
    }
    console.log(`drain: ${DRAIN_STREAMS} streams finished, exit ${exitS.toFixed(1)} s after SIGTERM`);
  });

  test('SIGTERM with --drain-timeout 0 cuts the streams and exits 0 promptly', async () => {
    const { results, exitS } = await drainWith(0, 2000);
    for (const [i, r] of results.entries()) assert.ok(!r.done, `stream ${i} ended with [DONE] despite the cut`);
    assert.ok(exitS < 5, `exit took ${exitS} s`);
    console.log(`drain 0: ${DRAIN_STREAMS} streams cut, exit ${exitS.toFixed(1)} s after SIGTERM`);
  });
});
