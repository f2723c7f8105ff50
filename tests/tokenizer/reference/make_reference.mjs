// Independent reference for k3's tokenizer: npm `tiktoken` (Rust tiktoken core as WASM) with the
// o200k_base ranks, the Kimi pre-tokenizer pattern in its original Rust syntax and 256 specials.
// Writes into OUT_DIR:
//   tiktoken.model  o200k ranks as "<base64> <rank>" lines
//   specials.txt    the 256 special names, one per line, ids num_base.. in order
//   docs.bin        the corpus: per document u32 byte length + UTF-8 bytes (little-endian)
//   ids_none.bin    per document u32 count + u32 ids, specials treated as text
//   ids_all.bin     the same with every special allowed
//   corpus.txt      all documents joined (the throughput corpus)
// Usage: node make_reference.mjs NPM_DIR OUT_DIR
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { KIMI_PATTERN } from "./kimi_pattern.mjs";

const [npmDir, outDir] = process.argv.slice(2);
const require = createRequire(path.resolve(npmDir, "package.json"));
const { Tiktoken } = require("tiktoken/lite");
const o200k = require("tiktoken/encoders/o200k_base.json");


// ---- o200k ranks → tiktoken.model ------------------------------------------------------------
const plain = new Tiktoken(o200k.bpe_ranks, {}, o200k.pat_str);
// decode_single_token_bytes throws on a missing rank, so every rank below the count exists: dense.
const count = plain.token_byte_values().length;
const lines = [];
for (let rank = 0; rank < count; ++rank)
  lines.push(Buffer.from(plain.decode_single_token_bytes(rank)).toString("base64") + " " + rank);
const numBase = lines.length;

const named = { 0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>" };
const specialNames = [];
const specials = {};
for (let i = 0; i < 256; ++i) {
  const name = named[i] ?? `<|reserved_token_${numBase + i}|>`;
  specialNames.push(name);
  specials[name] = numBase + i;
}
const enc = new Tiktoken(o200k.bpe_ranks, specials, KIMI_PATTERN);

// ---- deterministic mixed-script corpus ---------------------------------------------------------
let seed = 0x9e3779b9;
function rnd() {  // mulberry32
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rnd() * a.length)];
const int = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1));
const range = (lo, hi) => String.fromCodePoint(int(lo, hi));
const repeat = (n, f) => Array.from({ length: n }, f).join("");

// Only code points assigned before Unicode 14 (PCRE2 10.42's tables): see kimi_pattern().
const words = ("the of and to in is that it for was on are with as be at by this from have or an " +
  "model token engine weight layer cache kernel batch stream parser value index header shard " +
  "I'm can't WE'LL they'RE you've she'd it's DON'T").split(" ");
const idents = ["getUserName", "XMLHttpRequest", "parseJSON", "HELLOWorld", "iPhone", "snake_case_name",
  "kvCacheSize", "__init__", "std::vector<int>", "camelCaseWord", "URLParser2", "ABCdefGHI"];
const emoji = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "🇯🇵", "❤️", "🔥", "✨", "🎉", "🙂", "👩🏿‍💻", "🏳️‍🌈", "☕", "🚀"];
const spaces = [" ", "  ", "   ", "\t", "\t\t", "\u00a0", "\u3000", "\u0085", "\u2028", "\u2029", "\u202f",
  "\ufeff", "\u200b", "\u001c", "\u001f", "\r\n", "\n", "\n\n", "\r\r\n\n", "   \n  ", " \r\n "];
const digits = () => pick([() => String(int(0, 99999999)), () => `${int(0, 999)}.${int(0, 99999)}`,
  () => repeat(int(1, 6), () => range(0xff10, 0xff19)), () => repeat(int(1, 5), () => range(0x0660, 0x0669)),
  () => pick(["Ⅻ", "²", "½", "٣", "४२", "①②"])])();
const han = () => repeat(int(1, 8), () => (rnd() < 0.05 ? pick(["々", "〇", "\u2e80", "\uf900", "𠀀", "𪚥"]) : range(0x4e00, 0x9fa5)));
const kana = () => repeat(int(1, 8), () => (rnd() < 0.5 ? range(0x3041, 0x3093) : range(0x30a1, 0x30f6))) + (rnd() < 0.2 ? "ー" : "");
const cjkPunct = () => pick(["、", "。", "「", "」", "〆", "・", "！", "？", "（", "）"]);
const scripts = [
  () => repeat(int(2, 8), () => range(0x0430, 0x044f)),                     // Cyrillic
  () => repeat(int(2, 6), () => range(0xac00, 0xd7a3)),                     // Hangul
  () => repeat(int(2, 6), () => range(0x0628, 0x064a) + (rnd() < 0.5 ? range(0x064b, 0x0652) : "")),  // Arabic + harakat
  () => repeat(int(2, 6), () => range(0x0915, 0x0939) + (rnd() < 0.4 ? range(0x093e, 0x094c) : "")),  // Devanagari + marks
  () => repeat(int(2, 6), () => range(0x0e01, 0x0e2e) + (rnd() < 0.3 ? range(0x0e31, 0x0e3a) : "")),  // Thai
  () => repeat(int(2, 6), () => range(0x03b1, 0x03c9)),                     // Greek
  () => "e\u0301" + pick(words), () => "\u0301abc", () => "ǅungla", () => "ʰʲword", () => "Straße", () => "ſtar",
];
const piece = () => {
  const r = rnd();
  if (r < 0.30) return pick(words);
  if (r < 0.40) return pick(idents);
  if (r < 0.50) return han();
  if (r < 0.55) return kana();
  if (r < 0.58) return cjkPunct();
  if (r < 0.68) return pick(scripts)();
  if (r < 0.75) return digits();
  if (r < 0.80) return pick(emoji);
  if (r < 0.86) return pick(["!!!", "...", "->", "==", "/", "'s", "’s", "'S", "\"", "(", ")", "{", "}", "#", "<|", "|>", "/*", "*/"]);
  if (r < 0.92) return pick(["<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>", "[EOS]", "<|open|", `<|reserved_token_${numBase + 20}|>`]);
  return pick(spaces);
};
const document = () => {
  let s = "";
  const n = int(5, 400);
  for (let i = 0; i < n; ++i) s += piece() + (rnd() < 0.6 ? " " : rnd() < 0.5 ? "" : pick(spaces));
  if (rnd() < 0.05) s += " ".repeat(int(20, 3000)) + "x" + "y".repeat(int(20, 3000));
  return s;
};

