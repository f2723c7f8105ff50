// Load cost of the npm `tiktoken` package (WASM) with the o200k ranks and the Kimi pattern: CPU
// seconds from reading the ranks to a constructed encoder that has encoded one word.
// Prints one line: "tiktoken-npm load_cpu_s S".
// Usage: node load_tiktoken.mjs NPM_DIR
import { createRequire } from "node:module";
import path from "node:path";
import { KIMI_PATTERN } from "./kimi_pattern.mjs";

const [npmDir] = process.argv.slice(2);
const require = createRequire(path.resolve(npmDir, "package.json"));
const { Tiktoken } = require("tiktoken/lite");
const t0 = process.cpuUsage();
const o200k = require("tiktoken/encoders/o200k_base.json");
const enc = new Tiktoken(o200k.bpe_ranks, {}, KIMI_PATTERN);
enc.encode("hello", [], []);
const dt = process.cpuUsage(t0);
console.log(`tiktoken-npm load_cpu_s ${((dt.user + dt.system) / 1e6).toFixed(3)}`);
