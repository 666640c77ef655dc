//! The five tools of `mandate mcp`, each a call or two of the API made with the agent's key:
//! their inputs and outputs (JSON Schemas from the types), annotations and descriptions.
//! A failure is a tool error (`isError`) whose text is the API's message; the key never
//! appears in a result.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mandate_core::amount::Amount;
use mandate_core::counterparty::{
    CheckError, Counterparty, EnvironmentPolicy, ExpectedTransaction, MemoryReplayGuard,
};
use mandate_core::environment::Environment;
use mandate_core::jwk::JwkSet;
use mandate_core::jwks_cache::{KeySetCache, NextFetch};
use mandate_core::names::{Currency, Recipient};
use mandate_core::policy::Verdict;
use mandate_core::wire::{Decision, DecisionAnswer, ListPage, Mandate};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{ProgressNotificationParam, RequestMetaObject, ServerCapabilities, ServerConfig};
use rmcp::{Peer, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Mutex;

use super::api::{Api, Failure};
use crate::client::new_idempotency_key;

/// How long `wait_for_review` waits by default, and at most.
const WAIT_DEFAULT_SECS: u64 = 60;
const WAIT_MAX_SECS: u64 = 600;
/// How often it reads the decision meanwhile.
const POLL: Duration = Duration::from_millis(500);

/// The MCP server: one agent's view of the API.
#[derive(Clone)]
pub struct MandateTools {
    api: Arc<Api>,
    /// The verdicts URL (the tokens' `iss`), whose `/.well-known/jwks.json` verifies.
    issuer: Option<String>,
    /// The fetched JWK Set and when to fetch it again (the core's cache policy: the
    /// response's `max-age`, and an unknown `kid` at most once per interval).
    jwks: Arc<Mutex<Option<(JwkSet, KeySetCache)>>>,
    /// Whether sandbox-signed tokens are accepted (`--sandbox`: testing only).
    sandbox: bool,
    /// The nonces `verify_verdict` accepted, so a token is accepted once.
    replay: Arc<Mutex<MemoryReplayGuard>>,
    tool_router: ToolRouter<Self>,
}

/// `authorize_payment`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AuthorizeArgs {
    /// The amount, exact: a JSON number or a decimal string such as "12.50" (no exponent).
    #[schemars(schema_with = "amount_schema")]
    // A `Value`: a JSON number or a string, read to its exact text by `amount_text`.
    pub amount: Value,
    /// ISO 4217 currency code, such as "USD".
    pub currency: String,
    /// Who is paid, `vendor:<name>`, such as "vendor:acme".
    pub recipient: String,
    /// What for, one of the mandate's categories, such as "software".
    pub category: String,
    /// Reuse the key of an earlier call to retry it without deciding twice; one is
    /// generated when absent.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

fn amount_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": ["number", "string"],
        "description": "The amount, exact: a JSON number or a decimal string such as \"12.50\"."
    })
}

/// `authorize_payment`'s output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AuthorizeOutput {
    /// `allow`, `review`, or a denial (`deny_limit`, `deny_category`, `deny_velocity`, ...).
    pub verdict: String,
    /// Why, with the numbers involved; null for a plain allow.
    pub reason: Option<String>,
    /// The decision's id (`dec_…`): give it to `wait_for_review` on a review.
    pub decision: String,
    /// On allow: the signed verdict (ES256 JWT) to hand to the payee; valid 5 minutes.
    pub verdict_token: Option<String>,
    /// On review: the review's id; a person decides, `wait_for_review` waits for it.
    pub review: Option<String>,
    /// The Idempotency-Key the request was sent with: pass it again to retry safely.
    pub idempotency_key: String,
    /// What the mandate still allows after this decision, per limit; null without one.
    // A `Value`: tool outputs carry a JSON Schema, which the core's wire types do not.
    pub remaining: Option<Value>,
    /// What to do next, in a sentence.
    pub next_step: String,
}

/// `wait_for_review`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WaitArgs {
    /// The decision (`dec_…`) whose verdict was `review`.
    pub decision: String,
    /// How long to wait, in seconds: 60 by default, at most 600.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

/// `wait_for_review`'s output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WaitOutput {
    /// `approved`, `denied`, `expired`, or `pending` when the wait ended first.
    pub status: String,
    /// On approval: the fresh decision the approval made.
    pub decision: Option<String>,
    /// On approval: its verdict (`allow`, or a denial if the mandate changed meanwhile).
    pub verdict: Option<String>,
    /// On approval with `allow`: the signed verdict to hand to the payee.
    pub verdict_token: Option<String>,
    /// Why, when there is a reason to give.
    pub reason: Option<String>,
    /// Seconds waited.
    pub waited_seconds: u64,
}

