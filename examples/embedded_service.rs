//! A service of its own built on `mandate-core`: its own storage (here, in memory), its own
//! signing key, the core's policy engine.
//!
//! ```text
//! cargo run -p mandate-core --example embedded_service
//! ```
//!
//! The core does no I/O, so the embedding service owns everything around a decision: it
//! keeps each agent's current mandate and history, passes the time in, asks
//! [`evaluate`] for the verdict, records the request in the agent's history
//! ([`AgentHistory::record`]: velocity for every request, month-to-date spend for an
//! `allow`), signs the verdict's claims with its key and stores the decision. A
//! counterparty then checks the token against the service's JWK Set (see the
//! `verify_verdict` example). `main` runs a short day of requests and asserts each verdict.
//!
//! Randomness: ids, nonces and the signing key are made from bytes the caller supplies.
//! This example takes them from a counter and fixed bytes so that it is deterministic; a
//! real service draws them from the operating system's RNG (the `getrandom` crate).

use std::collections::HashMap;
use std::process::ExitCode;

use mandate_core::{
    AgentHistory, AgentId, AuthorizationRequest, DecisionId, Evaluation, JwkSet, Mandate,
    MandateDraft, MandateId, MandateStatus, Mode, Nonce, P256Signer, Signer, VERDICT_LIFETIME_SECS,
    Verdict, VerdictClaims, VerifyOptions, evaluate, sign_token, verify_verdict,
};
use time::OffsetDateTime;

/// One stored decision: what was asked, what was decided, and the token handed out.
struct Decision {
    id: DecisionId,
    request: AuthorizationRequest,
    evaluation: Evaluation,
    /// When it was decided, seconds since the epoch (the token's `iat`).
    iat: i64,
    token: String,
}

/// The service's storage, in memory. A real one would keep the same three things in its
/// database, and rebuild each agent's history from its stored decisions at start.
#[derive(Default)]
struct Store {
    /// Each agent's current mandate.
    mandates: HashMap<AgentId, Mandate>,
    /// Each agent's recent requests and month-to-date spend.
    histories: HashMap<AgentId, AgentHistory>,
    /// Every decision, oldest first.
    decisions: Vec<Decision>,
}

/// The service: storage, a signing key, the issuer it signs as, the enforcement mode.
struct Service {
    store: Store,
    signer: P256Signer,
    issuer: String,
    mode: Mode,
    /// Example-only source of "random" bytes: a counter. Use the OS RNG in a real service.
    counter: u8,
}

impl Service {
    /// 16 bytes for an id or a nonce. Example-only: predictable, so never do this for real.
    fn next_bytes(&mut self) -> [u8; 16] {
        self.counter = self.counter.wrapping_add(1);
        [self.counter; 16]
    }

    /// Stores a mandate as the agent's current one; a new mandate starts a new month-to-date
    /// spend (the velocity window is the agent's and carries over).
    fn put_mandate(&mut self, body: &str, now: OffsetDateTime) -> Result<MandateId, String> {
        let body = serde_json::from_str(body).map_err(|e| e.to_string())?;
        let terms = MandateDraft::from_json(&body).map_err(|e| e.to_string())?;
        terms.check_not_expired_at(now).map_err(|e| e.to_string())?;
        let mandate = Mandate {
            id: MandateId::from_random(self.next_bytes()),
            terms,
            status: MandateStatus::Active,
            created_at: now,
        };
        let id = mandate.id.clone();
        let agent = mandate.terms.agent.clone();
        let history = self.store.histories.entry(agent.clone()).or_default();
        history.start_mandate();
        self.store.mandates.insert(agent, mandate);
        Ok(id)
    }

    /// Decides an agent's request at `now`: evaluate, record, sign, store. Returns the
    /// verdict and its token.
    fn authorize(
        &mut self,
        agent: &str,
        body: &str,
        now: OffsetDateTime,
    ) -> Result<(Verdict, String), String> {
        let agent = AgentId::parse(agent).map_err(|e| e.to_string())?;
        let body = serde_json::from_str(body).map_err(|e| e.to_string())?;
        let request =
            AuthorizationRequest::from_json(agent.clone(), &body).map_err(|e| e.to_string())?;
        let mandate = self.store.mandates.get(&agent);
        let history = self.store.histories.entry(agent.clone()).or_default();
        let evaluation = evaluate(mandate, &request, history, self.mode, now);
        history.record(&evaluation, request.amount, now);
        let mandate_id = mandate.map(|m| m.id.clone());

        let iat = now.unix_timestamp();
        let id = DecisionId::from_random(self.next_bytes());
        let claims = VerdictClaims {
            bindings: mandate_core::Bindings::default(),
            iss: self.issuer.clone(),
            jti: id.clone(),
            iat,
            exp: iat + VERDICT_LIFETIME_SECS,
            verdict: evaluation.verdict,
            policy_verdict: evaluation.policy_verdict,
            mandate: mandate_id,
            policy_version: "pol_2026-11-01.1".to_owned(),
            nonce: Nonce::from_random(self.next_bytes()),
            request: request.clone(),
        };
        let token = sign_token(&self.signer, &claims).map_err(|e| e.to_string())?;
        let verdict = evaluation.verdict;
        self.store.decisions.push(Decision {
            id,
            request,
            evaluation,
            iat,
            token: token.clone(),
        });
        Ok((verdict, token))
    }

