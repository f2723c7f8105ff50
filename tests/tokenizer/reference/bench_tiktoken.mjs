// Encode throughput of the npm `tiktoken` package (WASM, single thread) with the o200k ranks and
// the Kimi pattern on the reference corpus, in CPU time (median of rounds). Prints one line: "tiktoken-npm MB/s tokens".
// Usage: node bench_tiktoken.mjs NPM_DIR REFERENCE_DIR [ROUNDS]
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { KIMI_PATTERN } from "./kimi_pattern.mjs";

const [npmDir, refDir, roundsArg] = process.argv.slice(2);
const require = createRequire(path.resolve(npmDir, "package.json"));
const { Tiktoken } = require("tiktoken/lite");
const o200k = require("tiktoken/encoders/o200k_base.json");
const enc = new Tiktoken(o200k.bpe_ranks, {}, KIMI_PATTERN);
const corpus = fs.readFileSync(path.join(refDir, "corpus.txt"), "utf8");
const bytes = Buffer.byteLength(corpus);
let tokens = enc.encode(corpus, [], []).length;  // warm-up
const times = [];
for (let r = 0; r < Number(roundsArg ?? 5); ++r) {
  const t0 = process.cpuUsage();  // CPU time, like Google Benchmark's default
  tokens = enc.encode(corpus, [], []).length;
  const dt = process.cpuUsage(t0);
  times.push((dt.user + dt.system) / 1e6);
}
times.sort((a, b) => a - b);
const median = times[Math.floor(times.length / 2)];
console.log(`tiktoken-npm ${(bytes / median / 1e6).toFixed(2)} MB/s ${tokens} tokens`);