/// `list_decisions`' input.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListArgs {
    /// How many, newest first: 1 to 100 (default 10).
    #[serde(default)]
    pub limit: Option<u8>,
    /// Only this verdict (`allow`, `review`, `deny_limit`, ...).
    #[serde(default)]
    pub verdict: Option<String>,
}

/// One decision in `list_decisions`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DecisionSummary {
    /// `dec_…`.
    pub id: String,
    /// The verdict.
    pub verdict: String,
    /// Why.
    pub reason: Option<String>,
    /// The amount, as signed.
    pub amount: String,
    /// The currency.
    pub currency: String,
    /// The recipient.
    pub recipient: String,
    /// The category.
    pub category: String,
    /// When (RFC 3339, UTC).
    pub created_at: String,
    /// Where its review stands, if it opened one.
    pub review_status: Option<String>,
    /// The decision an approval of its review made.
    pub review_resolution: Option<String>,
    /// Its signed verdict (null for decisions stored before tokens were kept).
    pub verdict_token: Option<String>,
}

/// `list_decisions`' output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListOutput {
    /// Newest first.
    pub decisions: Vec<DecisionSummary>,
    /// Whether older ones exist.
    pub has_more: bool,
}

/// `get_mandate`'s output: the agent's mandate in force, as the API reads it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct MandateOutput {
    /// Whether the agent has an active mandate; without one every request is denied.
    pub active: bool,
    /// The mandate (`id`, `limits`, `remaining`, `spent`, `categories`, `recipients`,
    /// `review_above`, `expires`, `status`); null without one.
    // A `Value`: tool outputs carry a JSON Schema, which the core's wire types do not.
    pub mandate: Option<Value>,
}

/// `verify_verdict`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct VerifyArgs {
    /// The verdict token (compact JWS) the payer handed over.
    pub token: String,
    /// The amount being paid, exact.
    #[schemars(schema_with = "amount_schema")]
    // A `Value`: a JSON number or a string, read to its exact text by `amount_text`.
    pub amount: Value,
    /// Its currency.
    pub currency: String,
    /// Who is paid (you), `vendor:<name>`.
    pub recipient: String,
}

/// `verify_verdict`'s output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct VerifyOutput {
    /// True only for a valid, unexpired `allow` signed by this service for exactly this
    /// amount, currency and recipient.
    pub valid: bool,
    /// Why not, one reason each; empty when valid.
    pub reasons: Vec<String>,
    /// The signed decision id, when the signature held.
    pub decision: Option<String>,
    /// The signed verdict, when the signature held.
    pub verdict: Option<String>,
    /// The key's environment (`sandbox` or `live`), from its kid.
    pub environment: Option<String>,
}

/// The amount's exact text, from a JSON number (its text as written) or a string.
fn amount_text(value: &Value) -> Result<String, String> {
    let text = match value {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.trim().to_owned(),
        _ => {
            return Err(
                "amount must be a decimal number such as 12.50 (a JSON number or a string)".into(),
            );
        }
    };
    match Amount::parse(&text) {
        Ok(_) => Ok(text),
        Err(e) => Err(format!("amount {text:?} is not usable: {e}")),
    }
}

/// An answer of the API read as its wire type (`what` names it for the error).
fn read<T: DeserializeOwned>(answer: Value, what: &str) -> Result<T, String> {
    serde_json::from_value(answer).map_err(|e| format!("the server's {what} did not read: {e}"))
}

#[tool_router]
impl MandateTools {
    /// The tools for the agent whose key `api` holds.
    pub fn new(api: Api, issuer: Option<String>, sandbox: bool) -> Self {
        Self {
            api: Arc::new(api),
            issuer,
            jwks: Arc::new(Mutex::new(None)),
            sandbox,
            replay: Arc::new(Mutex::new(MemoryReplayGuard::default())),
            tool_router: Self::tool_router(),
        }
    }

