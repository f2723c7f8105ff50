// Documents from constrained random walks (the grammar test JsonSchema.ConstrainedWalksValidate,
// run here with K3_GRAMMAR_WALKS_OUT) validate against their schemas under ajv (draft 2020-12,
// formats from ajv-formats), an implementation independent of k3's own validator.
// Exits 77 (skipped) without the npm packages (scripts/setup_node.sh).
import { createRequire } from "node:module";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const modules = process.env.K3_NODE_MODULES;
const testBinary = process.env.K3_TEST_GRAMMAR;
let Ajv2020, addFormats;
try {
  const require = createRequire(path.join(modules, "ajv", "package.json"));
  Ajv2020 = require("ajv/dist/2020").default;
  addFormats = require("ajv-formats").default;
} catch (e) {
  console.log(`ajv / ajv-formats not found under ${modules}: run scripts/setup_node.sh`);
  process.exit(77);
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "k3-grammar-ajv-"));
const out = path.join(dir, "walks.jsonl");
try {
  execFileSync(testBinary, ["--gtest_filter=JsonSchema.ConstrainedWalksValidate"], {
    env: { ...process.env, K3_GRAMMAR_WALKS_OUT: out },
    stdio: ["ignore", "ignore", "inherit"],
  });
  const lines = fs.readFileSync(out, "utf8").split("\n").filter((l) => l.length > 0);
  if (lines.length < 40) throw new Error(`only ${lines.length} documents written`);
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  let failures = 0;
  for (const line of lines) {
    const { name, schema, document } = JSON.parse(line);
    const validate = ajv.compile(schema);
    if (!validate(document)) {
      ++failures;
      console.log(`${name}: ${JSON.stringify(document)}\n  ${ajv.errorsText(validate.errors)}`);
    }
  }
  console.log(`${lines.length} documents, ${failures} invalid`);
  process.exit(failures === 0 ? 0 : 1);
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
