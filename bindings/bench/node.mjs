// Verifications a second in Node: mandate-verify's whole check (a fresh Checker each time,
// so the replay guard accepts the one token again) against jose's compactVerify, which
// checks the ES256 signature alone with a key imported once. Each side runs for SECONDS
// (default 3) after a warm-up. Prints TSV rows: runtime, what, verifications_per_s.
// Arguments: the package folder, jose's folder (its node_modules/jose), the cases file.
import { readFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [packageDir, joseDir, casesPath] = process.argv.slice(2);
const seconds = Number(process.env.SECONDS_EACH ?? 3);
const file = JSON.parse(readFileSync(casesPath, "utf8"));
const allow = file.cases.find((c) => c.name === "allow").checks[0];
const token = file.tokens.allow;
const keySetText = JSON.stringify(file.key_sets.published);

const mandate = await import(pathToFileURL(path.join(packageDir, "node.js")).href);
const jose = await import(pathToFileURL(path.join(joseDir, "jose/dist/webapi/index.js")).href);

async function rate(fn) {
  const warm = Date.now() + 500;
  while (Date.now() < warm) await fn();
  let n = 0;
  const start = process.hrtime.bigint();
  const end = Date.now() + seconds * 1000;
  while (Date.now() < end) {
    for (let i = 0; i < 100; i++) await fn();
    n += 100;
  }
  return n / (Number(process.hrtime.bigint() - start) / 1e9);
}

const kid = JSON.parse(Buffer.from(token.split(".")[0], "base64url")).kid;
const jwk = file.key_sets.published.keys.find((k) => k.kid === kid);
const key = await jose.importJWK(jwk, "ES256");

const whole = await rate(() => {
  new mandate.Checker().check(token, allow.expected, keySetText, allow.options);
});
const signature = await rate(() => jose.compactVerify(token, key, { algorithms: ["ES256"] }));
console.log(`node\tmandate-verify check (whole)\t${whole.toFixed(0)}`);
console.log(`node\tjose compactVerify (signature only)\t${signature.toFixed(0)}`);
