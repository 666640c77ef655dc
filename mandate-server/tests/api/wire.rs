//! The wire types of `mandate_core::wire` against the real server: every object the API
//! answers is read into its type and written back byte for byte (members sorted by name,
//! as the server writes them through a `Value`; the decision answer in its signed order),
//! and every request body the types describe is accepted. A drift between the server and
//! the types (a member added, renamed, made optional, null where it was absent) fails here.

use mandate_core::amount::Amount;
use mandate_core::id::{AgentId, DecisionId};
use mandate_core::mandate::{EscrowTerms, Limits};
use mandate_core::names::{AgentName, Category, Currency, Principal, Recipient};
use mandate_core::policy::{Mode, Verdict};
use mandate_core::review::ReviewStatus;
use mandate_core::wire::{self, ListPage};
use serde::Serialize;
use serde::de::DeserializeOwned;
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
fn answer(r: &Resp) -> wire::DecisionAnswer {
    assert_eq!(r.status, 201, "{}", r.text);
    let typed: wire::DecisionAnswer = serde_json::from_str(&r.text)
        .unwrap_or_else(|e| panic!("{e}: {} does not read as a decision answer", r.text));
    assert_eq!(serde_json::to_string(&typed).unwrap(), r.text);
    typed
}

fn body<T: Serialize>(request: &T) -> serde_json::Value {
    serde_json::to_value(request).unwrap()
}

fn authorize(amount: &str) -> wire::Authorize {
    wire::Authorize {
        amount: Amount::parse(amount).unwrap(),
        category: Category::parse("software").unwrap(),
        currency: Currency::parse("USD").unwrap(),
        recipient: Recipient::parse("vendor:acme").unwrap(),
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

#[tokio::test]
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
            per_month: Some(Amount::parse("450").unwrap()),
            currency: Currency::parse("USD").unwrap(),
        },
        principal: Some(Principal::parse("role:cfo").unwrap()),
        review_above: Some(Amount::parse("50").unwrap()),
    };
    let mandate: wire::Mandate = read(&app.post(&org, "/v1/mandates", body(&full)).await, 201);
    assert_eq!(mandate.limits, full.limits);
    let minimal = wire::CreateMandate {
        agent: plain.id.clone(),
        escrow: None,
        principal: None,
        review_above: None,
        limits: Limits {
            per_month: None,
            ..full.limits.clone()
        },
        ..full.clone()
    };
    let _: wire::Mandate = read(&app.post(&org, "/v1/mandates", body(&minimal)).await, 201);
    let path = format!("/v1/mandates/{}", mandate.id);
    let _: wire::Mandate = read(&app.get(&org, &path).await, 200);
    let _: ListPage<wire::Mandate> = read(&app.get(&org, "/v1/mandates").await, 200);

    // An allow, a review (the answer carries the whole review), a denial without mandate.
    let allow = answer(
        &app.post(
            &buyer.agent_key,
            "/v1/authorizations",
            body(&authorize("20.00")),
        )
        .await,
    );
    assert_eq!(allow.verdict, Verdict::Allow);
    assert!(allow.review.is_none() && allow.reason.is_none());
    let review = answer(
        &app.post(
            &buyer.agent_key,
            "/v1/authorizations",
            body(&authorize("60")),
        )
        .await,
    );
    assert_eq!(review.verdict, Verdict::Review);
    let opened = review.review.as_ref().and_then(|r| r.review()).unwrap();
    assert_eq!(opened.status, ReviewStatus::Pending);
    let none = answer(
        &app.post(&bare.agent_key, "/v1/authorizations", body(&authorize("1")))
            .await,
    );
    assert_eq!(none.verdict, Verdict::DenyNoMandate);
    assert!(none.mandate.is_none());

    for id in [&allow.id, &review.id, &none.id] {
        let stored: wire::Decision =
            read(&app.get(&org, &format!("/v1/decisions/{id}")).await, 200);
        assert_eq!(&stored.id, id);
    }
    let _: ListPage<wire::Decision> = read(&app.get(&org, "/v1/decisions").await, 200);

    // Approving answers a fresh decision that supersedes the original.
    let approved = answer(
        &app.post_empty(&org, &format!("/v1/reviews/{}/approve", opened.id))
            .await,
    );
    assert_eq!(approved.supersedes.as_ref(), Some(&review.id));
    let stored: wire::Decision = read(
        &app.get(&org, &format!("/v1/decisions/{}", approved.id))
            .await,
        200,
    );
    assert_eq!(stored.supersedes.as_ref(), Some(&review.id));

    // Denying answers the review, with and without a reason.
    for reason in [Some("over budget".to_owned()), None] {
        let asked = answer(
            &app.post(
                &buyer.agent_key,
                "/v1/authorizations",
                body(&authorize("70")),
            )
            .await,
        );
        let id = asked.review.as_ref().unwrap().id().clone();
        let request = wire::DenyReview {
            reason: reason.clone(),
        };
        let denied: wire::Review = read(
            &app.post(&org, &format!("/v1/reviews/{id}/deny"), body(&request))
                .await,
            200,
        );
        assert_eq!(denied.status, ReviewStatus::Denied);
        assert_eq!(denied.reason, reason);
    }

    // Revoking answers the mandate.
    let revoked: wire::Mandate = read(&app.post_empty(&org, &format!("{path}/revoke")).await, 200);
    assert_eq!(
        revoked.status,
        mandate_core::mandate::MandateStatus::Revoked
    );
}

