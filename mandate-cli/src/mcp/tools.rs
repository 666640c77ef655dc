//! The five tools of `mandate mcp`, each a call or two of the API made with the agent's key:
//! their descriptions and annotations (inputs in `args.rs`, outputs in `outputs.rs`).
//! A failure is a tool error (`isError`) whose text is the API's message; the key never
//! appears in a result.

use std::sync::Arc;
use std::time::Instant;

use mandate_core::{
    Allowance, Amount, CheckError, Counterparty, Currency, Environment, EnvironmentPolicy,
    ExpectedTransaction, JwkSet, KeySetCache, MemoryReplayGuard, NextFetch, PaymentRequirements,
    Recipient,
};
use mandate_protocol::{wire::Decision, wire::ListPage, wire::Mandate};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{ProgressNotificationParam, RequestMetaObject};
use rmcp::{Peer, RoleServer, tool, tool_router};
use serde_json::{Map, Value};
use tokio::sync::Mutex;

use super::api::{Api, Failure};
use super::args::{
    AuthorizeArgs, ListArgs, VerifyArgs, VerifyBindings, WAIT_DEFAULT_SECS, WaitArgs,
    standard_formats_only,
};
use super::outputs::{
    AuthorizeOutput, DecisionSummary, ListOutput, MandateOutput, VerifyOutput, WaitOutput,
};
use super::review::{FRESH, ReviewState, Reviews, read, urlencode};
use crate::client::new_idempotency_key;

/// The MCP server's tools: one agent's view of the API.
#[derive(Clone)]
pub struct MandateTools {
    pub(super) api: Arc<Api>,
    /// The decisions' reads, shared by every wait of this process.
    pub(super) reviews: Arc<Reviews>,
    /// The verdicts URL (the tokens' `iss`), whose `/.well-known/jwks.json` verifies.
    issuer: Option<String>,
    /// The fetched JWK Set and when to fetch it again (the core's cache policy: the
    /// response's `max-age`, and an unknown `kid` at most once per interval).
    jwks: Arc<Mutex<Option<(JwkSet, KeySetCache)>>>,
    /// Whether sandbox-signed tokens are accepted (`--sandbox`: testing only).
    sandbox: bool,
    /// The review console's URL (`--console-url`): a review asks the user to open it.
    pub(super) console_url: Option<String>,
    /// The nonces `verify_verdict` accepted, so a token is accepted once.
    replay: Arc<Mutex<MemoryReplayGuard>>,
    pub(super) tool_router: ToolRouter<Self>,
}

#[tool_router]
impl MandateTools {
    /// The tools for the agent whose key `api` holds.
    pub fn new(
        api: Api,
        issuer: Option<String>,
        sandbox: bool,
        console_url: Option<String>,
    ) -> Self {
        let api = Arc::new(api);
        let mut tool_router = Self::tool_router();
        for route in tool_router.map.values_mut() {
            standard_formats_only(Arc::make_mut(&mut route.attr.input_schema));
            if let Some(output) = route.attr.output_schema.as_mut() {
                standard_formats_only(Arc::make_mut(output));
            }
        }
        Self {
            reviews: Arc::new(Reviews::new(api.clone())),
            api,
            issuer,
            jwks: Arc::new(Mutex::new(None)),
            sandbox,
            console_url,
            replay: Arc::new(Mutex::new(MemoryReplayGuard::default())),
            tool_router,
        }
    }

