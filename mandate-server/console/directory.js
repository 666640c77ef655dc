// Mandates and agents: lists and details; revoking a mandate behind a confirmation.

import { h, fill, details, money, when, heading, verdictBadge } from "./dom.js";

function table(caption, columns, rows) {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      {},
      h("caption", { class: "sr-only" }, caption),
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows),
    ),
  );
}

function limitsText(m) {
  const l = m.limits;
  return [
    `${money(l.per_transaction, l.currency)} a transaction`,
    l.per_day && `${money(l.per_day, l.currency)} a day`,
    l.per_week && `${money(l.per_week, l.currency)} a week`,
    l.per_month && `${money(l.per_month, l.currency)} a month`,
  ]
    .filter(Boolean)
    .join(" · ");
}

function mandateRow(m) {
  return h(
    "tr",
    { "data-mandate": m.id },
    h("td", {}, h("a", { href: `#mandates/${m.id}` }, m.id)),
    h("td", {}, m.agent),
    h("td", {}, h("span", { class: `status ${m.status}` }, m.status)),
    h("td", {}, limitsText(m)),
    h("td", {}, m.expires),
  );
}

export async function renderMandates(ctx, root, id) {
  if (id) return mandateDetail(ctx, root, id);
  const mandates = await ctx.api.all("/v1/mandates", {}, 300);
  fill(
    root,
    heading("Mandates"),
    h("p", { class: "lede" }, "Newest first. An agent has at most one current mandate; a new one supersedes the last."),
    mandates.length
      ? table("Mandates", ["Mandate", "Agent", "Status", "Limits", "Expires"], mandates.map(mandateRow))
      : h("p", { class: "empty" }, "No mandates yet."),
  );
}

async function mandateDetail(ctx, root, id) {
  const m = await ctx.api.get(`/v1/mandates/${encodeURIComponent(id)}`);
  const l = m.limits;
  const revoke = h(
    "button",
    {
      type: "button",
      class: "danger",
      id: "revoke",
      onclick: async () => {
        const { confirmed } = await ctx.confirm({
          title: "Revoke this mandate?",
          lines: [
            `Revoke ${m.id} of ${m.agent} in the ${ctx.environment} environment?`,
            `From the next request on, ${m.agent} is denied with deny_revoked until a new mandate is written. Pending reviews under it will be denials if approved. This cannot be undone.`,
          ],
          confirmLabel: `Revoke ${m.id}`,
          danger: true,
        });
        if (!confirmed) return;
        try {
          await ctx.api.post(`/v1/mandates/${encodeURIComponent(m.id)}/revoke`);
          ctx.say(`Mandate ${m.id} revoked.`);
          await mandateDetail(ctx, root, id);
          root.querySelector("h1").focus();
        } catch (error) {
          ctx.report(error);
        }
      },
    },
    "Revoke…",
  );
  fill(
    root,
    h("p", {}, h("a", { href: "#mandates" }, "← All mandates")),
    heading(`Mandate ${m.id}`),
    details([
      ["Status", h("span", { class: `status ${m.status}`, id: "mandate-status" }, m.status)],
      ["Agent", h("a", { href: `#agents/${m.agent}` }, m.agent)],
      ["Principal", m.principal || null],
      ["Per transaction", money(l.per_transaction, l.currency)],
      ["Per day", l.per_day ? money(l.per_day, l.currency) : null],
      ["Per week", l.per_week ? money(l.per_week, l.currency) : null],
      ["Per month", l.per_month ? money(l.per_month, l.currency) : null],
      ["Review above", m.review_above ? money(m.review_above, l.currency) : null],
      ["Spent today / this week / this month", m.spent ? `${money(m.spent.day, l.currency)} / ${money(m.spent.week, l.currency)} / ${money(m.spent.month, l.currency)}` : null],
      ["Categories", m.categories.join(", ")],
      ["Recipients allowed", m.recipients ? m.recipients.allow.join(", ") || "any" : "any"],
      ["Recipients denied", m.recipients ? m.recipients.deny.join(", ") || "none" : "none"],
      ["Escrow required above", m.escrow ? money(m.escrow.required_above, l.currency) : null],
      ["Expires", m.expires],
      ["Created", when(m.created_at)],
    ]),
    m.status === "active" ? h("div", { class: "actions" }, revoke) : h("p", { class: "hint" }, `This mandate is ${m.status}; only an active mandate can be revoked.`),
  );
}

export async function renderAgents(ctx, root, id) {
  if (id) return agentDetail(ctx, root, id);
  const agents = await ctx.api.all("/v1/agents", {}, 300);
  fill(
    root,
    heading("Agents"),
    h("p", { class: "lede" }, "Registered agents, newest first. Agents are registered through the API (POST /v1/agents)."),
    agents.length
      ? table(
          "Agents",
          ["Agent", "Name", "Registered"],
          agents.map((a) => h("tr", {}, h("td", {}, h("a", { href: `#agents/${a.id}` }, a.id)), h("td", {}, a.name), h("td", {}, when(a.created_at)))),
        )
      : h("p", { class: "empty" }, "No agents yet."),
  );
}

async function agentDetail(ctx, root, id) {
  const [agent, mandates, recent] = await Promise.all([
    ctx.api.get(`/v1/agents/${encodeURIComponent(id)}`),
    ctx.api.get("/v1/mandates", { agent: id, limit: 20 }),
    ctx.api.get("/v1/decisions", { agent: id, limit: 10 }),
  ]);
  fill(
    root,
    h("p", {}, h("a", { href: "#agents" }, "← All agents")),
    heading(`Agent ${agent.id}`),
    details([
      ["Name", agent.name],
      ["Registered", when(agent.created_at)],
    ]),
    h("h2", {}, "Mandates"),
    mandates.data.length ? table("The agent's mandates", ["Mandate", "Agent", "Status", "Limits", "Expires"], mandates.data.map(mandateRow)) : h("p", { class: "empty" }, "No mandate: every request is denied with deny_no_mandate."),
    h("h2", {}, "Latest decisions"),
    recent.data.length
      ? table(
          "The agent's latest decisions",
          ["When", "Amount", "Recipient", "Verdict"],
          recent.data.map((d) =>
            h("tr", {}, h("td", {}, h("a", { href: `#decisions/${d.id}` }, when(d.created_at))), h("td", { class: "num" }, money(d.request.amount, d.request.currency)), h("td", {}, d.request.recipient), h("td", {}, verdictBadge(d.verdict))),
          ),
        )
      : h("p", { class: "empty" }, "No decisions yet."),
  );
}
