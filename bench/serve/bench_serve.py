#!/usr/bin/env python3
"""Load generator for OpenAI-compatible servers (k3 serve, vLLM, SGLang), in the shape of
`vllm bench serve`: fixed-length random prompts, a fixed number of requests in flight, streamed
responses, latency percentiles and a /metrics scrape per run.

Python 3 standard library only (asyncio streams over plain TCP or TLS, HTTP/1.1, chunked SSE).
See bench/serve/README.md for the meaning of every figure.
"""

import argparse
import asyncio
import json
import random
import re
import shlex
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

# Words for chat prompts: common, single-token in most vocabularies.
WORDS = ("the of and to in is was for on that with as by at from his her it an were are which this be "
         "or has had not first one their its new after who they have two been also city time year world "
         "school house water river music story light state family north south early great small").split()


class HttpError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# HTTP/1.1 client over asyncio streams

class Endpoint:
    """scheme://host:port plus the path prefix of the API (e.g. /v1)."""

    def __init__(self, base_url):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https"):
            raise SystemExit(f"bench_serve: unsupported URL scheme in {base_url!r}")
        self.tls = u.scheme == "https"
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if self.tls else 80)
        self.prefix = u.path.rstrip("/")
        self.host_header = self.host if u.port is None else f"{self.host}:{self.port}"


class Connection:
    """One TCP connection; reused between requests when keep-alive is on and the server allows it."""

    def __init__(self, ep):
        self.ep = ep
        self.reader = None
        self.writer = None

    async def open(self):
        if self.writer is None:
            ctx = ssl.create_default_context() if self.ep.tls else None
            self.reader, self.writer = await asyncio.open_connection(self.ep.host, self.ep.port, ssl=ctx,
                                                                     limit=1 << 22)

    def close(self):
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception:
                pass
        self.reader = self.writer = None


async def send_request(conn, method, path, headers, body, keep_alive):
    await conn.open()
    lines = [f"{method} {path} HTTP/1.1", f"Host: {conn.ep.host_header}",
             f"Connection: {'keep-alive' if keep_alive else 'close'}"]
    for k, v in headers.items():
        lines.append(f"{k}: {v}")
    data = body if body is not None else b""
    if body is not None or method == "POST":
        lines.append(f"Content-Length: {len(data)}")
    conn.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
    await conn.writer.drain()


async def read_head(reader):
    """Returns (status, headers dict with lower-case names)."""
    status_line = await reader.readline()
    if not status_line:
        raise HttpError("connection closed before the response")
    parts = status_line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise HttpError(f"bad status line {status_line[:80]!r}")
    status = int(parts[1])
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


