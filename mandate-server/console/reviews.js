// The first screen: the reviews waiting for a person, oldest first, each with what is asked
// and what the mandate allows; approve or deny behind a confirmation that repeats amount
// and recipient. After an approval, the fresh decision's verdict and token.

import { h, fill, details, money, when, timeLeft, verdictBadge, heading } from "./dom.js";
import { verifyToken, renderChecks } from "./verify.js";

/** The outcome of the last approval or denial, kept while the list refreshes. */
let outcome = null;

export async function render(ctx, root) {
  const list = h("ul", { class: "cards", id: "review-list", "aria-label": "Pending reviews" });
  const result = h("div", { id: "review-result", class: "result", "aria-live": "polite" });
  const empty = h("p", { class: "empty", id: "no-reviews", hidden: true }, "No reviews are waiting. New ones appear here within a few seconds, without a reload.");
  fill(
    root,
    heading("Reviews waiting"),
    h("p", { class: "lede" }, "Oldest first. Each review is a spend above its mandate's review threshold, waiting for you to approve or deny it before it expires."),
    result,
    empty,
    list,
  );
  if (outcome) fill(result, outcome);
  let shown = "";
  const mandates = new Map();

  async function refresh() {
    const pending = ctx.pending;
    const ids = pending.map((d) => d.id).join(",");
    empty.hidden = pending.length > 0;
    if (ids === shown) {
      // Same reviews: only the clocks move (focus and selection stay where they are).
      for (const span of list.querySelectorAll("[data-expires]")) span.textContent = timeLeft(span.dataset.expires);
      return;
    }
    shown = ids;
    mandates.clear();
    await Promise.all(
      [...new Set(pending.map((d) => d.mandate).filter(Boolean))].map(async (id) => {
        try {
          mandates.set(id, await ctx.api.get(`/v1/mandates/${encodeURIComponent(id)}`));
        } catch (error) {
          mandates.set(id, null);
        }
      }),
    );
    const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.action : null;
    fill(list, pending.map((d) => card(ctx, d, mandates.get(d.mandate), result)));
    if (focused) {
      const again = list.querySelector(`[data-action="${CSS.escape(focused)}"]`);
      if (again) again.focus();
    }
  }

  await refresh();
  return refresh;
}

/** The limits of a mandate in words. */
function limits(mandate) {
  if (!mandate) return "could not be read";
  const l = mandate.limits;
  const parts = [`${money(l.per_transaction, l.currency)} a transaction`];
  if (l.per_day) parts.push(`${money(l.per_day, l.currency)} a day`);
  if (l.per_week) parts.push(`${money(l.per_week, l.currency)} a week`);
  if (l.per_month) parts.push(`${money(l.per_month, l.currency)} a month`);
  if (mandate.review_above) parts.push(`review above ${money(mandate.review_above, l.currency)}`);
  return parts.join(" · ");
}

/** Month-to-date spend in words, against the monthly limit if there is one. */
function spent(mandate) {
  if (!mandate || !mandate.spent) return "unknown";
  const l = mandate.limits;
  const month = l.per_month
    ? `${money(mandate.spent.month, l.currency)} of ${money(l.per_month, l.currency)} this month`
    : `${money(mandate.spent.month, l.currency)} this month (no monthly limit)`;
  return `${month}; ${mandate.spent.day} today, ${mandate.spent.week} this week`;
}

function card(ctx, d, mandate, result) {
  const r = d.request;
  const what = `${money(r.amount, r.currency)} to ${r.recipient}`;
  const titleId = `title-${d.id}`;
  const mandateNote =
    mandate && mandate.status !== "active"
      ? h("p", { class: "warning" }, `The mandate is ${mandate.status}: approving now gives a denial.`)
      : null;
  return h(
    "li",
    { class: "card review", "data-decision": d.id },
    h(
      "article",
      { "aria-labelledby": titleId },
      h("h2", { id: titleId }, h("span", { class: "amount" }, money(r.amount, r.currency)), " to ", h("span", { class: "recipient" }, r.recipient)),
      details([
        ["Agent", h("a", { href: `#agents/${r.agent}` }, r.agent)],
        ["Category", r.category],
        ["Reason", d.reason],
        ["Asked", when(d.created_at)],
        ["Time left", h("span", { "data-expires": d.review_expires_at, class: "time-left" }, timeLeft(d.review_expires_at))],
        ["Mandate", d.mandate ? h("a", { href: `#mandates/${d.mandate}` }, d.mandate) : null],
        ["Limits", limits(mandate)],
        ["Spent", spent(mandate)],
        ["Review", d.review],
      ]),
      mandateNote,
      h(
        "div",
        { class: "actions" },
        h("button", { type: "button", "data-action": `approve-${d.review}`, "aria-label": `Approve ${what}`, onclick: () => approve(ctx, d, result) }, "Approve…"),
        h("button", { type: "button", class: "danger", "data-action": `deny-${d.review}`, "aria-label": `Deny ${what}`, onclick: () => deny(ctx, d, result) }, "Deny…"),
      ),
    ),
  );
}

