// Building the page: every value from the API goes in as text (text nodes, textContent,
// attribute values), never as markup. Nothing here touches innerHTML.

/**
 * An element: h("p", {class: "x", onclick: f}, "text", child, [more]).
 * Strings become text nodes; arrays are flattened; null and false are skipped.
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      el.className = value;
    } else if (value === true) {
      el.setAttribute(name, "");
    } else {
      el.setAttribute(name, String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

/** Replaces an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A definition list from [term, value] pairs (values are text or nodes). */
export function details(pairs) {
  return h(
    "dl",
    { class: "details" },
    pairs
      .filter(([, value]) => value !== undefined)
      .map(([term, value]) => [h("dt", {}, term), h("dd", {}, value === null ? "—" : value)]),
  );
}

/** An amount with its currency, written as the API sent it (exact decimal text). */
export function money(amount, currency) {
  if (amount === null || amount === undefined) return "—";
  return currency ? `${amount} ${currency}` : String(amount);
}

/** A time as text in UTC, "2026-11-22 14:00:00 UTC", as the API and the CLI give times. */
export function utc(at) {
  if (Number.isNaN(at.getTime())) return "—";
  return `${at.toISOString().slice(0, 19).replace("T", " ")} UTC`;
}

/** A timestamp shown in UTC (the zone named), with the wire's text in its title. */
export function when(iso) {
  if (!iso) return "—";
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return String(iso);
  return h("time", { datetime: iso, title: iso }, utc(at));
}

/** "2 h 05 min", "4 min 10 s", "expired": the time from now until `iso`. */
export function timeLeft(iso, now = Date.now()) {
  const ms = new Date(iso).getTime() - now;
  if (Number.isNaN(ms)) return "unknown";
  if (ms <= 0) return "expired";
  const s = Math.floor(ms / 1000);
  const hours = Math.floor(s / 3600);
  const minutes = Math.floor((s % 3600) / 60);
  if (hours > 0) return `${hours} h ${String(minutes).padStart(2, "0")} min`;
  if (minutes > 0) return `${minutes} min ${String(s % 60).padStart(2, "0")} s`;
  return `${s} s`;
}

/** A verdict as a labelled badge (its text is the verdict itself). */
export function verdictBadge(verdict) {
  const kind = verdict === "allow" ? "ok" : verdict === "review" ? "warn" : "bad";
  return h("span", { class: `badge ${kind}` }, verdict);
}

/** A screen's heading, focusable so that changing screens moves focus to it. */
export function heading(text) {
  return h("h1", { tabindex: "-1", class: "screen-title" }, text);
}

/** Text for screen readers only. */
export function srOnly(text) {
  return h("span", { class: "sr-only" }, text);
}
