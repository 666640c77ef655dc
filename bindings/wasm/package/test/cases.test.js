// The shared verification cases (testdata/verify/cases.json, tokens the real server
// signed) through the package's check: each check's outcome must be the one recorded, which
// the Rust check (mandate-core/tests/verify_cases.rs) and the Python package's tests hold to
// as well. Runs the Node entry, and the web entry loaded from the module's bytes as a browser
// would from a URL. MANDATE_VERIFY_PACKAGE names an installed copy to test instead of this
// folder (CI tests the packed tarball installed elsewhere).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import path from "node:path";
import { outcomes, recorded } from "../../test-support/outcome.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../../../..");
const casesPath = process.env.MANDATE_VERIFY_CASES ?? path.join(root, "testdata/verify/cases.json");
const file = JSON.parse(readFileSync(casesPath, "utf8"));
const packageDir = process.env.MANDATE_VERIFY_PACKAGE ?? path.resolve(here, "..");

const entry = (name) => import(pathToFileURL(path.join(packageDir, name)).href);

function runCases(api) {
  const want = recorded(file);
  outcomes(api, file).forEach((got, i) => assert.deepEqual(got, want[i], got.name));
}

test("every shared case has the recorded outcome (Node entry)", async () => {
  runCases(await entry("node.js"));
});

test("every shared case has the recorded outcome (web entry, loaded from bytes)", async () => {
  const web = await entry("web.js");
  assert.throws(() => new web.Checker().check("t", {}, {}, {}), /await init\(\) first/);
  await web.init(readFileSync(path.join(packageDir, "web/mandate_verify_wasm_bg.wasm")));
  runCases(web);
});

test("a refusal is a CheckError with the Rust code, its objections and the claims", async () => {
  const { Checker, CheckError } = await entry("node.js");
  const c = file.cases.find((c) => c.name === "wrong amount").checks[0];
  try {
    new Checker().check(file.tokens[c.token], c.expected, file.key_sets.published, c.options);
    assert.fail("accepted");
  } catch (e) {
    assert.ok(e instanceof CheckError && e instanceof Error);
    assert.equal(e.code, "wrong_amount");
    assert.match(e.message, /amount 42.51 does not match the signed amount 42.50/);
    assert.equal(e.claims.request.amount, "42.50");
  }
});

test("the key set may be the fetched bytes, their text or the parsed object", async () => {
  const { Checker } = await entry("node.js");
  const c = file.cases.find((c) => c.name === "allow").checks[0];
  const published = file.key_sets.published;
  for (const keySet of [published, JSON.stringify(published), new TextEncoder().encode(JSON.stringify(published))]) {
    const v = new Checker().check(file.tokens[c.token], c.expected, keySet, c.options);
    assert.equal(v.claims.request.amount, "42.50");
  }
});

test("the module-level check keeps one replay guard for the process", async () => {
  const { check, CheckError } = await entry("node.js");
  const c = file.cases.find((c) => c.name === "allow").checks[0];
  const args = [file.tokens[c.token], c.expected, file.key_sets.published, c.options];
  assert.equal(check(...args).kid, c.outcome.ok.kid);
  assert.throws(() => check(...args), (e) => e instanceof CheckError && e.code === "replay");
});

test("wrong arguments are an InputError naming the member", async () => {
  const { Checker, InputError } = await entry("node.js");
  const c = file.cases.find((c) => c.name === "allow").checks[0];
  const token = file.tokens[c.token];
  const keys = file.key_sets.published;
  const refuses = (expected, options, pattern) =>
    assert.throws(
      () => new Checker().check(token, expected, keys, options),
      (e) => e instanceof InputError && e instanceof TypeError && e.code === "invalid_input" && pattern.test(e.message),
    );
  refuses({ ...c.expected, amount: 42.5 }, c.options, /expected.amount must be a decimal string/);
  refuses({ ...c.expected, recipent: "vendor:acme" }, c.options, /expected.recipent is not a member/);
  refuses(c.expected, { now: c.options.now }, /options.issuer is missing/);
  refuses(c.expected, { ...c.options, environments: "sandbox" }, /options.environments/);
  refuses(c.expected, { ...c.options, now: 1.5 }, /options.now/);
  assert.throws(() => new Checker().check(token, c.expected, { keys: [] }, c.options), InputError);
});

test("now defaults to the current time, and a Date is accepted", async () => {
  const { Checker } = await entry("node.js");
  const c = file.cases.find((c) => c.name === "allow").checks[0];
  const { now, ...rest } = c.options;
  // The recorded tokens expired long ago: now by default is today, so they are refused.
  assert.throws(
    () => new Checker().check(file.tokens[c.token], c.expected, file.key_sets.published, rest),
    (e) => e.code === "expired",
  );
  const v = new Checker().check(file.tokens[c.token], c.expected, file.key_sets.published, {
    ...rest,
    now: new Date(now * 1000),
  });
  assert.equal(v.environment, "live");
});