async def iter_body(reader, headers):
    """Yields the body in pieces as they arrive (de-chunked)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = await reader.readline()
            if not size_line:
                raise HttpError("connection closed inside a chunked body")
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return
            piece = await reader.readexactly(size)
            await reader.readexactly(2)
            yield piece
    elif "content-length" in headers:
        left = int(headers["content-length"])
        while left > 0:
            piece = await reader.read(min(left, 1 << 16))
            if not piece:
                raise HttpError("connection closed inside the body")
            left -= len(piece)
            yield piece
    else:
        while True:
            piece = await reader.read(1 << 16)
            if not piece:
                return
            yield piece


def reusable(headers, keep_alive):
    return keep_alive and headers.get("connection", "").lower() != "close"


async def simple_request(ep, method, path, api_key=None, body=None, timeout=30.0):
    """One-off request on its own connection; returns (status, body bytes)."""
    conn = Connection(ep)
    try:
        async def go():
            hdrs = {"Accept": "*/*"}
            if api_key:
                hdrs["Authorization"] = f"Bearer {api_key}"
            if body is not None:
                hdrs["Content-Type"] = "application/json"
            await send_request(conn, method, path, hdrs, body, False)
            status, headers = await read_head(conn.reader)
            data = b"".join([p async for p in iter_body(conn.reader, headers)])
            return status, data
        return await asyncio.wait_for(go(), timeout)
    finally:
        conn.close()


# ---------------------------------------------------------------------------------------------
# One streamed completion

class Result:
    __slots__ = ("ok", "error", "status", "prompt_tokens", "output_tokens", "ttft", "e2e", "itl", "chunks")

    def __init__(self):
        self.ok = False
        self.error = ""
        self.status = 0
        self.prompt_tokens = 0
        self.output_tokens = 0
        self.ttft = None
        self.e2e = None
        self.itl = []
        self.chunks = 0


def content_of(event, chat):
    choices = event.get("choices") or []
    if not choices:
        return ""
    c = choices[0]
    if chat:
        d = c.get("delta") or {}
        return (d.get("content") or "") + (d.get("reasoning_content") or "")
    return c.get("text") or ""


async def stream_request(conn, ep, args, payload, keep_alive):
    """Sends one streamed request on conn; returns (Result, whether conn can be reused)."""
    r = Result()
    path = ep.prefix + ("/chat/completions" if args.endpoint == "chat" else "/completions")
    hdrs = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if args.api_key:
        hdrs["Authorization"] = f"Bearer {args.api_key}"
    body = json.dumps(payload).encode()
    chat = args.endpoint == "chat"
    start = time.perf_counter()
    last = None
    done = False
    headers = {}
    try:
        await send_request(conn, "POST", path, hdrs, body, keep_alive)
        r.status, headers = await read_head(conn.reader)
        if r.status != 200:
            data = b"".join([p async for p in iter_body(conn.reader, headers)])
            r.error = f"HTTP {r.status}: {data[:200].decode('utf-8', 'replace')}"
            return r, reusable(headers, keep_alive)
        buf = b""
        async for piece in iter_body(conn.reader, headers):
            now = time.perf_counter()
            buf += piece
            while True:
                m = re.search(rb"\r?\n\r?\n", buf)
                if m is None:
                    break
                raw, buf = buf[:m.start()], buf[m.end():]
                for line in raw.split(b"\n"):
                    line = line.rstrip(b"\r")
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        done = True
                        continue
                    event = json.loads(data)
                    if "error" in event:
                        err = event["error"]
                        r.error = "stream error: " + (err.get("message", "") if isinstance(err, dict) else str(err))
                        continue
                    if event.get("usage"):
                        r.prompt_tokens = event["usage"].get("prompt_tokens", 0) or 0
                        r.output_tokens = event["usage"].get("completion_tokens", 0) or 0
                    if content_of(event, chat):
                        r.chunks += 1
                        if r.ttft is None:
                            r.ttft = now - start
                        else:
                            r.itl.append(now - last)
                        last = now
        r.e2e = time.perf_counter() - start
        if not r.error and not done:
            r.error = "stream ended without [DONE]"
        if not r.error and r.ttft is None:
            r.error = "no content in the stream"
        if not r.output_tokens:
            r.output_tokens = r.chunks  # server without usage: one token per chunk
        r.ok = not r.error
        return r, reusable(headers, keep_alive) and done
    except (OSError, asyncio.IncompleteReadError, HttpError, ValueError) as e:
        r.error = f"{type(e).__name__}: {e}"
        return r, False


# ---------------------------------------------------------------------------------------------
# Prompts

def make_payload(args, rng):
    p = {"model": args.model, "max_tokens": args.output_len, "temperature": args.temperature,
         "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    if args.endpoint == "chat":
        text = " ".join(rng.choice(WORDS) for _ in range(args.input_len))
        p["messages"] = [{"role": "user", "content": text}]
    else:
        lo, hi = args.token_range
        p["prompt"] = [rng.randrange(lo, hi) for _ in range(args.input_len)]
    return p


# ---------------------------------------------------------------------------------------------
# Runs

async def run_requests(ep, args, payloads, concurrency):
    """Sends payloads keeping `concurrency` in flight; returns (results, duration seconds)."""
    queue = list(reversed(payloads))
    results = []

    async def worker():
        conn = Connection(ep)
        try:
            while queue:
                payload = queue.pop()
                try:
                    r, keep = await asyncio.wait_for(stream_request(conn, ep, args, payload, args.keep_alive),
                                                     args.request_timeout)
                except asyncio.TimeoutError:
                    r, keep = Result(), False
                    r.error = f"timeout after {args.request_timeout} s"
                results.append(r)
                if not keep:
                    conn.close()
        finally:
            conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(payloads)))))
    return results, time.perf_counter() - start


def percentile(values, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def mean(values):
    return sum(values) / len(values) if values else None


def parse_metrics(text):
    """Prometheus text -> {name{labels}: value}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            pass
    return out