    /// The JWK Set the service publishes for counterparties.
    fn jwks(&self) -> JwkSet {
        JwkSet {
            keys: vec![self.signer.public_jwk()],
        }
    }
}

fn run() -> Result<(), String> {
    // The signing key from fixed bytes: example-only. A real service generates its 32
    // secret bytes with the OS RNG and keeps them where secrets belong.
    let signer = P256Signer::from_secret_bytes("live-1", &[42; 32]).map_err(|e| e.to_string())?;
    let mut service = Service {
        store: Store::default(),
        signer,
        issuer: "https://verdicts.example.com".to_owned(),
        mode: Mode::Enforce,
        counter: 0,
    };

    // The service's clock, passed in: 2026-11-22T12:00:00Z, then a minute per request.
    let start = OffsetDateTime::from_unix_timestamp(1_795_348_800).map_err(|e| e.to_string())?;
    let at = |minutes: i64| start + time::Duration::minutes(minutes);

    service.put_mandate(
        r#"{"agent": "agt_buyer",
            "limits": {"per_transaction": 100, "per_month": 150, "currency": "USD"},
            "categories": ["software"], "review_above": 50, "expires": "2026-12-31"}"#,
        start,
    )?;
    let ask = |amount: &str, category: &str| {
        format!(
            r#"{{"amount": {amount}, "currency": "USD", "recipient": "vendor:acme", "category": "{category}"}}"#
        )
    };
    // (agent, body, the verdict the mandate must give)
    let day = [
        ("agt_buyer", ask("42.50", "software"), Verdict::Allow),
        ("agt_buyer", ask("60", "software"), Verdict::Review),
        ("agt_buyer", ask("12", "food"), Verdict::DenyCategory),
        ("agt_buyer", ask("49.99", "software"), Verdict::Allow),
        ("agt_buyer", ask("49.99", "software"), Verdict::Allow),
        // 42.50 + 3 × 49.99 = 192.47 would pass the 150 a month.
        ("agt_buyer", ask("49.99", "software"), Verdict::DenyLimit),
        ("agt_other", ask("1", "software"), Verdict::DenyNoMandate),
    ];
    let mut wrong = 0;
    for (i, (agent, body, expected)) in day.iter().enumerate() {
        let minute = i64::try_from(i).map_err(|e| e.to_string())?;
        let (verdict, _token) = service.authorize(agent, body, at(minute))?;
        let mark = if verdict == *expected {
            ""
        } else {
            "  <- unexpected"
        };
        println!("{agent}  {body}  {verdict}{mark}");
        if verdict != *expected {
            wrong += 1;
        }
    }

    // The history the service keeps is what the engine used: three allows this month.
    let history = service
        .store
        .histories
        .get(&AgentId::parse("agt_buyer").map_err(|e| e.to_string())?)
        .ok_or("no history for agt_buyer")?;
    let spent = history.spent_at(at(10));
    println!("agt_buyer spent {spent} USD this month");
    if spent.to_string() != "142.48" {
        wrong += 1;
    }

    // Every stored token verifies against the published key set, as a counterparty's would.
    let published = serde_json::to_vec(&service.jwks()).map_err(|e| e.to_string())?;
    let jwks = JwkSet::from_json(&published).map_err(|e| e.to_string())?;
    for decision in &service.store.decisions {
        let options = VerifyOptions {
            issuer: service.issuer.clone(),
            now: time::OffsetDateTime::from_unix_timestamp(decision.iat + 1)
                .map_err(|e| e.to_string())?,
            leeway_secs: 0,
        };
        let claims = verify_verdict(&decision.token, &jwks, &options).map_err(|e| e.to_string())?;
        if claims.jti != decision.id
            || claims.verdict != decision.evaluation.verdict
            || claims.request.amount != decision.request.amount
        {
            wrong += 1;
        }
    }
    println!(
        "{} decisions stored, every token verified",
        service.store.decisions.len()
    );

    if wrong > 0 {
        return Err(format!("{wrong} check(s) did not end as expected"));
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