const tricky = [
  "getUserName iPhone", "XMLHttpRequest parseJSON", "HELLOWorld", "中文English混合", "中文。你好、世界「引用」",
  "日本語のテキストとカタカナ", "I'm can't WE'LL they'RE", "it'ſ", "don't’s", "it'S", "we'll", "1234567 89", "x=3.14159",
  "１２３４５", "Ⅻ²٣4", "Hello world!!!\n\n  foo", "  leading", "trailing   ", "a\r\nb\r\n\r\n c", "x   \n  y",
  "\t\tindent\n", "path/to/file.py", "emoji 😀👍🏽 done", "x\u0085y\u00a0z\u3000w", "a\ufeffb", "a\u001cb",
  "<|open|>think<|sep|>", "\u2e80\u3005\u3006\u3007", "한국어 텍스트", "ภาษาไทย", "हिन्दी", "العَرَبِيَّة", "\u0301abc",
  "e\u0301", "👨‍👩‍👧‍👦🇫🇷👩🏿‍💻", "\r\r\n\n", "   \n  y", "a\u2028b\u2029c", "zero\u200bwidth", "\uf900\u{20000}",
  "<|open|", `<|reserved_token_${numBase + 16}|>`, "[EOS]", "", " ", "\n", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  "abababababababababababababababab", " ".repeat(1000) + "end", "ab".repeat(2000),
];

// Every code point of White_Space and of the general categories Zs and Cf (Unicode 15), in
// contexts where whitespace and punctuation split differently (U+180E is Cf, not White_Space).
const classRanges = [[0x09, 0x0d], [0x20, 0x20], [0x85, 0x85], [0xa0, 0xa0], [0x1680, 0x1680], [0x2000, 0x200a],
  [0x2028, 0x2029], [0x202f, 0x202f], [0x205f, 0x205f], [0x3000, 0x3000],  // White_Space ⊇ Zs
  [0xad, 0xad], [0x600, 0x605], [0x61c, 0x61c], [0x6dd, 0x6dd], [0x70f, 0x70f], [0x890, 0x891], [0x8e2, 0x8e2],
  [0x180e, 0x180e], [0x200b, 0x200f], [0x202a, 0x202e], [0x2060, 0x2064], [0x2066, 0x206f], [0xfeff, 0xfeff],
  [0xfff9, 0xfffb], [0x110bd, 0x110bd], [0x110cd, 0x110cd], [0x13430, 0x1343f], [0x1bca0, 0x1bca3],
  [0x1d173, 0x1d17a], [0xe0001, 0xe0001], [0xe0020, 0xe007f]];  // Cf
const classDocs = [];
for (const [lo, hi] of classRanges) {
  for (let c = lo; c <= hi; ++c) {
    const x = String.fromCodePoint(c);
    classDocs.push(` ${x}`, `a ${x} b`, `${x}\n`, `  ${x}`, `${x}  b`, ` \u2028${x}`);
  }
}

const docs = [...tricky, ...classDocs];
let bytes = 0;
for (const d of docs) bytes += Buffer.byteLength(d);
while (bytes < 1_100_000) {
  const d = document();
  docs.push(d);
  bytes += Buffer.byteLength(d);
}

// ---- write --------------------------------------------------------------------------------------
fs.mkdirSync(outDir, { recursive: true });
const u32 = (n) => { const b = Buffer.alloc(4); b.writeUInt32LE(n); return b; };
const idsBlock = (ids) => Buffer.concat([u32(ids.length), Buffer.from(new Uint32Array(ids).buffer)]);
fs.writeFileSync(path.join(outDir, "tiktoken.model"), lines.join("\n") + "\n");
fs.writeFileSync(path.join(outDir, "specials.txt"), specialNames.join("\n") + "\n");
fs.writeFileSync(path.join(outDir, "docs.bin"), Buffer.concat(docs.flatMap((d) => { const b = Buffer.from(d); return [u32(b.length), b]; })));
fs.writeFileSync(path.join(outDir, "ids_none.bin"), Buffer.concat(docs.map((d) => idsBlock(enc.encode(d, [], [])))));
fs.writeFileSync(path.join(outDir, "ids_all.bin"), Buffer.concat(docs.map((d) => idsBlock(enc.encode(d, "all")))));
fs.writeFileSync(path.join(outDir, "corpus.txt"), docs.join(""));
enc.free();
console.log(`tokenizer reference: ${docs.length} documents, ${bytes} bytes, ${numBase} ranks → ${outDir}`);
