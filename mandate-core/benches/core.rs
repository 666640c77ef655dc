//! Benchmarks of the hot paths of `mandate-core`: reading a request's body, the policy
//! engine, signing and verifying ES256 verdicts, and pagination cursors.
//!
//! Run with `cargo bench -p mandate-core --bench core`; add
//! `-- --warm-up-time 1 --measurement-time 3` for a quick pass.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use mandate_core::{
    AgentHistory, AgentId, Amount, AuthorizationRequest, Category, Currency, CursorContext,
    CursorKey, DecisionId, Evaluation, JwkSet, Mandate, MandateDraft, MandateId, MandateStatus,
    Mode, Nonce, P256Signer, Recipient, Signer, VERDICT_LIFETIME_SECS, Verdict, VerdictClaims,
    VerifyOptions, evaluate, sign_token, verify_verdict,
};
use mandate_protocol::{history::VELOCITY_LIMIT, policy::AuthorizationBody};
use time::macros::datetime;
use time::{Duration, OffsetDateTime};

const NOW: OffsetDateTime = datetime!(2026-11-22 12:00 UTC);
const ISS: &str = "https://verdicts.mandate.example";
const IAT: i64 = 1_795_348_800;

/// A mandate with every limit and both recipient lists set, so that every rule is checked on
/// the way to `allow` (the recipient is the last entry of `allow`, after prefixes).
fn mandate() -> Mandate {
    let terms = MandateDraft::from_json(
        &serde_json::from_str(
            r#"{
                "agent": "agt_buyer",
                "principal": "role:cfo",
                "limits": {"per_transaction": 500.00, "per_day": 4500.00, "per_week": 4800.00,
                           "per_month": 5000.00, "currency": "USD"},
                "recipients": {"allow": ["vendor:aws*", "vendor:gcp*", "vendor:stripe", "vendor:acme"],
                               "deny": ["vendor:aws-gov*", "vendor:blocked"]},
                "categories": ["software", "cloud", "travel", "office", "data"],
                "review_above": 250.00,
                "expires": "2026-12-31",
                "escrow": {"required_above": 1000}
            }"#,
        )
        .unwrap(),
    )
    .unwrap();
    Mandate {
        id: MandateId::from_random([3; 16]),
        terms,
        status: MandateStatus::Active,
        created_at: datetime!(2026-11-01 0:00 UTC),
    }
}

fn request() -> AuthorizationRequest {
    AuthorizationRequest::from_json(
        AgentId::parse("agt_buyer").unwrap(),
        &serde_json::from_str(
            r#"{"amount": 49.99, "currency": "USD", "recipient": "vendor:acme", "category": "data"}"#,
        )
        .unwrap(),
    )
    .unwrap()
}

/// A history whose velocity window is full ([`VELOCITY_LIMIT`] requests), with the oldest
/// just outside the trailing 60 seconds, and some spend this day, week and month: the
/// velocity rule and the window sums are all evaluated and the request is still allowed.
fn full_history() -> AgentHistory {
    let allowed = Evaluation {
        verdict: Verdict::Allow,
        policy_verdict: Verdict::Allow,
        reason: None,
    };
    let amount = Amount::parse("12.34").unwrap();
    let mut history = AgentHistory::default();
    for i in 0..VELOCITY_LIMIT as i64 {
        history.record(&allowed, amount, NOW - Duration::seconds(61 - 5 * i));
    }
    assert!(!mandate_protocol::history::velocity(&history).is_exceeded_at(NOW));
    assert_eq!(
        mandate_protocol::history::velocity(&history).count_at(NOW),
        VELOCITY_LIMIT - 1
    );
    history
}

fn verdict_claims() -> VerdictClaims {
    VerdictClaims {
        bindings: mandate_core::Bindings::default(),
        iss: ISS.to_owned(),
        jti: DecisionId::from_random([7; 16]),
        iat: IAT,
        exp: IAT + VERDICT_LIFETIME_SECS,
        verdict: Verdict::Allow,
        policy_verdict: Verdict::Allow,
        mandate: Some(MandateId::from_random([3; 16])),
        policy_version: "pol_2026-11-01.1".to_owned(),
        nonce: Nonce::from_random([9; 16]),
        request: AuthorizationRequest {
            agent: AgentId::parse("agt_buyer").unwrap(),
            amount: Amount::parse("49.99").unwrap(),
            currency: Currency::parse("USD").unwrap(),
            recipient: Recipient::parse("vendor:acme").unwrap(),
            category: Category::parse("data").unwrap(),
        },
    }
}

fn bench_evaluate(c: &mut Criterion) {
    let mandate = mandate();
    let request = request();
    let history = full_history();
    let check = evaluate(Some(&mandate), &request, &history, Mode::Enforce, NOW);
    assert_eq!(check.verdict, Verdict::Allow, "{:?}", check.reason);

    c.bench_function("evaluate", |b| {
        b.iter(|| {
            evaluate(
                black_box(Some(&mandate)),
                black_box(&request),
                black_box(&history),
                black_box(Mode::Enforce),
                black_box(NOW),
            )
        })
    });

    c.bench_function("evaluate_and_record", |b| {
        b.iter(|| {
            // `AgentHistory` is `Copy`: every iteration starts from the same full window.
            let mut history = black_box(history);
            let evaluation = evaluate(
                black_box(Some(&mandate)),
                black_box(&request),
                &history,
                Mode::Enforce,
                black_box(NOW),
            );
            history.record(&evaluation, request.amount, NOW);
            black_box((evaluation, history))
        })
    });
}

