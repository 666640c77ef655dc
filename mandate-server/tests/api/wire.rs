//! The wire types of `mandate_protocol::wire` against the real server: every object the API
//! answers is read into its type and written back byte for byte (members sorted by name,
//! as the server writes them through a `Value`; the decision answer in its signed order),
//! and every request body the types describe is accepted. A drift between the server and
//! the types (a member added, renamed, made optional, null where it was absent) fails here.

use std::collections::BTreeSet;

use mandate_core::{
    AgentId, AgentName, Amount, Category, CountLimits, Currency, DecisionId, EscrowTerms, Limits,
    MandateStatus, Mode, Principal, Recipient, RecipientPattern, Recipients, Verdict,
};
use mandate_protocol::{review::ReviewStatus, wire, wire::ListPage};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use time::macros::date;

use crate::helpers::{Resp, TestApp, spawn_app};

/// Reads `r` into `T`, checks that `T` writes it back exactly as the server did (through
/// its `Value`, members sorted), and returns it.
#[track_caller]
fn read<T: Serialize + DeserializeOwned>(r: &Resp, status: u16) -> T {
    assert_eq!(r.status, status, "{}", r.text);
    let typed: T = serde_json::from_str(&r.text)
        .unwrap_or_else(|e| panic!("{e}: {} does not read as its type", r.text));
    let value = wire::to_value(&typed).unwrap();
    assert_eq!(serde_json::to_string(&value).unwrap(), r.text);
    typed
}

/// Reads a decision answer, which is written in its own order: byte for byte as declared.
#[track_caller]
fn answer(r: &Resp) -> wire::Decision<'static> {
    assert_eq!(r.status, 201, "{}", r.text);
    let typed: wire::Decision = serde_json::from_str(&r.text)
        .unwrap_or_else(|e| panic!("{e}: {} does not read as a decision answer", r.text));
    assert_eq!(serde_json::to_string(&typed).unwrap(), r.text);
    typed
}

/// The members `openapi.yaml` declares for schema `name` under `components: schemas:`
/// (following `allOf` and `$ref` to other schemas), with those it requires. A strict
/// reader of the document's block layout (two spaces a level).
fn schema(name: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let doc = mandate_server::routes::public::OPENAPI;
    let lines: Vec<&str> = doc.lines().collect();
    let start = lines
        .iter()
        .position(|l| *l == format!("    {name}:"))
        .unwrap_or_else(|| panic!("openapi.yaml has no schema {name}"));
    let (mut members, mut required) = (BTreeSet::new(), BTreeSet::new());
    let mut properties_at: Option<usize> = None;
    for line in &lines[start + 1..] {
        let depth = line.len() - line.trim_start().len();
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if depth <= 4 {
            break;
        }
        if properties_at.is_some_and(|at| depth <= at) {
            properties_at = None;
        }
        match properties_at {
            Some(at) => {
                if depth == at + 2 {
                    assert!(text.ends_with(':'), "{name}: unexpected line {text:?}");
                    members.insert(text.trim_end_matches(':').to_owned());
                }
            }
            None if text == "properties:" => properties_at = Some(depth),
            None => {
                if let Some(list) = text
                    .strip_prefix("required: [")
                    .and_then(|r| r.strip_suffix(']'))
                {
                    required.extend(list.split(',').map(|m| m.trim().to_owned()));
                }
                if let Some(target) = text
                    .strip_prefix("- $ref: \"#/components/schemas/")
                    .and_then(|r| r.strip_suffix('"'))
                {
                    let (m, r) = schema(target);
                    members.extend(m);
                    required.extend(r);
                }
            }
        }
    }
    assert!(!members.is_empty(), "schema {name} declares no members");
    (members, required)
}

/// Checks objects written from one wire type against the schema `name` of the contract:
/// each carries every required member and only declared ones, and together (optional
/// members given in one of them) they carry every declared member.
#[track_caller]
fn declared(name: &str, objects: &[Value]) {
    let (members, required) = schema(name);
    let mut seen = BTreeSet::new();
    for object in objects {
        let keys: BTreeSet<String> = object.as_object().unwrap().keys().cloned().collect();
        assert!(
            keys.is_subset(&members),
            "{name}: {keys:?} not all in {members:?}"
        );
        assert!(
            required.is_subset(&keys),
            "{name}: {keys:?} lacks some of {required:?}"
        );
        seen.extend(keys);
    }
    assert_eq!(
        seen, members,
        "{name}: the type writes other members than declared"
    );
}

