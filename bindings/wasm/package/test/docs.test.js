// The TypeScript section of docs/embedding.md and the package's README run as they are
// written: each example in a fresh folder where `mandate-verify` is this package, with the
// files it reads (the key set, an `allow` token of the shared cases) and the clock of that
// case (the tokens are short-lived).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../../../..");
const packageDir = process.env.MANDATE_VERIFY_PACKAGE ?? path.resolve(here, "..");
const file = JSON.parse(readFileSync(path.join(root, "testdata/verify/cases.json"), "utf8"));

/** The first fenced block of `language` after the heading `heading` in `page`. */
function block(page, heading, language) {
  const text = readFileSync(path.join(root, page), "utf8");
  const start = heading ? text.indexOf(`\n${heading}\n`) : 0;
  assert.ok(start >= 0, `${page} has no heading ${heading}`);
  const open = text.indexOf("\n```" + language + "\n", start);
  assert.ok(open >= 0, `${page} has no ${language} block under ${heading}`);
  const body = open + language.length + 5;
  return text.slice(body, text.indexOf("\n```\n", body) + 1);
}

function run(example) {
  const dir = mkdtempSync(path.join(tmpdir(), "mandate-verify-docs-"));
  try {
    mkdirSync(path.join(dir, "node_modules"));
    symlinkSync(packageDir, path.join(dir, "node_modules/mandate-verify"), "dir");
    const allow = file.cases.find((c) => c.name === "allow").checks[0];
    writeFileSync(path.join(dir, "jwks.json"), JSON.stringify(file.key_sets.published));
    writeFileSync(path.join(dir, "verdict.txt"), file.tokens.allow + "\n");
    writeFileSync(path.join(dir, "clock.mjs"), `Date.now = () => ${allow.options.now * 1000};\n`);
    writeFileSync(path.join(dir, "example.mjs"), example);
    const out = execFileSync(process.execPath, ["--import", "./clock.mjs", "example.mjs"], {
      cwd: dir,
      encoding: "utf8",
    });
    return { out, jti: allow.outcome.ok.jti };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("the TypeScript example of docs/embedding.md runs as written", () => {
  const { out, jti } = run(block("docs/embedding.md", "## Verifying in TypeScript or JavaScript", "ts"));
  assert.equal(out, `settle 42.50 USD (${jti})\n`);
});

test("the package README's example runs as written", () => {
  const { out, jti } = run(block("bindings/wasm/package/README.md", null, "js"));
  assert.equal(out, `settle 42.50 USD (${jti})\n`);
});