/// The request mix of `mandate-bench`: 80 % allow, 10 % review (above `review_above`), 10 %
/// `deny_category`, one request every 7 seconds (under the velocity limit), so that every
/// review and denial builds its reason.
fn mixed_stream() -> Vec<(AuthorizationRequest, OffsetDateTime)> {
    (0..1000i64)
        .map(|i| {
            let (amount, category) = match i % 10 {
                0 => ("300.00", "software"),
                5 => ("4.99", "gambling"),
                _ => ("4.99", "data"),
            };
            let request = AuthorizationRequest::from_json(
                AgentId::parse("agt_buyer").unwrap(),
                &serde_json::from_str(&format!(
                    r#"{{"amount": {amount}, "currency": "USD", "recipient": "vendor:acme", "category": "{category}"}}"#
                ))
                .unwrap(),
            )
            .unwrap();
            (request, NOW + Duration::seconds(7 * i))
        })
        .collect()
}

fn bench_evaluate_mixed(c: &mut Criterion) {
    let mandate = mandate();
    let stream = mixed_stream();
    let mut counts = std::collections::BTreeMap::new();
    let mut history = AgentHistory::default();
    for (request, at) in &stream {
        let evaluation = evaluate(Some(&mandate), request, &history, Mode::Enforce, *at);
        history.record(&evaluation, request.amount, *at);
        *counts.entry(evaluation.verdict.as_str()).or_insert(0) += 1;
    }
    assert_eq!(
        counts.into_iter().collect::<Vec<_>>(),
        [("allow", 800), ("deny_category", 100), ("review", 100)]
    );

    let mut group = c.benchmark_group("evaluate_and_record_mixed");
    group.throughput(criterion::Throughput::Elements(stream.len() as u64));
    group.bench_function("1000_requests", |b| {
        b.iter(|| {
            let mut history = AgentHistory::default();
            for (request, at) in black_box(&stream) {
                let evaluation = evaluate(Some(&mandate), request, &history, Mode::Enforce, *at);
                history.record(&evaluation, request.amount, *at);
                black_box(&evaluation);
            }
            history
        })
    });
    group.finish();
}

/// A plain body of `POST /v1/authorizations`, as `mandate-bench` sends it.
const PLAIN_BODY: &[u8] =
    br#"{"amount":49.99,"currency":"USD","recipient":"vendor:acme","category":"data"}"#;

fn bench_read_body(c: &mut Criterion) {
    let agent = AgentId::parse("agt_buyer").unwrap();
    assert_eq!(
        AuthorizationRequest::from_json_bytes(agent.clone(), PLAIN_BODY).unwrap(),
        request()
    );

    // The request alone, as the core reads it.
    c.bench_function("request_from_json_bytes", |b| {
        b.iter(|| {
            AuthorizationRequest::from_json_bytes(black_box(agent.clone()), black_box(PLAIN_BODY))
                .unwrap()
        })
    });

    // What the server's route does with a plain body: the request and the protocol
    // members (none here) in one read.
    c.bench_function("authorization_body_plain", |b| {
        b.iter(|| {
            let body =
                AuthorizationBody::from_json_bytes(black_box(agent.clone()), black_box(PLAIN_BODY))
                    .unwrap();
            assert!(body.acp.is_none() && body.ap2.is_none() && body.x402.is_none());
            body.request.unwrap()
        })
    });
}

fn bench_tokens(c: &mut Criterion) {
    let old = P256Signer::from_secret_bytes("live-1", &[1; 32]).unwrap();
    let signer = P256Signer::from_secret_bytes("live-2", &[2; 32]).unwrap();
    let claims = verdict_claims();

    c.bench_function("sign", |b| {
        b.iter(|| sign_token(black_box(&signer), black_box(&claims)).unwrap())
    });

    // During a rotation the set holds the outgoing and the incoming key; the token names the
    // second one.
    let jwks = JwkSet {
        keys: vec![old.public_jwk(), signer.public_jwk()],
    };
    let token = sign_token(&signer, &claims).unwrap();
    let options = VerifyOptions {
        issuer: ISS.to_owned(),
        now: time::OffsetDateTime::from_unix_timestamp(IAT + 1).unwrap(),
        leeway_secs: 30,
    };
    assert_eq!(verify_verdict(&token, &jwks, &options).unwrap(), claims);

    c.bench_function("verify", |b| {
        b.iter(|| verify_verdict(black_box(&token), black_box(&jwks), black_box(&options)).unwrap())
    });

    // The decision log's leaf of a verdict (docs/audit.md), made with every token.
    c.bench_function("leaf_hash", |b| {
        b.iter(|| mandate_protocol::tlog::leaf_hash(black_box(token.as_bytes())))
    });
}

fn bench_cursor(c: &mut Criterion) {
    let key = CursorKey::new(b"0123456789abcdef0123456789abcdef");
    let context = CursorContext::new("decisions", "org:acme:sandbox")
        .with_filter("verdict", "allow")
        .with_filter("agent", "agt_buyer");
    let now = time::OffsetDateTime::from_unix_timestamp(IAT).unwrap();

    c.bench_function("cursor_issue", |b| {
        b.iter(|| key.issue(black_box(&context), black_box(123_456), black_box(now)))
    });

    let token = key.issue(&context, 123_456, now);
    assert_eq!(
        key.open(&token, &context, now + Duration::seconds(60)),
        Ok(123_456)
    );

    c.bench_function("cursor_open", |b| {
        b.iter(|| {
            key.open(
                black_box(&token),
                black_box(&context),
                black_box(now + Duration::seconds(60)),
            )
            .unwrap()
        })
    });
}

criterion_group!(
    benches,
    bench_read_body,
    bench_evaluate,
    bench_evaluate_mixed,
    bench_tokens,
    bench_cursor
);
criterion_main!(benches);