async function approve(ctx, d, result) {
  const r = d.request;
  const what = `${money(r.amount, r.currency)} to ${r.recipient}`;
  const { confirmed } = await ctx.confirm({
    title: "Approve this spend?",
    lines: [
      `Approve ${what}?`,
      `Agent ${r.agent}, category ${r.category}, environment ${ctx.environment}. A fresh decision is made against the mandate as it is now: if the mandate was revoked, expired or is over its limits, the fresh decision is that denial.`,
    ],
    confirmLabel: `Approve ${what}`,
  });
  if (!confirmed) return;
  try {
    const fresh = await ctx.api.post(`/v1/reviews/${encodeURIComponent(d.review)}/approve`);
    ctx.tokens.set(fresh.id, fresh.verdict_token);
    outcome = approvedPanel(ctx, d, fresh);
    fill(result, outcome);
    ctx.say(`Approved. The fresh decision's verdict is ${fresh.verdict}.`);
    result.querySelector("h2").focus();
  } catch (error) {
    ctx.report(error);
  }
  await ctx.refreshPending();
}

async function deny(ctx, d, result) {
  const r = d.request;
  const what = `${money(r.amount, r.currency)} to ${r.recipient}`;
  const { confirmed, reason } = await ctx.confirm({
    title: "Deny this spend?",
    lines: [`Deny ${what}?`, `Agent ${r.agent}, category ${r.category}, environment ${ctx.environment}. No decision is made; the agent's request stays refused.`],
    confirmLabel: `Deny ${what}`,
    danger: true,
    reasonLabel: "Reason (optional, kept with the review)",
  });
  if (!confirmed) return;
  try {
    const review = await ctx.api.post(`/v1/reviews/${encodeURIComponent(d.review)}/deny`, reason ? { reason } : undefined);
    outcome = h(
      "section",
      { class: "outcome denied", "aria-labelledby": "outcome-title" },
      h("h2", { id: "outcome-title", tabindex: "-1" }, `Denied: ${what}`),
      details([
        ["Review", review.id],
        ["Status", review.status],
        ["Reason", review.reason || null],
        ["Resolved", when(review.resolved_at)],
      ]),
    );
    fill(result, outcome);
    ctx.say(`Denied ${what}.`);
    result.querySelector("h2").focus();
  } catch (error) {
    ctx.report(error);
  }
  await ctx.refreshPending();
}

/** The fresh decision of an approval: its verdict (perhaps a denial), reason and token. */
function approvedPanel(ctx, original, fresh) {
  const r = fresh.request;
  const checks = h("div", { class: "checks" });
  const allowed = fresh.verdict === "allow";
  return h(
    "section",
    { class: `outcome ${allowed ? "allowed" : "refused"}`, "aria-labelledby": "outcome-title" },
    h("h2", { id: "outcome-title", tabindex: "-1" }, allowed ? `Approved: ${money(r.amount, r.currency)} to ${r.recipient}` : `Approved, but the fresh decision is ${fresh.verdict}`),
    details([
      ["Fresh decision", h("a", { href: `#decisions/${fresh.id}` }, fresh.id)],
      ["Verdict", verdictBadge(fresh.verdict)],
      ["Policy verdict", fresh.policy_verdict],
      ["Reason", fresh.reason],
      ["Supersedes", original.id],
      ["Token expires", when(new Date(Number(fresh.exp) * 1000).toISOString())],
    ]),
    h("label", { for: "fresh-token" }, "Verdict token (give it to whoever settles the payment)"),
    h("textarea", { id: "fresh-token", class: "token", readonly: true, rows: "4" }, fresh.verdict_token),
    h(
      "div",
      { class: "actions" },
      h("button", {
        type: "button",
        class: "secondary",
        id: "verify-fresh",
        onclick: async () => fill(checks, renderChecks(await verifyToken(ctx, fresh.verdict_token, fresh))),
      }, "Verify this token"),
    ),
    checks,
  );
}
