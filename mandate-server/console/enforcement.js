// Enforcement: the environment's mode and since when; switching it behind a confirmation
// that names the environment and what changes.

import { h, fill, details, when, heading } from "./dom.js";

const MEANING = {
  enforce: "Verdicts are enforced: requests over the mandates' limits are denied, and spends above a review threshold wait for a person.",
  observe: "Nothing is blocked: every request is answered allow, while the decision keeps what enforcement would have said (policy verdict). No review is opened.",
};

export async function render(ctx, root) {
  const state = await ctx.api.get("/v1/enforcement");
  const other = state.mode === "enforce" ? "observe" : "enforce";
  const consequence =
    other === "observe"
      ? `From the next decision on, nothing is blocked in the ${ctx.environment} environment of ${ctx.organization}: every request is allowed and only recorded, and no review is opened.`
      : `From the next decision on, the ${ctx.environment} environment of ${ctx.organization} denies requests that break their mandates and sends spends above review thresholds to review.`;
  const button = h(
    "button",
    {
      type: "button",
      id: "switch-mode",
      class: other === "observe" ? "danger" : "",
      onclick: async () => {
        const { confirmed } = await ctx.confirm({
          title: `Switch ${ctx.environment} to ${other}?`,
          lines: [`Switch the ${ctx.environment.toUpperCase()} environment of ${ctx.organization} from ${state.mode} to ${other}?`, consequence],
          confirmLabel: `Switch ${ctx.environment} to ${other}`,
          danger: other === "observe",
        });
        if (!confirmed) return;
        try {
          const now = await ctx.api.post("/v1/enforcement", { mode: other });
          ctx.say(`The ${ctx.environment} environment is now in ${now.mode} mode.`);
          await render(ctx, root);
          root.querySelector("h1").focus();
        } catch (error) {
          ctx.report(error);
        }
      },
    },
    `Switch to ${other}…`,
  );
  fill(
    root,
    heading("Enforcement"),
    h("p", { class: "lede" }, `The kill switch of the ${ctx.environment} environment. It acts on this environment only.`),
    details([
      ["Environment", ctx.environment],
      ["Mode", h("strong", { id: "mode", class: `mode ${state.mode}` }, state.mode)],
      ["Since", when(state.since)],
      ["What it means", MEANING[state.mode]],
    ]),
    h("div", { class: "actions" }, button),
  );
}
