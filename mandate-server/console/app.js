// The console's shell: configuration, signing in and out, the screens, the confirmation
// dialog, errors, and the poll that brings new reviews in without a reload.
//
// The organization key lives in this tab's sessionStorage only: never in a URL, a cookie
// or localStorage, and it is sent only to the API host in the Authorization header.

import { client, keyEnvironment, ApiError } from "./api.js";
import { h, fill } from "./dom.js";
import * as reviews from "./reviews.js";
import * as decisions from "./decisions.js";
import * as directory from "./directory.js";
import * as enforcement from "./enforcement.js";

const KEY = "mandate-console.key";
const POLL_MS = 3000;

const screens = {
  reviews: reviews.render,
  decisions: decisions.render,
  mandates: directory.renderMandates,
  agents: directory.renderAgents,
  enforcement: enforcement.render,
};

const $ = (id) => document.getElementById(id);

/** What every screen works with. */
const ctx = {
  config: null,
  api: null,
  environment: null,
  organization: null,
  /** Verdict tokens this tab has received (from approvals), by decision id. */
  tokens: new Map(),
  /** The pending reviews as last polled (decisions, oldest first). */
  pending: [],
  report,
  say,
  confirm,
  navigate: (hash) => {
    if (location.hash === hash) route();
    else location.hash = hash;
  },
  refreshPending: () => poll(),
};

let screen = null;
let pollTimer = null;
/** Whether a poll has run since signing in (new reviews are announced after the first). */
let polled = false;

/** Shows an error in words (with the request id) at the top of the screen. */
function report(error) {
  const notice = $("notice");
  const text = error instanceof ApiError ? error.describe() : String(error && error.message ? error.message : error);
  fill(notice, h("p", {}, text), h("button", { type: "button", class: "secondary", onclick: () => (notice.hidden = true) }, "Dismiss"));
  notice.hidden = false;
  if (error instanceof ApiError && error.status === 401) {
    signOut("The API host refused the key (missing or revoked). Sign in again with a valid organization key.");
  }
}

/** Tells screen readers what just happened. */
function say(text) {
  $("live-region").textContent = text;
}

/**
 * A confirmation: a modal dialog with a title, lines of text (nodes or strings), an
 * optional reason field, and Cancel (focused first) and a confirm button. Resolves to
 * `{confirmed, reason}`.
 */
function confirm({ title, lines, confirmLabel, danger = false, reasonLabel = null }) {
  const dialog = $("confirm");
  fill($("confirm-title"), title);
  fill($("confirm-body"), lines.map((line) => h("p", {}, line)));
  const extra = $("confirm-extra");
  let reason = null;
  if (reasonLabel) {
    reason = h("textarea", { id: "confirm-reason", maxlength: "500", rows: "3" });
    fill(extra, h("label", { for: "confirm-reason" }, reasonLabel), reason);
  } else {
    fill(extra);
  }
  const ok = $("confirm-ok");
  ok.textContent = confirmLabel;
  ok.className = danger ? "danger" : "";
  return new Promise((resolve) => {
    const done = (confirmed) => {
      ok.onclick = null;
      $("confirm-cancel").onclick = null;
      dialog.oncancel = null;
      if (dialog.open) dialog.close();
      resolve({ confirmed, reason: reason ? reason.value.trim() : "" });
    };
    ok.onclick = () => done(true);
    $("confirm-cancel").onclick = () => done(false);
    dialog.oncancel = (event) => {
      event.preventDefault();
      done(false);
    };
    dialog.showModal();
    (reason || $("confirm-cancel")).focus();
  });
}

/** Routes `#screen/id` to its screen. */
async function route() {
  if (!ctx.api) return;
  const [name, ...rest] = location.hash
    .replace(/^#/, "")
    .split("/")
    .map((part) => {
      try {
        return decodeURIComponent(part);
      } catch (e) {
        return part;
      }
    });
  const which = screens[name] ? name : "reviews";
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.screen === which) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  $("notice").hidden = true;
  const root = $("screen");
  screen = { name: which, refresh: null };
  const current = screen;
  fill(root);
  try {
    const refresh = await screens[which](ctx, root, rest.join("/") || null);
    if (current === screen) current.refresh = refresh || null;
  } catch (error) {
    report(error);
  }
  const title = root.querySelector("h1");
  if (title && document.activeElement === document.body) title.focus();
}