async def scrape(ep, args):
    try:
        status, body = await simple_request(ep, "GET", ep.prefix + "/metrics", args.api_key)
        return parse_metrics(body.decode("utf-8", "replace")) if status == 200 else None
    except (OSError, HttpError, asyncio.TimeoutError, ValueError):
        return None


def metric_delta(before, after, name):
    if before is None or after is None or name not in after:
        return None
    return after[name] - before.get(name, 0.0)


def summarize(concurrency, results, duration, before, after):
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    out_tok = sum(r.output_tokens for r in ok)
    in_tok = sum(r.prompt_tokens for r in ok)
    ttft = [r.ttft for r in ok]
    itl = [g for r in ok for g in r.itl]
    tpot = [(r.e2e - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    e2e = [r.e2e for r in ok]
    ms = lambda v: None if v is None else v * 1000.0  # noqa: E731
    s = {
        "concurrency": concurrency, "requests": len(results), "completed": len(ok), "failed": len(failed),
        "duration_s": duration,
        "request_throughput": len(ok) / duration if duration > 0 else None,
        "input_tokens": in_tok, "output_tokens": out_tok,
        "output_throughput": out_tok / duration if duration > 0 else None,
        "total_token_throughput": (in_tok + out_tok) / duration if duration > 0 else None,
        "mean_ttft_ms": ms(mean(ttft)), "p50_ttft_ms": ms(percentile(ttft, 50)), "p99_ttft_ms": ms(percentile(ttft, 99)),
        "mean_itl_ms": ms(mean(itl)), "p50_itl_ms": ms(percentile(itl, 50)), "p99_itl_ms": ms(percentile(itl, 99)),
        "mean_tpot_ms": ms(mean(tpot)), "p50_tpot_ms": ms(percentile(tpot, 50)), "p99_tpot_ms": ms(percentile(tpot, 99)),
        "mean_e2e_ms": ms(mean(e2e)), "p50_e2e_ms": ms(percentile(e2e, 50)), "p99_e2e_ms": ms(percentile(e2e, 99)),
        "tokens_per_chunk": out_tok / sum(r.chunks for r in ok) if ok and sum(r.chunks for r in ok) else None,
    }
    errors = {}
    for r in failed:
        key = r.error[:120]
        errors[key] = errors.get(key, 0) + 1
    s["errors"] = errors
    hit = metric_delta(before, after, "k3_prefix_cache_hit_tokens_total")
    query = metric_delta(before, after, "k3_prefix_cache_query_tokens_total")
    bsum = metric_delta(before, after, "k3_step_batch_sequences_sum")
    bcount = metric_delta(before, after, "k3_step_batch_sequences_count")
    tsum = metric_delta(before, after, "k3_step_batch_tokens_sum")
    tcount = metric_delta(before, after, "k3_step_batch_tokens_count")
    s["server"] = {
        "prefix_cache_hit_tokens": hit, "prefix_cache_query_tokens": query,
        "prefix_cache_hit_rate": hit / query if hit is not None and query else None,
        "steps": bcount,
        "mean_batch_sequences": bsum / bcount if bsum is not None and bcount else None,
        "mean_batch_tokens": tsum / tcount if tsum is not None and tcount else None,
    }
    return s


COLUMNS = [  # (header, key, format)
    ("conc", "concurrency", "{:.0f}"), ("ok", "completed", "{:.0f}"), ("fail", "failed", "{:.0f}"),
    ("dur s", "duration_s", "{:.1f}"), ("req/s", "request_throughput", "{:.2f}"),
    ("out tok/s", "output_throughput", "{:.1f}"), ("tot tok/s", "total_token_throughput", "{:.1f}"),
    ("TTFT mean", "mean_ttft_ms", "{:.0f}"), ("p50", "p50_ttft_ms", "{:.0f}"), ("p99", "p99_ttft_ms", "{:.0f}"),
    ("ITL mean", "mean_itl_ms", "{:.1f}"), ("p50", "p50_itl_ms", "{:.1f}"), ("p99", "p99_itl_ms", "{:.1f}"),
    ("TPOT p50", "p50_tpot_ms", "{:.1f}"), ("p99", "p99_tpot_ms", "{:.1f}"),
    ("E2E p50", "p50_e2e_ms", "{:.0f}"), ("p99", "p99_e2e_ms", "{:.0f}"),
    ("batch", ("server", "mean_batch_sequences"), "{:.1f}"), ("hit tok", ("server", "prefix_cache_hit_tokens"), "{:.0f}"),
]


def fmt_row(s):
    cells = []
    for _, key, f in COLUMNS:
        v = s[key[0]][key[1]] if isinstance(key, tuple) else s[key]
        cells.append("-" if v is None else f.format(v))
    return cells


def print_table(rows, header_note):
    heads = [h for h, _, _ in COLUMNS]
    body = [fmt_row(s) for s in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(heads)]
    line = "  ".join(h.rjust(w) for h, w in zip(heads, widths))
    print("=" * len(line))
    print(header_note)
    print("latencies in ms; TTFT/ITL/TPOT/E2E as in vllm bench serve; batch = mean sequences per engine step")
    print("-" * len(line))
    print(line)
    for r in body:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    print("=" * len(line))
    for s in rows:
        for err, n in s["errors"].items():
            print(f"conc {s['concurrency']}: {n} x {err}")
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------
# Launching a server

class Launched:
    READY = re.compile(r"ready at (https?://\S+?)/v1\b")

    def __init__(self, cmd, log_path, timeout):
        self.log = open(log_path, "w") if log_path else None
        self.proc = subprocess.Popen(shlex.split(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)
        deadline = time.monotonic() + timeout
        self.base_url = None
        ready = threading.Event()

        def pump():
            for line in self.proc.stdout:
                if self.log:
                    self.log.write(line)
                    self.log.flush()
                m = self.READY.search(line)
                if m and self.base_url is None:
                    self.base_url = m.group(1) + "/v1"
                    ready.set()
            ready.set()

        self.thread = threading.Thread(target=pump, daemon=True)
        self.thread.start()
        while not ready.wait(0.2):
            if time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"bench_serve: no ready line from the server within {timeout} s")
        if self.base_url is None:
            raise SystemExit(f"bench_serve: the server exited (status {self.proc.wait()}) before it was ready")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.thread.join(5)
        if self.log:
            self.log.close()
        return self.proc.returncode


# ---------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--base-url", default="http://127.0.0.1:8000", help="server URL; /v1 is appended if missing")
    src.add_argument("--launch", metavar="CMD", help="start this server command (e.g. 'k3 serve --model DIR --port 0'), "
                     "wait for its 'ready at URL' line, SIGTERM it at the end")
    p.add_argument("--launch-timeout", type=float, default=900.0, help="seconds to wait for the ready line")
    p.add_argument("--server-log", metavar="FILE", help="with --launch: write the server's output here")
    p.add_argument("--model", help="model name (default: the first of GET /v1/models)")
    p.add_argument("--endpoint", choices=("completions", "chat"), default="completions",
                   help="completions: token-id-array prompts; chat: a text prompt of about input-len words")
    p.add_argument("--concurrency", default="1,8,64,256", help="comma-separated list; one run per value")
    p.add_argument("--num-prompts", type=int, help="requests per run (default: max(4 x concurrency, 32))")
    p.add_argument("--input-len", type=int, default=128, help="prompt tokens (chat: words)")
    p.add_argument("--output-len", type=int, default=32, help="max_tokens, with ignore_eos")
    p.add_argument("--token-range", default="10,250",
                   help="LO,HI: prompt token ids are drawn from [LO, HI); must be ordinary ids of the vocabulary (widen it for a real model, e.g. 1000,150000)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0, help="prompt generator seed")
    p.add_argument("--warmup", type=int, default=0, help="requests (at the run's concurrency) before each run")
    p.add_argument("--api-key", help="sent as 'Authorization: Bearer KEY'")
    p.add_argument("--keep-alive", action="store_true", help="reuse connections (default: one per request)")
    p.add_argument("--request-timeout", type=float, default=1800.0, help="seconds per request")
    p.add_argument("--json", metavar="FILE", help="write the config and per-run results here")
    a = p.parse_args(argv)
    try:
        a.concurrency = [int(c) for c in a.concurrency.split(",") if c.strip()]
        lo, hi = (int(x) for x in a.token_range.split(","))
        a.token_range = (lo, hi)
    except ValueError:
        p.error("--concurrency takes integers like 1,8,64; --token-range takes LO,HI")
    if not a.concurrency or min(a.concurrency) < 1 or lo < 0 or hi <= lo:
        p.error("concurrency values must be >= 1 and --token-range LO < HI")
    if a.input_len < 1 or a.output_len < 1:
        p.error("--input-len and --output-len must be >= 1")
    return a


async def main_async(args, base_url):
    if not urllib.parse.urlsplit(base_url).path.rstrip("/").endswith("/v1"):
        base_url = base_url.rstrip("/") + "/v1"
    ep = Endpoint(base_url)
    root = Endpoint(base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url)
    if not args.model:
        status, body = await simple_request(ep, "GET", ep.prefix + "/models", args.api_key)
        if status != 200:
            raise SystemExit(f"bench_serve: GET /v1/models answered {status}: {body[:200]!r}")
        args.model = json.loads(body)["data"][0]["id"]
    rng = random.Random(args.seed)
    rows = []
    for c in args.concurrency:
        n = args.num_prompts or max(4 * c, 32)
        if args.warmup:
            await run_requests(ep, args, [make_payload(args, rng) for _ in range(args.warmup)], c)
        payloads = [make_payload(args, rng) for _ in range(n)]
        before = await scrape(root, args)
        results, duration = await run_requests(ep, args, payloads, c)
        after = await scrape(root, args)
        rows.append(summarize(c, results, duration, before, after))
        print(f"concurrency {c}: {rows[-1]['completed']}/{n} completed in {duration:.1f} s", file=sys.stderr)
    return rows


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    server = Launched(args.launch, args.server_log, args.launch_timeout) if args.launch else None
    try:
        base_url = server.base_url if server else args.base_url
        rows = asyncio.run(main_async(args, base_url))
    finally:
        if server:
            rc = server.stop()
            print(f"server exited with status {rc}", file=sys.stderr)
    note = (f"model {args.model}  endpoint {args.endpoint}  input {args.input_len}  output {args.output_len}  "
            f"temperature {args.temperature}  keep-alive {'on' if args.keep_alive else 'off'}  base {base_url}")
    print_table(rows, note)
    if args.json:
        config = {k: v for k, v in vars(args).items() if k != "api_key"}
        with open(args.json, "w") as f:
            json.dump({"config": config, "base_url": base_url, "runs": rows}, f, indent=2)
    return 1 if any(s["completed"] == 0 for s in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
