// The web entry in a real browser: headless Chromium loads a page from a local HTTP
// server, the page imports web.js, loads the module with `await init()` (fetched from
// beside web.js, as a browser or an edge runtime does) and runs every shared case
// (testdata/verify/cases.json); it posts the outcomes back and they must be the recorded
// ones, as in Node and in Rust. Without Chromium the test is skipped, saying so, unless
// MANDATE_REQUIRE_BROWSER is set (CI sets it), when it fails. CHROMIUM names the browser
// (default: `chromium` on PATH).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { createServer } from "node:http";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { fileURLToPath } from "node:url";
import path from "node:path";
import { recorded } from "../../test-support/outcome.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../../../..");
const casesPath = process.env.MANDATE_VERIFY_CASES ?? path.join(root, "testdata/verify/cases.json");
const packageDir = process.env.MANDATE_VERIFY_PACKAGE ?? path.resolve(here, "..");
const chromium = process.env.CHROMIUM ?? "chromium";

// The page: the package as a browser imports it, the cases fetched, the outcomes posted.
const PAGE = `<!doctype html>
<meta charset="utf-8">
<script type="module">
  const report = (body) => fetch("/results", { method: "POST", body: JSON.stringify(body) });
  try {
    const web = await import("/pkg/web.js");
    const { outcomes } = await import("/test-support/outcome.js");
    await web.init();
    const file = await (await fetch("/cases.json")).json();
    await report({ outcomes: outcomes(web, file), agent: navigator.userAgent });
  } catch (e) {
    await report({ error: String(e && e.stack || e) });
  }
</script>`;

const TYPES = { ".js": "text/javascript", ".wasm": "application/wasm", ".json": "application/json" };

/** Serves the page, the package, the shared outcome module and the cases; resolves with
 * what the page posts to /results. */
function serve() {
  let deliver;
  const posted = new Promise((resolve) => (deliver = resolve));
  const server = createServer((req, res) => {
    const url = new URL(req.url, "http://localhost");
    if (req.method === "POST" && url.pathname === "/results") {
      let body = "";
      req.on("data", (chunk) => (body += chunk));
      req.on("end", () => {
        res.end();
        deliver(JSON.parse(body));
      });
      return;
    }
    let file;
    if (url.pathname === "/") {
      res.setHeader("content-type", "text/html");
      return res.end(PAGE);
    } else if (url.pathname === "/cases.json") {
      file = casesPath;
    } else if (url.pathname === "/test-support/outcome.js") {
      file = path.join(here, "../../test-support/outcome.js");
    } else if (url.pathname.startsWith("/pkg/")) {
      file = path.join(packageDir, path.normalize(url.pathname.slice("/pkg/".length)));
      if (!file.startsWith(packageDir + path.sep)) file = undefined;
    }
    try {
      const bytes = readFileSync(file);
      res.setHeader("content-type", TYPES[path.extname(file)] ?? "application/octet-stream");
      res.end(bytes);
    } catch {
      res.statusCode = 404;
      res.end();
    }
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve({ server, posted, port: server.address().port })),
  );
}

test("every shared case has the recorded outcome in headless Chromium (web entry)", async (t) => {
  if (spawnSync(chromium, ["--version"]).status !== 0) {
    if (process.env.MANDATE_REQUIRE_BROWSER) {
      assert.fail(`${chromium} is not installed (apt install chromium), and MANDATE_REQUIRE_BROWSER is set`);
    }
    t.skip(`${chromium} is not installed (apt install chromium; CHROMIUM names another)`);
    return;
  }
  const { server, posted, port } = await serve();
  const profile = mkdtempSync(path.join(tmpdir(), "mandate-verify-chromium-"));
  // The flags of a quiet headless browser on a machine with no outside network.
  const browser = spawn(
    chromium,
    [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      `--user-data-dir=${profile}`,
      `http://127.0.0.1:${port}/`,
    ],
    // Its own process group, so that its helper processes (renderer, GPU, crash handler)
    // end with it.
    { stdio: "ignore", detached: true },
  );
  const exited = new Promise((resolve) => browser.once("exit", resolve));
  let timer;
  try {
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error("the page posted nothing in 60 s")), 60_000);
    });
    const page = await Promise.race([posted, timeout]);
    assert.equal(page.error, undefined, `the page failed: ${page.error}`);
    assert.match(page.agent, /Chrome\//);
    const want = recorded(JSON.parse(readFileSync(casesPath, "utf8")));
    assert.equal(page.outcomes.length, want.length);
    page.outcomes.forEach((got, i) => assert.deepEqual(got, want[i], got.name));
  } finally {
    clearTimeout(timer);
    if (browser.exitCode === null && browser.signalCode === null) {
      process.kill(-browser.pid, "SIGKILL");
    }
    await exited;
    server.close();
    // A helper process may still be letting go of the profile for a moment.
    rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  }
});