/** Fetches the pending reviews, oldest first, and lets the screen show what is new. */
async function poll() {
  if (!ctx.api) return;
  try {
    const pending = await ctx.api.all("/v1/decisions", { review_status: "pending" });
    pending.sort((a, b) => a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id));
    const before = new Set(ctx.pending.map((d) => d.id));
    const fresh = pending.filter((d) => !before.has(d.id));
    ctx.pending = pending;
    $("pending-count").textContent = pending.length ? `(${pending.length})` : "";
    if (fresh.length && polled) say(`${fresh.length} new review${fresh.length === 1 ? "" : "s"} waiting`);
    polled = true;
    if (screen && screen.refresh) await screen.refresh();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) report(error);
    // Other failures are shown by the next action; the poll tries again.
  }
}

function showSignedIn() {
  const live = ctx.environment === "live";
  document.body.classList.toggle("live", live);
  const banner = $("env-banner");
  banner.hidden = !live;
  fill(banner, live ? "LIVE environment: approvals, revocations and switches here act on real spending." : "");
  fill(
    $("who"),
    h("span", { class: "org" }, ctx.organization),
    " ",
    h("span", { class: `env-badge ${ctx.environment}`, id: "env-badge" }, ctx.environment.toUpperCase()),
  );
  $("top").hidden = false;
  $("sign-in").hidden = true;
  $("screen").hidden = false;
}

/** Checks `key` against the API (the enforcement answer names organization and environment). */
async function signIn(key) {
  const api = client(ctx.config.api_url, key);
  const answer = await api.get("/v1/enforcement");
  ctx.api = api;
  ctx.environment = answer.environment || keyEnvironment(key);
  ctx.organization = answer.organization || "(organization)";
  ctx.pending = [];
  sessionStorage.setItem(KEY, key);
  showSignedIn();
  await poll();
  await route();
  clearInterval(pollTimer);
  pollTimer = setInterval(() => {
    if (document.visibilityState === "visible") poll();
  }, POLL_MS);
}

function signOut(message = "") {
  sessionStorage.removeItem(KEY);
  clearInterval(pollTimer);
  Object.assign(ctx, { api: null, environment: null, organization: null, pending: [] });
  ctx.tokens.clear();
  screen = null;
  polled = false;
  document.body.classList.remove("live");
  $("env-banner").hidden = true;
  $("top").hidden = true;
  fill($("screen"));
  $("screen").hidden = true;
  $("sign-in").hidden = false;
  $("key").value = "";
  $("sign-in-error").textContent = message;
  $("key").focus();
}

async function submitKey(event) {
  event.preventDefault();
  const input = $("key");
  const key = input.value.trim();
  const error = $("sign-in-error");
  error.textContent = "";
  if (/^ak_(sandbox|live)_/.test(key)) {
    error.textContent = "This is an agent key. The console needs an organization key (sk_sandbox_… or sk_live_…).";
    return;
  }
  if (!keyEnvironment(key)) {
    error.textContent = "An organization key starts with sk_sandbox_ or sk_live_.";
    return;
  }
  try {
    await signIn(key);
    input.value = "";
  } catch (e) {
    ctx.api = null;
    sessionStorage.removeItem(KEY);
    error.textContent = e instanceof ApiError ? e.describe() : String(e);
  }
}

async function boot() {
  $("sign-in-form").addEventListener("submit", submitKey);
  $("sign-out").addEventListener("click", () => signOut("Signed out. The key is forgotten."));
  window.addEventListener("hashchange", route);
  try {
    const response = await fetch("config.json", { cache: "no-store" });
    ctx.config = await response.json();
  } catch (e) {
    $("sign-in-error").textContent = "The console could not read its configuration (config.json).";
    return;
  }
  const origins = ctx.config.origins || [];
  if (!origins.includes(location.origin)) {
    const warning = $("origin-warning");
    warning.hidden = false;
    warning.textContent =
      `This page is open at ${location.origin}, but the API host allows the console only at ` +
      `${origins.length ? origins.join(", ") : "no origin (--console-origin none)"}. ` +
      `Open it there, or start the server with --console-origin ${location.origin}.`;
  }
  const key = sessionStorage.getItem(KEY);
  if (key) {
    try {
      await signIn(key);
      return;
    } catch (e) {
      signOut(e instanceof ApiError ? e.describe() : String(e));
      return;
    }
  }
  $("key").focus();
}

boot();