fn body<T: Serialize>(request: &T) -> serde_json::Value {
    serde_json::to_value(request).unwrap()
}

fn authorize(amount: &str) -> wire::Authorize {
    wire::Authorize {
        acp: None,
        amount: Amount::parse(amount).unwrap(),
        ap2: None,
        category: Category::parse("software").unwrap(),
        currency: Currency::parse("USD").unwrap(),
        recipient: Recipient::parse("vendor:acme").unwrap(),
        x402: None,
    }
}

async fn create_agent(app: &TestApp, name: &str) -> wire::CreatedAgent {
    let request = wire::CreateAgent {
        name: AgentName::parse(name).unwrap(),
    };
    let r = app
        .post(&app.org.sandbox, "/v1/agents", body(&request))
        .await;
    read(&r, 201)
}

/// Any wire type as the `Value` the server writes.
fn value<T: Serialize>(object: &T) -> Value {
    wire::to_value(object).unwrap()
}

#[mandate_test_macros::on_each_engine]
async fn agents_mandates_and_decisions_read_as_their_types_byte_for_byte() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();

    let buyer = create_agent(&app, "buyer").await;
    assert!(buyer.agent_key.starts_with("ak_sandbox_"));
    assert_eq!(buyer.name.as_str(), "buyer");
    let plain = create_agent(&app, "plain").await;
    let bare = create_agent(&app, "bare").await;
    let shown: wire::Agent = read(&app.get(&org, "/v1/agents/agt_buyer").await, 200);
    assert_eq!(shown.id, buyer.id);
    let page: ListPage<wire::Agent> = read(&app.get(&org, "/v1/agents").await, 200);
    assert_eq!(page.data.len(), 3);
    let first: ListPage<wire::Agent> = read(&app.get(&org, "/v1/agents?limit=1").await, 200);
    assert!(first.has_more && first.next_cursor.is_some());
    let request = wire::CreateAgent {
        name: AgentName::parse("x").unwrap(),
    };
    declared("AgentRequest", &[body(&request)]);
    declared("CreatedAgent", &[value(&buyer)]);
    declared("Agent", &[value(&shown)]);

    // Every optional member given, and none.
    let full = wire::CreateMandate {
        agent: buyer.id.clone(),
        categories: vec![Category::parse("software").unwrap()],
        escrow: Some(EscrowTerms {
            required_above: Amount::parse("500").unwrap(),
        }),
        expires: date!(2026 - 12 - 31),
        limits: Limits {
            per_transaction: Amount::parse("100.00").unwrap(),
            min_per_transaction: Some(Amount::parse("1.50").unwrap()),
            per_day: Some(Amount::parse("300").unwrap()),
            per_week: Some(Amount::parse("400").unwrap()),
            per_month: Some(Amount::parse("450").unwrap()),
            total: Some(Amount::parse("5000.50").unwrap()),
            count: Some(CountLimits {
                per_day: Some(3),
                per_week: Some(10),
                per_month: Some(20),
                total: Some(100),
            }),
            currency: Currency::parse("USD").unwrap(),
        },
        not_before: Some(date!(2026 - 11 - 01)),
        principal: Some(Principal::parse("role:cfo").unwrap()),
        recipients: Some(Recipients {
            allow: vec![
                RecipientPattern::parse("vendor:ac*").unwrap(),
                RecipientPattern::parse("vendor:zeta").unwrap(),
            ],
            deny: vec![RecipientPattern::parse("vendor:acme-old").unwrap()],
        }),
        review_above: Some(Amount::parse("50").unwrap()),
    };
    let mandate: wire::Mandate = read(&app.post(&org, "/v1/mandates", body(&full)).await, 201);
    assert_eq!(mandate.limits, full.limits);
    assert_eq!(mandate.recipients, full.recipients);
    let minimal = wire::CreateMandate {
        agent: plain.id.clone(),
        escrow: None,
        principal: None,
        recipients: None,
        review_above: None,
        limits: Limits {
            min_per_transaction: None,
            per_day: None,
            per_week: None,
            per_month: None,
            total: None,
            count: None,
            ..full.limits.clone()
        },
        not_before: None,
        ..full.clone()
    };
    let second: wire::Mandate = read(&app.post(&org, "/v1/mandates", body(&minimal)).await, 201);
    let path = format!("/v1/mandates/{}", mandate.id);
    let shown: wire::Mandate = read(&app.get(&org, &path).await, 200);
    assert!(shown.spent.is_some());
    let _: ListPage<wire::Mandate> = read(&app.get(&org, "/v1/mandates").await, 200);
    declared("MandateRequest", &[body(&full), body(&minimal)]);
    let imported = crate::ap2::imported_mandate(&app, "wireap2").await;
    declared(
        "Mandate",
        &[value(&mandate), value(&second), value(&shown), imported],
    );

    // An allow, a review (the answer carries the whole review), a denial without mandate.
    let ask = |key: &str, amount: &str| {
        let (key, amount) = (key.to_owned(), amount.to_owned());
        let app = &app;
        async move {
            let r = app
                .post(&key, "/v1/authorizations", body(&authorize(&amount)))
                .await;
            answer(&r)
        }
    };
    let allow = ask(&buyer.agent_key, "20.00").await;
    assert_eq!(allow.verdict, Verdict::Allow);
    assert!(allow.review.is_none() && allow.reason.is_none());
    let review = ask(&buyer.agent_key, "60").await;
    assert_eq!(review.verdict, Verdict::Review);
    let opened = review.review.as_ref().and_then(|r| r.review()).unwrap();
    assert_eq!(opened.status, ReviewStatus::Pending);
    let none = ask(&bare.agent_key, "1").await;
    assert_eq!(none.verdict, Verdict::DenyNoMandate);
    assert!(none.mandate.is_none());
    // Bound to an x402 payment: the request's member, the answer's claim.
    let pay_to = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
    let bound_request = wire::Authorize {
        recipient: Recipient::parse(&format!("vendor:{pay_to}")).unwrap(),
        x402: Some(
            serde_json::json!({"scheme": "exact", "network": "eip155:84532",
            "amount": "1000000", "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            "payTo": pay_to}),
        ),
        ..authorize("1")
    };
    let bound = answer(
        &app.post(&buyer.agent_key, "/v1/authorizations", body(&bound_request))
            .await,
    );
    assert!(bound.x402_payment.is_some());
    // The AP2 claims as the type writes them (a verdict made under an AP2 mandate).
    let ap2 = wire::Decision {
        ap2_mandate: Some("open-digest".into()),
        ap2_transaction: Some("txn_1".into()),
        ..bound.clone()
    };
    let presenting = wire::Authorize {
        ap2: Some(wire::Ap2Presentation {
            closed_mandate: "<open>~~<closed>".into(),
        }),
        ..authorize("1")
    };
    // Under an ACP allowance of 1.00 USD to acme: the request's member, the answer's claims.
    let expires = (app.clock_now() + time::Duration::days(1))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let delegated = wire::Authorize {
        acp: Some(wire::AcpPresentation {
            allowance: wire::AcpAllowance {
                checkout_session_id: "csn_wire".into(),
                currency: "usd".into(),
                expires_at: expires,
                max_amount: 100,
                merchant_id: "acme".into(),
                reason: "one_time".into(),
            },
        }),
        ..authorize("1")
    };
    let acp = answer(
        &app.post(&buyer.agent_key, "/v1/authorizations", body(&delegated))
            .await,
    );
    assert_eq!(acp.acp_checkout_session.as_deref(), Some("csn_wire"));
    declared(
        "AuthorizationRequest",
        &[
            body(&authorize("1")),
            body(&bound_request),
            body(&presenting),
            body(&delegated),
        ],
    );
    declared(
        "SignedDecision",
        &[
            value(&allow),
            value(&review),
            value(&none),
            value(&bound),
            value(&ap2),
            value(&acp),
        ],
    );

    let mut stored = Vec::new();
    for id in [&allow.id, &review.id, &none.id] {
        let one: wire::Decision = read(&app.get(&org, &format!("/v1/decisions/{id}")).await, 200);
        assert_eq!(&one.id, id);
        stored.push(value(&one));
    }
    let _: ListPage<wire::Decision> = read(&app.get(&org, "/v1/decisions").await, 200);

    // An agent key asking for another agent's: empty pages.
    for path in [
        "/v1/decisions?agent=agt_plain",
        "/v1/mandates?agent=agt_plain",
    ] {
        let page: ListPage<Value> = read(&app.get(&buyer.agent_key, path).await, 200);
        assert_eq!(page.data.len(), 0);
        assert!(!page.has_more);
        assert_eq!(page.next_cursor, None);
    }

    // Approving answers a fresh decision that supersedes the original.
    let path_approve = format!("/v1/reviews/{}/approve", opened.id);
    let approved = answer(&app.post_empty(&org, &path_approve).await);
    assert_eq!(approved.supersedes.as_ref(), Some(&review.id));
    let path_approved = format!("/v1/decisions/{}", approved.id);
    let one: wire::Decision = read(&app.get(&org, &path_approved).await, 200);
    assert_eq!(one.supersedes.as_ref(), Some(&review.id));
    stored.push(value(&one));
    // The original, read after the approval, names the fresh decision.
    let path_original = format!("/v1/decisions/{}", review.id);
    let original: wire::Decision = read(&app.get(&org, &path_original).await, 200);
    assert_eq!(original.review_resolution.as_ref(), Some(&approved.id));
    stored.push(value(&original));
    let path_bound = format!("/v1/decisions/{}", bound.id);
    let bound_read: wire::Decision = read(&app.get(&org, &path_bound).await, 200);
    assert_eq!(bound_read.x402_payment, bound.x402_payment);
    stored.push(value(&bound_read));
    stored.push(value(&wire::Decision {
        ap2_mandate: Some("open-digest".into()),
        ap2_transaction: Some("txn_1".into()),
        ..bound_read.clone()
    }));
    let path_acp = format!("/v1/decisions/{}", acp.id);
    let acp_read: wire::Decision = read(&app.get(&org, &path_acp).await, 200);
    assert_eq!(acp_read.acp_allowance, acp.acp_allowance);
    stored.push(value(&acp_read));

    // Denying answers the review, with and without a reason, and so does the agent's
    // withdrawal of its own (its key); the decision that opened it then reads with the
    // reason and when, and whether it was withdrawn.
    let (mut reviews, mut requests) = (vec![value(opened)], Vec::new());
    for (reason, key) in [
        (Some("over budget".to_owned()), &org),
        (None, &org),
        (Some("the client cancelled".to_owned()), &buyer.agent_key),
    ] {
        let asked = ask(&buyer.agent_key, "70").await;
        let id = asked.review.as_ref().unwrap().id().clone();
        let request = wire::DenyReview {
            reason: reason.clone(),
        };
        let path_deny = format!("/v1/reviews/{id}/deny");
        let denied: wire::Review = read(&app.post(key, &path_deny, body(&request)).await, 200);
        assert_eq!(denied.status, ReviewStatus::Denied);
        assert_eq!(denied.reason, reason);
        assert_eq!(denied.withdrawn, key == &buyer.agent_key);
        let path_asked = format!("/v1/decisions/{}", asked.id);
        let asked_read: wire::Decision = read(&app.get(&org, &path_asked).await, 200);
        assert_eq!(asked_read.review_reason.as_deref(), reason.as_deref());
        assert_eq!(asked_read.review_resolved_at, denied.resolved_at);
        assert_eq!(asked_read.review_withdrawn, denied.withdrawn);
        stored.push(value(&asked_read));
        reviews.push(value(&denied));
        requests.push(body(&request));
    }
    declared("Decision", &stored);
    declared("DenyRequest", &requests);
    // The approved review, as its decision.resolved event carries it.
    let path_events = "/v1/events?type=decision.resolved";
    let resolved: ListPage<wire::Event> = read(&app.get(&org, path_events).await, 200);
    for event in &resolved.data {
        let review: wire::Review = serde_json::from_value(event.data.clone()).unwrap();
        assert_eq!(value(&review), event.data);
        reviews.push(event.data.clone());
    }
    declared("Review", &reviews);

    // Revoking answers the mandate.
    let path_revoke = format!("{path}/revoke");
    let revoked: wire::Mandate = read(&app.post_empty(&org, &path_revoke).await, 200);
    assert_eq!(revoked.status, MandateStatus::Revoked);
}

#[mandate_test_macros::on_each_engine]
async fn enforcement_webhooks_events_and_escrows_read_as_their_types_byte_for_byte() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();

    let shown: wire::Enforcement = read(&app.get(&org, "/v1/enforcement").await, 200);
    let observe = wire::SetEnforcement {
        mode: Mode::Observe,
    };
    let mode: wire::Enforcement = read(
        &app.post(&org, "/v1/enforcement", body(&observe)).await,
        200,
    );
    assert_eq!(mode.mode, Mode::Observe);
    let enforce = wire::SetEnforcement {
        mode: Mode::Enforce,
    };
    let _: wire::Enforcement = read(
        &app.post(&org, "/v1/enforcement", body(&enforce)).await,
        200,
    );
    declared("Enforcement", &[value(&shown)]);
    declared("EnforcementRequest", &[body(&observe)]);

    let request = wire::CreateWebhook {
        events: vec!["ping".into(), "escrow.funded".into()],
        url: "http://127.0.0.1:9/hook".into(),
    };
    let webhook: wire::Webhook = read(&app.post(&org, "/v1/webhooks", body(&request)).await, 201);
    let path = format!("/v1/webhooks/{}", webhook.webhook);
    let _: wire::Webhook = read(&app.get(&org, &path).await, 200);
    let _: ListPage<wire::Webhook> = read(&app.get(&org, "/v1/webhooks").await, 200);
    let ping: wire::PingAnswer = read(&app.post_empty(&org, &format!("{path}/ping")).await, 202);
    declared("WebhookRequest", &[body(&request)]);
    declared("Webhook", &[value(&webhook)]);
    declared("PingAccepted", &[value(&ping)]);

    // Escrows through their steps, with and without an arbiter.
    let buyer = create_agent(&app, "buyer").await;
    app.mandate(&org, &crate::helpers::standard_mandate("buyer"))
        .await;
    let (mut escrows, mut requests) = (Vec::new(), Vec::new());
    for arbiter in [Some("role:arbiter".to_owned()), None] {
        let allow = answer(
            &app.post(
                &buyer.agent_key,
                "/v1/authorizations",
                body(&authorize("42.50")),
            )
            .await,
        );
        let request = wire::CreateEscrow {
            amount: Amount::parse("42.50").unwrap(),
            arbiter: arbiter.clone(),
            buyer: AgentId::parse("agt_buyer").unwrap(),
            currency: Currency::parse("USD").unwrap(),
            decision: DecisionId::clone(&allow.id),
            seller: Recipient::parse("vendor:acme").unwrap(),
        };
        let escrow: wire::Escrow = read(&app.post(&org, "/v1/escrows", body(&request)).await, 201);
        assert_eq!(escrow.arbiter, arbiter);
        escrows.push(value(&escrow));
        requests.push(body(&request));
        let path = format!("/v1/escrows/{}", escrow.id);
        let _: wire::Escrow = read(&app.get(&org, &path).await, 200);
        for step in ["deliver", "dispute", "release"] {
            let moved: wire::Escrow =
                read(&app.post_empty(&org, &format!("{path}/{step}")).await, 200);
            assert_eq!(moved.history.last().map(|h| h.state), Some(moved.state));
        }
    }
    declared("Escrow", &escrows);
    declared("EscrowRequest", &requests);

    // Deleting answers the endpoint, now deleted.
    let deleted: wire::Webhook = read(
        &app.send(reqwest::Method::DELETE, Some(&org), &path, None, &[])
            .await,
        200,
    );
    assert_eq!(deleted.status, "deleted");

    // The events: the ping, the escrows', each read alone too.
    let events: ListPage<wire::Event> = read(&app.get(&org, "/v1/events?limit=100").await, 200);
    assert!(events.data.iter().any(|e| e.id == ping.event));
    assert!(
        events
            .data
            .iter()
            .any(|e| e.event_type == "escrow.released")
    );
    // An event read alone carries its deliveries too; a list leaves them out.
    let mut seen: Vec<Value> = events.data.iter().map(value).collect();
    for event in &events.data {
        let one: wire::Event = read(
            &app.get(&org, &format!("/v1/events/{}", event.id)).await,
            200,
        );
        let mut listed = event.clone();
        listed.deliveries.clone_from(&one.deliveries);
        assert_eq!(one, listed);
        assert!(one.subject().is_some(), "{one:?}");
        seen.push(value(&one));
    }
    declared("Event", &seen);
}