    /// Asks Mandate whether this agent may make a payment, before paying.
    #[tool(
        description = "Ask Mandate, before paying anything, whether this agent may make this payment. Pay only on verdict `allow`, and hand the payee the `verdict_token` (valid 5 minutes). On `review` a person must decide: call `wait_for_review` with the decision id. Any other verdict is a refusal: do not pay; `reason` says which rule refused it. Retrying with the same `idempotency_key` never decides twice.",
        annotations(
            title = "Authorize a payment",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    pub async fn authorize_payment(
        &self,
        Parameters(args): Parameters<AuthorizeArgs>,
    ) -> Result<Json<AuthorizeOutput>, String> {
        let amount = amount_text(&args.amount)?;
        let key = match args.idempotency_key {
            Some(key) if !key.trim().is_empty() => key,
            _ => new_idempotency_key().map_err(|e| e.to_string())?,
        };
        // Built as text: the fields go to the server as given, which names what is wrong.
        let body = format!(
            r#"{{"amount":{amount},"currency":{},"recipient":{},"category":{}}}"#,
            Value::String(args.currency),
            Value::String(args.recipient),
            Value::String(args.category),
        );
        let answer = self
            .api
            .post("/authorizations", body, &key)
            .await
            .map_err(|e| e.0)?;
        let answer: DecisionAnswer = read(answer, "decision")?;
        let decision = answer.id.to_string();
        let remaining = self
            .mandate()
            .await
            .ok()
            .flatten()
            .and_then(|m| m.get("remaining").cloned());
        let next_step = match answer.verdict {
            Verdict::Allow => {
                "Pay now and hand the payee verdict_token; it expires in 5 minutes.".into()
            }
            Verdict::Review => format!(
                "Do not pay yet: a person reviews it. Call wait_for_review with decision {decision}."
            ),
            _ => "Do not pay: the payment was refused. Tell the user the reason.".into(),
        };
        Ok(Json(AuthorizeOutput {
            verdict_token: answer.verdict.is_allow().then_some(answer.verdict_token),
            review: answer.review.as_ref().map(|r| r.id().to_string()),
            reason: answer.reason,
            verdict: answer.verdict.as_str().to_owned(),
            decision,
            idempotency_key: key,
            remaining,
            next_step,
        }))
    }

    /// Waits for a person to resolve a review.
    #[tool(
        description = "Wait, bounded (timeout_seconds: default 60, at most 600), for a person to approve or deny the review that an authorize_payment with verdict `review` opened. Sends progress notifications while it waits. `approved` returns the fresh decision and, on `allow`, its verdict_token to pay with; `denied` and `expired` mean: do not pay; `pending` means the wait ended first: call again later.",
        annotations(
            title = "Wait for a review",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn wait_for_review(
        &self,
        Parameters(args): Parameters<WaitArgs>,
        meta: RequestMetaObject,
        client: Peer<RoleServer>,
    ) -> Result<Json<WaitOutput>, String> {
        let timeout = args
            .timeout_seconds
            .unwrap_or(WAIT_DEFAULT_SECS)
            .clamp(1, WAIT_MAX_SECS);
        let path = format!("/decisions/{}", urlencode(&args.decision));
        let token = meta.get_progress_token();
        let start = Instant::now();
        let mut step = 0u32;
        loop {
            let decision = self.api.get(&path, &[]).await.map_err(|e| e.0)?;
            let decision: Decision = read(decision, "decision")?;
            if decision.review.is_none() {
                return Err(format!(
                    "decision {} opened no review (its verdict is {}): there is nothing to wait for",
                    args.decision, decision.verdict
                ));
            }
            let waited = start.elapsed().as_secs();
            let status = decision.review_status.map_or("", |s| s.as_str());
            let done = |status: &str, reason: Option<String>| WaitOutput {
                status: status.into(),
                decision: None,
                verdict: None,
                verdict_token: None,
                reason,
                waited_seconds: waited,
            };
            match status {
                "approved" => {
                    let fresh = decision.review_resolution.ok_or_else(|| {
                        "the review was approved but names no decision".to_owned()
                    })?;
                    let made = self
                        .api
                        .get(&format!("/decisions/{}", urlencode(fresh.as_str())), &[])
                        .await
                        .map_err(|e| e.0)?;
                    let made: Decision = read(made, "decision")?;
                    return Ok(Json(WaitOutput {
                        verdict_token: made
                            .verdict
                            .is_allow()
                            .then(|| made.verdict_token.flatten())
                            .flatten(),
                        reason: made.reason,
                        decision: Some(fresh.to_string()),
                        verdict: Some(made.verdict.as_str().to_owned()),
                        ..done("approved", None)
                    }));
                }
                "denied" => {
                    return Ok(Json(done(
                        "denied",
                        Some("a person denied the payment: do not pay".into()),
                    )));
                }
                "expired" => {
                    return Ok(Json(done(
                        "expired",
                        Some("nobody resolved the review in time: do not pay; ask again if still needed".into()),
                    )));
                }
                _ => {}
            }
            if waited >= timeout {
                return Ok(Json(done(
                    "pending",
                    Some(format!(
                        "still pending after {waited} s: call wait_for_review again later"
                    )),
                )));
            }
            if let Some(token) = &token {
                step += 1;
                let progress = ProgressNotificationParam::new(token.clone(), f64::from(step))
                    .with_total(timeout as f64 / POLL.as_secs_f64())
                    .with_message(format!("review pending, {waited} s of {timeout} s"));
                // A client that went away ends the wait at the next read.
                let _ = client.notify_progress(progress).await;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The agent's mandate and what it still allows.
    #[tool(
        description = "Read this agent's mandate in force: its limits, what each limit still allows right now (`remaining`, the numbers Mandate decides with), what was spent this day, week and month, the allowed categories and recipients, the amount above which a person reviews, the expiry and status. `active` is false without a mandate: every payment would be refused.",
        annotations(
            title = "Read the mandate",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn get_mandate(&self) -> Result<Json<MandateOutput>, String> {
        let mandate = self.mandate().await.map_err(|e| e.0)?;
        Ok(Json(MandateOutput {
            active: mandate.is_some(),
            mandate,
        }))
    }

    /// The agent's recent decisions.
    #[tool(
        description = "List this agent's recent decisions, newest first (limit 1 to 100, default 10; optionally only one verdict), each with its verdict, reason, payment, review status and signed verdict_token.",
        annotations(
            title = "List decisions",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn list_decisions(
        &self,
        Parameters(args): Parameters<ListArgs>,
    ) -> Result<Json<ListOutput>, String> {
        let limit = args.limit.unwrap_or(10);
        if !(1..=100).contains(&limit) {
            return Err(format!("limit must be 1 to 100, not {limit}"));
        }
        let mut query = vec![("limit", limit.to_string())];
        if let Some(verdict) = args.verdict {
            query.push(("verdict", verdict));
        }
        let page = self.api.get("/decisions", &query).await.map_err(|e| e.0)?;
        let page: ListPage<Decision> = read(page, "list of decisions")?;
        let decisions = page
            .data
            .into_iter()
            .map(|d| DecisionSummary {
                id: d.id.to_string(),
                verdict: d.verdict.as_str().to_owned(),
                reason: d.reason,
                amount: d.request.amount.to_string(),
                currency: d.request.currency.to_string(),
                recipient: d.request.recipient.to_string(),
                category: d.request.category.to_string(),
                created_at: mandate_core::timefmt::format(d.created_at),
                review_status: d.review_status.map(|s| s.as_str().to_owned()),
                review_resolution: d.review_resolution.map(|r| r.to_string()),
                verdict_token: d.verdict_token.flatten(),
            })
            .collect();
        Ok(Json(ListOutput {
            decisions,
            has_more: page.has_more,
        }))
    }

    /// Checks a verdict token handed over by a payer.
    #[tool(
        description = "For an agent that is being paid: check a verdict token the payer handed over, as `mandate verify` does, against Mandate's published key set (fetched, then cached 5 minutes): ES256 signature, issuer, expiry, the signing key's environment (live; sandbox too when started with --sandbox), verdict `allow`, that it authorizes exactly this amount, currency and recipient, and that it was not accepted before (a second check of an accepted token is a replay). Accept the payment only when `valid` is true.",
        annotations(
            title = "Verify a verdict token",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    pub async fn verify_verdict(
        &self,
        Parameters(args): Parameters<VerifyArgs>,
    ) -> Result<Json<VerifyOutput>, String> {
        let amount = Amount::parse(&amount_text(&args.amount)?).map_err(|e| e.to_string())?;
        let currency: Currency = args
            .currency
            .trim()
            .parse()
            .map_err(|e| format!("currency: {e}"))?;
        let recipient: Recipient = args
            .recipient
            .trim()
            .parse()
            .map_err(|e| format!("recipient: {e}"))?;
        let issuer = self.issuer.clone().ok_or_else(|| {
            "verify_verdict needs the service's verdicts URL: start `mandate mcp` with --issuer URL (or MANDATE_ISSUER)".to_owned()
        })?;
        let now = time::OffsetDateTime::now_utc();
        let kid = mandate_core::environment::token_kid(args.token.trim());
        let set = self
            .key_set(&issuer, now, kid.as_deref())
            .await
            .map_err(|e| e.0)?;
        let policy = if self.sandbox {
            EnvironmentPolicy::LiveOrSandbox
        } else {
            EnvironmentPolicy::LiveOnly
        };
        let counterparty = Counterparty::new(issuer).environments(policy);
        let expected = ExpectedTransaction::new(amount, currency, recipient);
        // mandate-core's one-call check, with this process's replay guard: a token
        // accepted once is refused as a replay after.
        let mut guard = self.replay.lock().await;
        let token = args.token.trim();
        let checked = counterparty.check(token, &set, &expected, &mut *guard, now);
        let environment = mandate_core::environment::token_kid(token)
            .and_then(|kid| Environment::of_kid(&kid))
            .map(|e| e.as_str().to_owned());
        Ok(Json(match checked {
            Ok(verified) => VerifyOutput {
                valid: true,
                reasons: Vec::new(),
                decision: Some(verified.claims.jti.as_str().to_owned()),
                verdict: Some(verified.claims.verdict.as_str().to_owned()),
                environment,
            },
            Err(CheckError::Refused { claims, objections }) => VerifyOutput {
                valid: false,
                reasons: objections.iter().map(ToString::to_string).collect(),
                decision: Some(claims.jti.as_str().to_owned()),
                verdict: Some(claims.verdict.as_str().to_owned()),
                environment,
            },
            Err(other) => VerifyOutput {
                valid: false,
                reasons: vec![other.to_string()],
                decision: None,
                verdict: None,
                environment: None,
            },
        }))
    }
}

impl MandateTools {
    /// The agent's active mandate with `remaining` and `spent`, or `None` without one.
    async fn mandate(&self) -> Result<Option<Value>, Failure> {
        let page = self
            .api
            .get(
                "/mandates",
                &[("status", "active".into()), ("limit", "1".into())],
            )
            .await?;
        let page: ListPage<Mandate> = read(page, "list of mandates").map_err(Failure)?;
        let Some(found) = page.data.first() else {
            return Ok(None);
        };
        let path = format!("/mandates/{}", urlencode(found.id.as_str()));
        let mandate = self.api.get(&path, &[]).await?;
        // Checked to read as a mandate, and handed on as the server wrote it.
        read::<Mandate>(mandate.clone(), "mandate").map_err(Failure)?;
        Ok(Some(mandate))
    }

    /// The JWK Set of `issuer` for a token naming `kid`: the cached one while its
    /// response's `max-age` lasts (five minutes when it names none), fetched again when
    /// stale, or when `kid` is not in it (at most once per interval: made-up kids cannot
    /// make this fetch on every token).
    async fn key_set(
        &self,
        issuer: &str,
        now: time::OffsetDateTime,
        kid: Option<&str>,
    ) -> Result<JwkSet, Failure> {
        let mut cached = self.jwks.lock().await;
        if let Some((set, cache)) = cached.as_mut() {
            let unknown = kid.is_some_and(|kid| set.find(kid).is_none());
            let fetch = cache.before_use(now) == NextFetch::Fetch
                || (unknown && cache.unknown_kid(now) == NextFetch::Fetch);
            if !fetch {
                return Ok(set.clone());
            }
        }
        let url = format!("{}/.well-known/jwks.json", issuer.trim_end_matches('/'));
        let (bytes, cache_control) = self.api.get_public(&url).await?;
        let set = JwkSet::from_json(&bytes)
            .map_err(|e| Failure(format!("{url} is not a usable key set: {e}")))?;
        // The same cache object across fetches keeps the unknown-kid interval.
        let mut cache = cached.take().map_or_else(
            || KeySetCache::new(crate::jwks_cache::cache_policy()),
            |(_, cache)| cache,
        );
        cache.fetched(now, cache_control.as_deref());
        *cached = Some((set.clone(), cache));
        Ok(set)
    }
}

/// A path segment with everything but the id alphabet percent-encoded.
fn urlencode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for MandateTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
            "Mandate decides whether this agent may spend money. Before any payment call \
             authorize_payment and pay only on verdict allow, handing the payee the \
             verdict_token. On review, call wait_for_review. get_mandate tells what is still \
             allowed; list_decisions shows past decisions; verify_verdict checks a token \
             someone hands you.",
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn amounts_keep_their_exact_text_and_bad_ones_are_named() {
        let n: Value = serde_json::from_str("12.50").unwrap();
        assert_eq!(amount_text(&n).unwrap(), "12.50");
        assert_eq!(amount_text(&Value::String(" 0.1 ".into())).unwrap(), "0.1");
        for bad in [r#""1e3""#, r#""-5""#, "true", r#""abc""#] {
            let v: Value = serde_json::from_str(bad).unwrap();
            assert!(amount_text(&v).unwrap_err().contains("amount"), "{bad}");
        }
    }

    #[test]
    fn ids_are_encoded_as_one_path_segment() {
        assert_eq!(urlencode("dec_abc-1"), "dec_abc-1");
        assert_eq!(urlencode("../x?y"), "%2E%2E%2Fx%3Fy");
    }
}
