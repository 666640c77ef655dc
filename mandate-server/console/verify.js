// Verifying a verdict token in the browser, as a counterparty would: the ES256 signature
// (ECDSA P-256 with SHA-256, WebCrypto) against the published JWK Set, the algorithm, the
// key id, the issuer and the expiry; and, given the decision it should be, that the signed
// claims are that decision's (id, verdict, amount, currency, recipient).

import { h, utc } from "./dom.js";
import { parseExact } from "./api.js";

// Strict, as mandate-core decodes: only the base64url alphabet, no padding, and the
// canonical form (unused low bits of the last character zero), so that no two texts
// decode to the same bytes. atob alone ignores those bits.
function base64url(text) {
  if (!/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) {
    throw new Error("not base64url");
  }
  const padded = text.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(text.length / 4) * 4, "=");
  const binary = atob(padded);
  const canonical = btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  if (canonical !== text) {
    throw new Error("not canonical base64url");
  }
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}

function decodeJson(part) {
  return parseExact(new TextDecoder().decode(base64url(part)));
}

/**
 * Checks `token`; returns `{ok, checks: [{name, ok, detail}]}`. `decision` (optional) is
 * the decision object the token should carry.
 */
export async function verifyToken(ctx, token, decision = null) {
  const checks = [];
  const check = (name, ok, detail) => {
    checks.push({ name, ok, detail });
    return ok;
  };
  const parts = String(token || "").trim().split(".");
  if (!check("Form", parts.length === 3, parts.length === 3 ? "a compact JWS: header, claims and signature" : "not a compact JWS (three dot-separated parts)")) {
    return { ok: false, checks };
  }
  let header;
  let claims;
  try {
    header = decodeJson(parts[0]);
    claims = decodeJson(parts[1]);
  } catch (e) {
    check("Form", false, "the header or the claims are not base64url-encoded JSON");
    return { ok: false, checks };
  }
  check("Algorithm", header.alg === "ES256", header.alg === "ES256" ? "ES256 (ECDSA P-256, SHA-256), the only one accepted" : `"${header.alg}" is not ES256; refused`);

  let set;
  try {
    const response = await fetch(ctx.config.jwks_url, { cache: "no-store" });
    set = await response.json();
  } catch (e) {
    check("Key", false, `the JWK Set at ${ctx.config.jwks_url} could not be read`);
    return { ok: false, checks };
  }
  const keys = Array.isArray(set.keys) ? set.keys : [];
  const jwk = keys.find((k) => k.kid === header.kid);
  const kidOk = check(
    "Key id",
    Boolean(jwk) && jwk.kty === "EC" && jwk.crv === "P-256",
    jwk ? `${header.kid} is in the published JWK Set (${keys.length} key${keys.length === 1 ? "" : "s"}), an EC P-256 key` : `${header.kid ?? "(none)"} is not in the published JWK Set`,
  );
  const envOfKid = String(header.kid || "").startsWith("live-") ? "live" : String(header.kid || "").startsWith("sandbox-") ? "sandbox" : null;
  check(
    "Environment",
    envOfKid === ctx.environment,
    envOfKid ? `signed by a ${envOfKid} key${envOfKid === ctx.environment ? "" : `, but this console acts on ${ctx.environment}`}` : "the key id names no environment",
  );

  if (kidOk && header.alg === "ES256") {
    let valid = false;
    try {
      const key = await crypto.subtle.importKey("jwk", { kty: "EC", crv: "P-256", x: jwk.x, y: jwk.y, ext: true }, { name: "ECDSA", namedCurve: "P-256" }, false, ["verify"]);
      const signature = base64url(parts[2]);
      const signed = new TextEncoder().encode(`${parts[0]}.${parts[1]}`);
      valid = signature.length === 64 && (await crypto.subtle.verify({ name: "ECDSA", hash: "SHA-256" }, key, signature, signed));
    } catch (e) {
      valid = false;
    }
    check("Signature", valid, valid ? `valid: the header and claims were signed by ${header.kid}` : "does not verify: the token was altered or not signed by this key");
  } else {
    check("Signature", false, "not checked: no acceptable key");
  }

  check("Issuer", claims.iss === ctx.config.issuer, claims.iss === ctx.config.issuer ? `${claims.iss}, this server's` : `${claims.iss} is not this server's issuer (${ctx.config.issuer})`);
  const exp = Number(claims.exp);
  const now = Date.now() / 1000;
  const expiry = utc(new Date(exp * 1000));
  check(
    "Expiry",
    Number.isFinite(exp) && exp > now,
    exp > now ? `valid until ${expiry} (${Math.floor(exp - now)} s left)` : `expired at ${expiry}: a counterparty must refuse it`,
  );
  check("Verdict", claims.verdict === "allow", claims.verdict === "allow" ? "allow" : `${claims.verdict}: not an authorization to pay`);
  if (decision) {
    const r = claims.request || {};
    const d = decision.request;
    const same =
      claims.jti === decision.id && claims.verdict === decision.verdict && r.amount === d.amount && r.currency === d.currency && r.recipient === d.recipient && r.agent === d.agent;
    check(
      "Decision",
      same,
      same
        ? `the signed claims are decision ${decision.id}: ${r.amount} ${r.currency} to ${r.recipient} for ${r.agent}`
        : `the signed claims (${claims.jti}: ${r.amount} ${r.currency} to ${r.recipient}) are not decision ${decision.id}'s`,
    );
  }
  return { ok: checks.every((c) => c.ok), checks, claims };
}

/** The checks as a list a person reads, with the overall answer first. */
export function renderChecks(result) {
  return h(
    "section",
    { class: `verification ${result.ok ? "valid" : "invalid"}`, "aria-label": "Verification", id: "verification" },
    h("p", { class: "verdict-line", role: "status" }, result.ok ? "Valid: every check passed." : "Not valid: see the checks marked failed."),
    h(
      "ul",
      { class: "checks-list" },
      result.checks.map((c) => h("li", { class: c.ok ? "pass" : "fail" }, h("strong", {}, `${c.ok ? "Passed" : "Failed"}: ${c.name}`), " — ", c.detail)),
    ),
  );
}
