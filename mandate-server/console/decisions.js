// Decisions: the log, newest first, with filters; one decision's details with its token as
// the API reads it back (null for decisions stored before tokens were kept), and a verify
// that checks a token against the published JWK Set in the browser.

import { h, fill, details, money, when, utc, verdictBadge, heading } from "./dom.js";
import { verifyToken, renderChecks } from "./verify.js";

const VERDICTS = ["allow", "review", "deny_no_mandate", "deny_revoked", "deny_expired", "deny_replay", "deny_velocity", "deny_category", "deny_recipient", "deny_limit"];

/** The filters as last applied, kept while the person moves between screens. */
let filters = { verdict: "", policy_verdict: "", agent: "", review_status: "" };

export async function render(ctx, root, id) {
  if (id) return detail(ctx, root, id);
  const select = (name, label, values) =>
    h(
      "div",
      { class: "field" },
      h("label", { for: `filter-${name}` }, label),
      h("select", { id: `filter-${name}`, name }, h("option", { value: "" }, "any"), values.map((v) => h("option", { value: v, selected: filters[name] === v }, v))),
    );
  const form = h(
    "form",
    { class: "filters", id: "decision-filters", "aria-label": "Filter decisions" },
    select("verdict", "Verdict", VERDICTS),
    select("policy_verdict", "Policy verdict", VERDICTS),
    select("review_status", "Review", ["pending", "approved", "denied", "expired"]),
    h("div", { class: "field" }, h("label", { for: "filter-agent" }, "Agent"), h("input", { id: "filter-agent", name: "agent", placeholder: "agt_…", value: filters.agent, autocomplete: "off", spellcheck: "false" })),
    h("button", { type: "submit" }, "Apply"),
  );
  const body = h("tbody");
  const more = h("button", { type: "button", class: "secondary", hidden: true }, "Load more");
  const count = h("p", { class: "count-line", role: "status" });
  fill(
    root,
    heading("Decisions"),
    h("p", { class: "lede" }, "Every decision, newest first. Open one for its details and to verify a signed verdict."),
    form,
    count,
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { id: "decision-table" },
        h("caption", { class: "sr-only" }, "Decisions, newest first"),
        h("thead", {}, h("tr", {}, ["When", "Agent", "Amount", "Recipient", "Category", "Verdict", "Policy verdict", "Mode", "Review"].map((c) => h("th", { scope: "col" }, c)))),
        body,
      ),
    ),
    more,
  );

  let cursor = null;
  let shown = 0;
  async function load(reset) {
    if (reset) {
      cursor = null;
      shown = 0;
      fill(body);
    }
    const page = await ctx.api.get("/v1/decisions", { ...filters, limit: 50, cursor });
    for (const d of page.data) body.appendChild(row(d));
    shown += page.data.length;
    cursor = page.has_more ? page.next_cursor : null;
    more.hidden = !cursor;
    count.textContent = shown ? `${shown} decision${shown === 1 ? "" : "s"} shown${cursor ? "; more below" : ""}.` : "No decision matches.";
  }
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    filters = Object.fromEntries(["verdict", "policy_verdict", "agent", "review_status"].map((k) => [k, String(data.get(k) || "").trim()]));
    try {
      await load(true);
      ctx.say(count.textContent);
    } catch (error) {
      ctx.report(error);
    }
  });
  more.addEventListener("click", () => load(false).catch(ctx.report));
  await load(true);
}

function row(d) {
  const r = d.request;
  return h(
    "tr",
    { "data-decision": d.id },
    h("td", {}, h("a", { href: `#decisions/${d.id}`, "aria-label": `Decision ${d.id}` }, when(d.created_at))),
    h("td", {}, r.agent),
    h("td", { class: "num" }, money(r.amount, r.currency)),
    h("td", {}, r.recipient),
    h("td", {}, r.category),
    h("td", {}, verdictBadge(d.verdict)),
    h("td", {}, d.policy_verdict),
    h("td", {}, d.mode),
    // Where the review it opened stands (pending, approved, denied, expired), not just
    // that it opened one.
    h("td", { class: "review-status" }, d.review ? reviewStatus(d) || "—" : "—"),
  );
}

// A review's status in words: a denial its agent made (it withdrew the review) says so.
function reviewStatus(d) {
  return d.review_withdrawn ? `${d.review_status}, withdrawn by the agent` : d.review_status;
}

async function detail(ctx, root, id) {
  const d = await ctx.api.get(`/v1/decisions/${encodeURIComponent(id)}`);
  const r = d.request;
  const known = d.verdict_token || ctx.tokens.get(d.id) || "";
  const token = h("textarea", { id: "token", class: "token", rows: "5", spellcheck: "false", "aria-describedby": "token-help" }, known);
  const checks = h("div", { class: "checks", id: "checks" });
  const verify = h(
    "button",
    {
      type: "button",
      id: "verify",
      onclick: async () => {
        fill(checks, h("p", {}, "Checking…"));
        const result = await verifyToken(ctx, token.value, d);
        fill(checks, renderChecks(result));
        ctx.say(result.ok ? "The token is valid." : "The token is not valid.");
      },
    },
    "Verify",
  );
  fill(
    root,
    h("p", {}, h("a", { href: "#decisions" }, "← All decisions")),
    heading(`Decision ${d.id}`),
    details([
      ["Verdict", verdictBadge(d.verdict)],
      ["Policy verdict", d.policy_verdict],
      ["Mode", d.mode],
      ["Reason", d.reason],
      ["Agent", h("a", { href: `#agents/${r.agent}` }, r.agent)],
      ["Amount", money(r.amount, r.currency)],
      ["Recipient", r.recipient],
      ["Category", r.category],
      ["Mandate", d.mandate ? h("a", { href: `#mandates/${d.mandate}` }, d.mandate) : null],
      ["Review", d.review ? `${d.review}${d.review_status ? ` (${reviewStatus(d)})` : ""}` : null],
      ["Review expires", d.review_expires_at ? when(d.review_expires_at) : undefined],
      ["Approved as", d.review_resolution ? h("a", { id: "resolution", href: `#decisions/${d.review_resolution}` }, d.review_resolution) : undefined],
      ["Supersedes", d.supersedes ? h("a", { href: `#decisions/${d.supersedes}` }, d.supersedes) : null],
      ["Created", when(d.created_at)],
      ["Token issued / expires", `${utc(new Date(Number(d.iat) * 1000))} / ${utc(new Date(Number(d.exp) * 1000))}`],
      ["Nonce", d.nonce],
      ["Policy version", d.policy_version],
      ["Issuer", d.iss],
    ]),
    h("h2", {}, "Signed verdict"),
    h(
      "p",
      { class: "hint", id: "token-help" },
      known
        ? "The token signed for this decision. Verify checks it here, in your browser, against the published JWK Set."
        : "This decision was stored before tokens were kept. Paste the token the agent or the counterparty holds to check it is this decision's, signed by this server.",
    ),
    h("label", { for: "token" }, "Verdict token"),
    token,
    h("div", { class: "actions" }, verify),
    checks,
  );
}