#[tokio::test]
async fn enforcement_webhooks_events_and_escrows_read_as_their_types_byte_for_byte() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();

    let _: wire::Enforcement = read(&app.get(&org, "/v1/enforcement").await, 200);
    let set = wire::SetEnforcement {
        mode: Mode::Observe,
    };
    let mode: wire::Enforcement = read(&app.post(&org, "/v1/enforcement", body(&set)).await, 200);
    assert_eq!(mode.mode, Mode::Observe);
    let set = wire::SetEnforcement {
        mode: Mode::Enforce,
    };
    let _: wire::Enforcement = read(&app.post(&org, "/v1/enforcement", body(&set)).await, 200);

    let request = wire::CreateWebhook {
        events: vec!["ping".into(), "escrow.funded".into()],
        url: "http://127.0.0.1:9/hook".into(),
    };
    let webhook: wire::Webhook = read(&app.post(&org, "/v1/webhooks", body(&request)).await, 201);
    let path = format!("/v1/webhooks/{}", webhook.webhook);
    let _: wire::Webhook = read(&app.get(&org, &path).await, 200);
    let _: ListPage<wire::Webhook> = read(&app.get(&org, "/v1/webhooks").await, 200);
    let ping: wire::PingAnswer = read(&app.post_empty(&org, &format!("{path}/ping")).await, 202);

    // An escrow through its steps.
    let buyer = create_agent(&app, "buyer").await;
    app.mandate(&org, &crate::helpers::standard_mandate("buyer"))
        .await;
    let allow = answer(
        &app.post(
            &buyer.agent_key,
            "/v1/authorizations",
            body(&authorize("42.50")),
        )
        .await,
    );
    for arbiter in [Some("role:arbiter".to_owned()), None] {
        let decision = if arbiter.is_some() {
            allow.id.clone()
        } else {
            answer(
                &app.post(
                    &buyer.agent_key,
                    "/v1/authorizations",
                    body(&authorize("42.50")),
                )
                .await,
            )
            .id
        };
        let request = wire::CreateEscrow {
            amount: Amount::parse("42.50").unwrap(),
            arbiter: arbiter.clone(),
            buyer: AgentId::parse("agt_buyer").unwrap(),
            currency: Currency::parse("USD").unwrap(),
            decision: DecisionId::clone(&decision),
            seller: Recipient::parse("vendor:acme").unwrap(),
        };
        let escrow: wire::Escrow = read(&app.post(&org, "/v1/escrows", body(&request)).await, 201);
        assert_eq!(escrow.arbiter, arbiter);
        let path = format!("/v1/escrows/{}", escrow.id);
        let _: wire::Escrow = read(&app.get(&org, &path).await, 200);
        for step in ["deliver", "dispute", "release"] {
            let moved: wire::Escrow =
                read(&app.post_empty(&org, &format!("{path}/{step}")).await, 200);
            assert_eq!(moved.history.last().map(|h| h.state), Some(moved.state));
        }
    }

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
    for event in &events.data {
        let one: wire::Event = read(
            &app.get(&org, &format!("/v1/events/{}", event.id)).await,
            200,
        );
        assert_eq!(&one, event);
        assert!(one.subject().is_some(), "{one:?}");
    }
}