    /// Asks Mandate whether this agent may make a payment, before paying.
    #[tool(
        description = "Ask Mandate, before paying anything, whether this agent may make this payment. Pay only on verdict `allow`, and hand the payee the `verdict_token` (valid 5 minutes). On `review` a person must decide: a client that supports tasks gets a task that completes when they do; otherwise call `wait_for_review` with the decision id. Any other verdict is a refusal: do not pay; `reason` says which rule refused it. Paying through x402, AP2 or ACP? Pass `x402` (the PaymentRequirements), `ap2` (the closed mandate) or `acp` (the delegated payment allowance; the amount is then its maximum) so the verdict is bound to that payment. Retrying with the same `idempotency_key` never decides twice.",
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
        let key = match args.idempotency_key {
            Some(key) if !key.trim().is_empty() => key,
            _ => new_idempotency_key().map_err(|e| e.to_string())?,
        };
        // The amount as its exact text (a JSON number of that text), the rest as given:
        // the API names what is wrong.
        let amount: Value = serde_json::from_str(&args.amount)
            .map_err(|e| format!("amount {} is not usable: {e}", args.amount))?;
        let mut body = Map::new();
        body.insert("amount".into(), amount);
        body.insert("currency".into(), Value::String(args.currency));
        body.insert("recipient".into(), Value::String(args.recipient));
        body.insert("category".into(), Value::String(args.category));
        for (name, member) in args.bindings.members() {
            body.insert(name.into(), member);
        }
        let body = Value::Object(body).to_string();
        let answer = self
            .api
            .post("/authorizations", body, &key)
            .await
            .map_err(|e| e.0)?;
        let answer: Decision<'static> = read(answer, "decision")?;
        let remaining = self
            .mandate()
            .await
            .ok()
            .flatten()
            .and_then(|m| m.get("remaining").cloned());
        Ok(Json(AuthorizeOutput::answered(answer, key, remaining)))
    }

    /// Waits for a person to resolve a review.
    #[tool(
        description = "Wait, bounded (timeout_seconds: default 60, at most 600), for a person to approve or deny the review that an authorize_payment with verdict `review` opened. Sends progress notifications while it waits. `approved` returns the fresh decision and, on `allow`, its verdict_token to pay with; `denied` (with the reviewer's reason) and `expired` mean: do not pay; `pending` means the wait ended first: call again later.",
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
        let timeout = args.timeout_seconds.unwrap_or(WAIT_DEFAULT_SECS);
        let token = meta.get_progress_token();
        let start = Instant::now();
        let mut step = 0u32;
        loop {
            let (decision, state) = self.reviews.state(&args.decision).await?;
            let waited = start.elapsed().as_secs();
            if let ReviewState::None = state {
                return Err(no_review(&args.decision, &decision));
            }
            if let Some(settled) = WaitOutput::settled(&state, waited) {
                return Ok(Json(settled));
            }
            if waited >= timeout {
                return Ok(Json(WaitOutput {
                    status: "pending".into(),
                    decision: None,
                    verdict: None,
                    verdict_token: None,
                    reason: Some(format!(
                        "still pending after {waited} s: call wait_for_review again later"
                    )),
                    waited_seconds: waited,
                }));
            }
            if let Some(token) = &token {
                step += 1;
                let progress = ProgressNotificationParam::new(token.clone(), f64::from(step))
                    .with_total(timeout as f64 / FRESH.as_secs_f64())
                    .with_message(format!("review pending, {waited} s of {timeout} s"));
                // A client that went away ends the wait at the next read.
                let _ = client.notify_progress(progress).await;
            }
            tokio::time::sleep(FRESH).await;
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
        let mut query = vec![("limit", args.limit().to_string())];
        if let Some(verdict) = args.verdict {
            query.push(("verdict", verdict));
        }
        let page = self.api.get("/decisions", &query).await.map_err(|e| e.0)?;
        let page: ListPage<Decision> = read(page, "list of decisions")?;
        Ok(Json(ListOutput {
            decisions: page.data.into_iter().map(DecisionSummary::from).collect(),
            has_more: page.has_more,
        }))
    }

    /// Checks a verdict token handed over by a payer.
    #[tool(
        description = "For an agent that is being paid: check a verdict token the payer handed over, as `mandate verify` does, against Mandate's published key set (fetched, then cached 5 minutes): ES256 signature, issuer, expiry, the signing key's environment (live; sandbox too when started with --sandbox), verdict `allow`, that it authorizes exactly this amount, currency and recipient (and, given `x402`, `ap2` or `acp`, that it is bound to that payment), and that it was not accepted before (a second check of an accepted token is a replay). Accept the payment only when `valid` is true.",
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
        let expected = expected_transaction(&args)?;
        let issuer = self.issuer.clone().ok_or_else(|| {
            "verify_verdict needs the service's verdicts URL: start `mandate mcp` with --issuer URL (or MANDATE_ISSUER)".to_owned()
        })?;
        let now = time::OffsetDateTime::now_utc();
        let token = args.token.trim();
        let kid = mandate_core::token_kid(token);
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
        // mandate-core's one-call check, with this process's replay guard: a token
        // accepted once is refused as a replay after.
        let mut guard = self.replay.lock().await;
        let checked = counterparty.check(token, &set, &expected, &mut *guard, now);
        let environment = kid
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

/// The transaction `verify_verdict` holds the token to: amount, currency, recipient, and
/// the protocol payment given (`x402`, `ap2`).
fn expected_transaction(args: &VerifyArgs) -> Result<ExpectedTransaction, String> {
    let amount = Amount::parse(&args.amount).map_err(|e| format!("amount: {e}"))?;
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
    let mut expected = ExpectedTransaction::new(amount, currency, recipient);
    let VerifyBindings {
        x402,
        decimals,
        ap2,
        acp,
    } = &args.bindings;
    if let Some(acp) = acp {
        let allowance =
            Allowance::from_json(&Value::Object(acp.allowance.clone()), "acp.allowance")
                .map_err(|e| e.to_string())?;
        expected = expected.with_acp(allowance);
    }
    if decimals.is_some() && x402.is_none() {
        return Err("decimals is the x402 asset's: give x402 with it".into());
    }
    if let Some(x402) = x402 {
        let requirements = PaymentRequirements::from_json(&Value::Object(x402.clone()), "x402")
            .map_err(|e| e.to_string())?;
        expected = expected.with_x402(requirements, *decimals);
    }
    if let Some(ap2) = ap2 {
        let given = |value: &Option<String>| value.clone().filter(|v| !v.trim().is_empty());
        let (mandate, transaction) = (given(&ap2.mandate), given(&ap2.transaction));
        if mandate.is_none() && transaction.is_none() {
            return Err("ap2: give mandate (the open payment mandate's digest), transaction (the closed mandate's transaction id) or both".into());
        }
        if let Some(digest) = mandate {
            expected = expected.with_ap2_mandate(digest);
        }
        if let Some(id) = transaction {
            expected = expected.with_ap2_transaction(id);
        }
    }
    Ok(expected)
}

/// The refusal of a wait on a decision that opened no review.
pub fn no_review(id: &str, decision: &Decision) -> String {
    format!(
        "decision {id} opened no review (its verdict is {}): there is nothing to wait for",
        decision.verdict
    )
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
