//! AP2 through the API (issue #36): an open payment mandate imported by
//! `POST /v1/mandates` (AP2's own SDK vectors and tokens signed here), read back with its
//! `source`, each refusal named; closed payment mandates presented with
//! `POST /v1/authorizations`, accepted once (`deny_replay` after), refused for another
//! amount, currency or payee, and the verdict bound to both.

use base64::Engine as _;
use serde_json::{Value, json};

use mandate_core::Signer as _;

use crate::ap2_tokens::{Ap2Keys, closed_by, vectors};
use crate::helpers::{Resp, TestApp, spawn_app};
use crate::process::{binary, db_env};

/// Trusts `jwk` (a JWK's JSON text) for organization `acme` through the operator command.
fn trust(app: &TestApp, jwk: &str) {
    trust_in(app, "acme", jwk);
}

/// Trusts `jwk` for organization `org` through the operator command.
fn trust_in(app: &TestApp, org: &str, jwk: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("issuer.jwk");
    std::fs::write(&file, jwk).unwrap();
    let db = app.db.arg();
    let out = std::process::Command::new(binary())
        .args(["ap2-issuer", "add", "--org", org, "--key"])
        .arg(&file)
        .arg("--db")
        .arg(&db)
        .envs(db_env(&db))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Moves the clock to unix second `at` (later than now).
fn go_to(app: &TestApp, at: i64) {
    let now = app.clock_now().unix_timestamp();
    assert!(at >= now);
    app.advance(at - now);
}

async fn import(app: &TestApp, agent: &str, sd_jwt: &str) -> Resp {
    import_with(app, &app.org.sandbox, agent, sd_jwt).await
}

/// Imports `sd_jwt` for agent `agt_<agent>` with the organization key `org_key`.
async fn import_with(app: &TestApp, org_key: &str, agent: &str, sd_jwt: &str) -> Resp {
    app.post(
        org_key,
        "/v1/mandates",
        json!({"agent": format!("agt_{agent}"), "categories": ["shopping"],
               "ap2": {"open_mandate": sd_jwt}}),
    )
    .await
}

async fn pay(app: &TestApp, key: &str, amount: &str, recipient: &str, closed: &str) -> Resp {
    app.post_text(
        key,
        "/v1/authorizations",
        &format!(
            r#"{{"amount": {amount}, "currency": "USD", "recipient": "{recipient}", "category": "shopping",
                "ap2": {{"closed_mandate": "{closed}"}}}}"#
        ),
    )
    .await
}

/// The claims of a verdict token.
fn claims(r: &Resp) -> Value {
    let token = r.body["verdict_token"].as_str().unwrap();
    let payload = token.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[mandate_test_macros::on_each_engine]
async fn ap2_sdk_open_mandate_is_imported_read_back_and_its_closed_mandates_used_once() {
    let app = spawn_app().await;
    let v = vectors();
    let issuer_jwk = v["issuer_jwks"]["keys"][0].to_string();
    trust(&app, &issuer_jwk);
    go_to(&app, v["now"].as_i64().unwrap());
    let key = app.agent(&app.org.sandbox, "buyer").await;
    let open = v["open_full"].as_str().unwrap();

    let r = import(&app, "buyer", open).await;
    assert_eq!(r.status, 201, "{}", r.text);
    // The terms AP2's constraints map to, exactly as written.
    let limits = &r.body["limits"];
    assert_eq!(limits["per_transaction"].to_string(), "50.00");
    assert_eq!(limits["min_per_transaction"].to_string(), "1.00");
    assert_eq!(limits["total"].to_string(), "150.00");
    assert_eq!(limits["count"], json!({"per_month": 1, "total": 12}));
    assert_eq!(limits["currency"], "USD");
    assert_eq!(
        r.body["recipients"]["allow"],
        json!(["vendor:s-1", "vendor:m-2"])
    );
    assert_eq!(r.body["not_before"], "2026-11-23");
    assert_eq!(r.body["expires"], "2026-12-31");
    assert_eq!(r.body["categories"], json!(["shopping"]));
    let source = r.body["source"].clone();
    assert_eq!(source["type"], "ap2");
    assert_eq!(source["open_mandate"], open);
    let issuer_jwt = open.split('~').next().unwrap();
    assert_eq!(source["digest"], crate::ap2_tokens::hash(issuer_jwt));
    assert_eq!(source["payment_reference"], "chk-digest-1");
    assert_eq!(source["allowed_payment_instruments"][0]["id"], "pi-1");
    assert_eq!(source["allowed_pisps"][0]["domain_name"], "payco.example");
    // The answer reads as the wire type the CLI uses, source included.
    let typed: mandate_protocol::wire::Mandate = serde_json::from_value(r.body.clone()).unwrap();
    assert_eq!(
        typed.source.unwrap().digest,
        source["digest"].as_str().unwrap()
    );

    // A read and the list give the same source; a plain mandate has none.
    let id = r.body["id"].as_str().unwrap();
    let shown = app
        .get(&app.org.sandbox, &format!("/v1/mandates/{id}"))
        .await;
    assert_eq!(shown.status, 200, "{}", shown.text);
    assert_eq!(shown.body["source"], source);
    assert_eq!(shown.body["limits"], r.body["limits"]);
    app.standard_agent(&app.org.sandbox, "plain").await;
    let listed = app.get(&app.org.sandbox, "/v1/mandates").await;
    let items = listed.body["data"].as_array().unwrap();
    let of = |agent: &str| items.iter().find(|m| m["agent"] == agent).unwrap().clone();
    assert_eq!(of("agt_buyer")["source"], source);
    assert!(of("agt_plain").get("source").is_none());

    // AP2's own presentation (tx-1: 12.34 USD to s-1): allowed, bound to both.
    let presentation = v["presentation"].as_str().unwrap();
    let r = pay(&app, &key, "12.34", "vendor:s-1", presentation).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    let c = claims(&r);
    assert_eq!(c["ap2_mandate"], source["digest"], "{c}");
    assert_eq!(c["ap2_transaction"], "tx-1", "{c}");
    // The same consent again: deny_replay, whoever presents it and however often.
    app.advance(61);
    let again = pay(&app, &key, "12.34", "vendor:s-1", presentation).await;
    assert_eq!(again.body["verdict"], "deny_replay", "{}", again.text);
    // tx-2 (49.99): the mandate's count of one a month is spent.
    app.advance(61);
    let second = pay(
        &app,
        &key,
        "49.99",
        "vendor:s-1",
        v["presentation_issuer_jwt_hash"].as_str().unwrap(),
    )
    .await;
    assert_eq!(second.body["verdict"], "deny_limit", "{}", second.text);
    assert!(
        second.body["reason"]
            .as_str()
            .unwrap()
            .contains("count.per_month"),
        "{}",
        second.text
    );
}

/// A mandate imported from an AP2 open mandate that has every bound value (reference,
/// instruments, PISPs), for agent `name` (registered here) of organization `acme`; the
/// answer.
pub async fn imported_mandate(app: &TestApp, name: &str) -> Value {
    let keys = Ap2Keys::new(42);
    let store = &app.running.as_ref().unwrap().state.store;
    mandate_server::operator::add_ap2_issuer(
        &**store,
        "acme",
        &keys.issuer.public_jwk(),
        app.clock_now(),
    )
    .unwrap();
    app.agent(&app.org.sandbox, name).await;
    let now = app.clock_now().unix_timestamp();
    let open = keys.open(
        json!([
            {"type": "payment.budget", "currency": "USD", "max": 150},
            {"type": "payment.reference", "conditional_transaction_id": "chk-1"},
            {"type": "payment.allowed_payment_instruments", "allowed": [{"id": "pi-1", "type": "credit"}]},
            {"type": "payment.allowed_pisps", "allowed": [{"domain_name": "payco.example"}]},
        ]),
        now - 60,
        now + 86_400,
    );
    let r = import(app, name, &open).await;
    assert_eq!(r.status, 201, "{}", r.text);
    for member in [
        "payment_reference",
        "allowed_payment_instruments",
        "allowed_pisps",
    ] {
        assert!(
            r.body["source"].get(member).is_some(),
            "{member}: {}",
            r.text
        );
    }
    r.body
}

/// An open mandate with a budget of 150 USD and 100 a payment, for the tests below.
fn budget_mandate(keys: &Ap2Keys, now: i64) -> String {
    keys.open(
        json!([
            {"type": "payment.amount_range", "currency": "USD", "max": 10000},
            {"type": "payment.budget", "currency": "USD", "max": 150},
            {"type": "payment.allowed_payees", "allowed": [{"id": "shop", "name": "Shop"}]},
        ]),
        now - 60,
        now + 7 * 86_400,
    )
}

#[mandate_test_macros::on_each_engine]
async fn closed_mandates_must_name_the_request_s_payment_and_are_consumed_once() {
    let app = spawn_app().await;
    let keys = Ap2Keys::new(3);
    trust(&app, &keys.issuer_jwk());
    let now = app.clock_now().unix_timestamp();
    let key = app.agent(&app.org.sandbox, "buyer").await;
    let open = budget_mandate(&keys, now);
    let r = import(&app, "buyer", &open).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let digest = r.body["source"]["digest"].as_str().unwrap().to_owned();

    let tx1 = keys.closed(&open, "tx-1", 4000, "USD", "shop", now);
    // Another amount, currency or payee than the closed mandate's: 400, naming it.
    for (amount, currency, recipient, named) in [
        ("40.01", "USD", "vendor:shop", "amount"),
        ("40", "EUR", "vendor:shop", "currency"),
        ("40", "USD", "vendor:other", "recipient"),
        // Payee ids are compared exactly, as AP2's evaluator does.
        ("40", "USD", "vendor:SHOP", "recipient"),
    ] {
        let r = app
            .post_text(
                &key,
                "/v1/authorizations",
                &format!(
                    r#"{{"amount": {amount}, "currency": "{currency}", "recipient": "{recipient}",
                        "category": "shopping", "ap2": {{"closed_mandate": "{tx1}"}}}}"#
                ),
            )
            .await;
        let message = r.assert_error(400, "invalid_request");
        assert!(message.contains(named), "{named}: {message}");
    }
    // Nothing was consumed by those: the right request is allowed, once.
    let r = pay(&app, &key, "40.00", "vendor:shop", &tx1).await;
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    let c = claims(&r);
    assert_eq!(c["ap2_mandate"], digest.as_str());
    assert_eq!(c["ap2_transaction"], "tx-1");
    app.advance(61);
    // Re-signed (another nonce, same consent) it is the same credential.
    let resigned = keys.closed(&open, "tx-1", 4000, "USD", "shop", now + 30);
    assert_ne!(resigned, tx1);
    let r = pay(&app, &key, "40", "vendor:shop", &resigned).await;
    assert_eq!(r.body["verdict"], "deny_replay", "{}", r.text);
    assert!(
        r.body["reason"].as_str().unwrap().contains("ap2_"),
        "{}",
        r.text
    );

    // Signed by another key than the open mandate's cnf: refused, naming it.
    let stranger = Ap2Keys::new(4);
    let forged = closed_by(&stranger.holder, &open, "tx-9", 1000, "USD", "shop", now);
    let r = pay(&app, &key, "10", "vendor:shop", &forged).await;
    let message = r.assert_error(400, "invalid_request");
    assert!(message.contains("cnf"), "{message}");
    // Chained to another open mandate.
    let other_open = budget_mandate(&keys, now + 1);
    let other = keys.closed(&other_open, "tx-8", 1000, "USD", "shop", now);
    let r = pay(&app, &key, "10", "vendor:shop", &other).await;
    let message = r.assert_error(400, "invalid_request");
    assert!(message.contains("another open mandate"), "{message}");

    // The budget is the mandate's: 40 + 100 = 140, then 20 more is over 150.
    app.advance(61);
    let r = pay(
        &app,
        &key,
        "100",
        "vendor:shop",
        &keys.closed(&open, "tx-2", 10000, "USD", "shop", now),
    )
    .await;
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    app.advance(61);
    let r = pay(
        &app,
        &key,
        "20",
        "vendor:shop",
        &keys.closed(&open, "tx-3", 2000, "USD", "shop", now),
    )
    .await;
    assert_eq!(r.body["verdict"], "deny_limit", "{}", r.text);
    // A denied consent was not used up: the same closed mandate for the same payment
    // is judged again (and denied again on the budget, not as a replay).
    app.advance(61);
    let r = pay(
        &app,
        &key,
        "20",
        "vendor:shop",
        &keys.closed(&open, "tx-3", 2000, "USD", "shop", now),
    )
    .await;
    assert_eq!(r.body["verdict"], "deny_limit", "{}", r.text);

    // Without a closed mandate the imported terms are enforced as any mandate's (docs:
    // a closed mandate is optional; a counterparty that needs AP2 consent requires the
    // verdict's ap2_transaction): 5 more fits the budget, with no AP2 claim.
    app.advance(61);
    let r = app
        .post_text(
            &key,
            "/v1/authorizations",
            r#"{"amount": 5, "currency": "USD", "recipient": "vendor:shop", "category": "shopping"}"#,
        )
        .await;
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    let c = claims(&r);
    assert!(c.get("ap2_transaction").is_none(), "{c}");
}

#[mandate_test_macros::on_each_engine]
async fn ap2_imports_and_presentations_are_refused_naming_the_problem() {
    let app = spawn_app().await;
    let keys = Ap2Keys::new(5);
    let now = app.clock_now().unix_timestamp();
    app.agent(&app.org.sandbox, "buyer").await;
    let good = budget_mandate(&keys, now);

    // No trusted issuer yet.
    let r = import(&app, "buyer", &good).await;
    let message = r.assert_error(400, "invalid_request");
    assert!(message.contains("ap2-issuer add"), "{message}");
    trust(&app, &keys.issuer_jwk());

    let other_issuer = Ap2Keys::new(6);
    let mut tampered: Vec<String> = good.split('.').map(str::to_owned).collect();
    tampered[2] = other_issuer
        .open(json!([]), now, now + 60)
        .split('.')
        .nth(2)
        .unwrap()
        .to_owned();
    let tampered = tampered.join(".");
    let cases: Vec<(String, Value, &str)> = vec![
        // Signed by a key the organization does not trust.
        (
            budget_mandate(&other_issuer, now),
            json!({}),
            "not trusted",
        ),
        // A signature that is not the trusted key's.
        (tampered, json!({}), "signature"),
        // Expired.
        (
            keys.open(
                json!([{"type": "payment.budget", "currency": "USD", "max": 150}]),
                now - 7200,
                now - 3600,
            ),
            json!({}),
            "expired",
        ),
        // A budget finer than the currency's minor unit (#51), named.
        (
            keys.open(
                json!([{"type": "payment.budget", "currency": "JPY", "max": 150.5}]),
                now - 60,
                now + 3600,
            ),
            json!({}),
            "constraint payment.budget cannot be enforced: max 150.5 is finer than JPY's minor unit",
        ),
        // A constraint Mandate does not know, named.
        (
            keys.open(
                json!([{"type": "payment.budget", "currency": "USD", "max": 150},
                       {"type": "payment.loyalty_points", "max": 3}]),
                now,
                now + 3600,
            ),
            json!({}),
            "payment.loyalty_points",
        ),
        // A recurrence Mandate has no window for.
        (
            keys.open(
                json!([{"type": "payment.budget", "currency": "USD", "max": 150},
                       {"type": "payment.agent_recurrence", "frequency": "QUARTERLY"}]),
                now,
                now + 3600,
            ),
            json!({}),
            "payment.agent_recurrence",
        ),
        // Wrong vct.
        (
            keys.open_with(json!({"vct": "mandate.checkout.open.1",
                "constraints": [], "cnf": {"jwk": keys.holder_jwk()}, "iat": now, "exp": now + 60})),
            json!({}),
            "vct",
        ),
        // Terms the open mandate sets, given beside it.
        (good.clone(), json!({"limits": {"per_transaction": 1, "currency": "USD"}}), "limits"),
        (good.clone(), json!({"expires": "2026-12-31"}), "expires"),
        (good.clone(), json!({"recipients": {"allow": ["vendor:x"]}}), "recipients"),
        // Not an SD-JWT at all.
        ("not-a-token".into(), json!({}), "ap2.open_mandate"),
    ];
    for (sd_jwt, extra, named) in cases {
        let mut body = json!({"agent": "agt_buyer", "categories": ["shopping"],
                              "ap2": {"open_mandate": sd_jwt}});
        for (k, val) in extra.as_object().unwrap() {
            body[k] = val.clone();
        }
        let r = app.post(&app.org.sandbox, "/v1/mandates", body).await;
        let message = r.assert_error(400, "invalid_request");
        assert!(message.contains(named), "{named}: {message}");
    }
    // The shape of ap2 itself.
    for (ap2, named) in [
        (json!("text"), "ap2 must be an object"),
        (json!({}), "open_mandate"),
        (
            json!({"open_mandate": good, "closed_mandate": "x"}),
            "ap2.closed_mandate",
        ),
        // A non-empty string is the shape openapi.yaml declares; spaces (here a no-break
        // space, which Rust's trim removes) are refused as no SD-JWT, under the member.
        (json!({"open_mandate": "\u{a0} "}), "ap2.open_mandate: "),
        (
            json!({"open_mandate": ""}),
            "ap2 must be an object with one member",
        ),
    ] {
        let r = app
            .post(
                &app.org.sandbox,
                "/v1/mandates",
                json!({"agent": "agt_buyer", "categories": ["shopping"], "ap2": ap2}),
            )
            .await;
        let message = r.assert_error(400, "invalid_request");
        assert!(message.contains(named), "{named}: {message}");
    }
    // Categories are still the caller's to give.
    let r = app
        .post(
            &app.org.sandbox,
            "/v1/mandates",
            json!({"agent": "agt_buyer", "ap2": {"open_mandate": good}}),
        )
        .await;
    let message = r.assert_error(400, "invalid_request");
    assert!(message.contains("categories"), "{message}");
    // Nothing was stored by any of these.
    let listed = app.get(&app.org.sandbox, "/v1/mandates").await;
    assert_eq!(listed.body["data"], json!([]), "{}", listed.text);

    // A closed mandate for a plain mandate: 400.
    let plain = app.standard_agent(&app.org.sandbox, "plain").await;
    let closed = keys.closed(&good, "tx-1", 1000, "USD", "shop", now);
    let r = app
        .post(
            &plain,
            "/v1/authorizations",
            json!({"amount": 10, "currency": "USD", "recipient": "vendor:shop",
                   "category": "software", "ap2": {"closed_mandate": closed}}),
        )
        .await;
    let message = r.assert_error(400, "invalid_request");
    assert!(message.contains("not imported from an AP2"), "{message}");
    let r = app
        .post(
            &plain,
            "/v1/authorizations",
            json!({"amount": 10, "currency": "USD", "recipient": "vendor:shop",
                   "category": "software", "ap2": {"closed": closed}}),
        )
        .await;
    let message = r.assert_error(400, "invalid_request");
    assert!(message.contains("closed_mandate"), "{message}");
    let r = app
        .post(
            &plain,
            "/v1/authorizations",
            json!({"amount": 10, "currency": "USD", "recipient": "vendor:shop",
                   "category": "software", "ap2": {"closed_mandate": "\u{a0}"}}),
        )
        .await;
    let message = r.assert_error(400, "invalid_request");
    assert!(message.starts_with("ap2.closed_mandate: "), "{message}");
}

/// The open mandate `sd_jwt` with the other ECDSA twin of its issuer's signature,
/// `(r, n - s)`: valid as well, another digest, the same consent.
fn twin(sd_jwt: &str) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let (jwt, rest) = sd_jwt.split_once('~').unwrap();
    let (input, signature) = jwt.rsplit_once('.').unwrap();
    let signature =
        p256::ecdsa::Signature::from_slice(&URL_SAFE_NO_PAD.decode(signature).unwrap()).unwrap();
    let (r, s) = signature.split_scalars();
    let other = p256::ecdsa::Signature::from_scalars(r, -s).unwrap();
    format!(
        "{input}.{}~{rest}",
        URL_SAFE_NO_PAD.encode(other.to_bytes())
    )
}

/// One consent, one use, service-wide (#51): an open mandate is in force in the one
/// organization and environment that imported it first; an import anywhere else (another
/// organization, the other environment, its ECDSA twin) is refused without naming where it
/// is in force, so its closed mandates give one allow across the service. Before, the same
/// closed mandate gave an allow in each organization that imported the open mandate.
#[mandate_test_macros::on_each_engine]
async fn an_open_mandate_is_in_force_in_one_organization_and_environment() {
    let app = spawn_app().await;
    let keys = Ap2Keys::new(7);
    trust(&app, &keys.issuer_jwk());
    let globex = app.onboard("globex").await;
    trust_in(&app, "globex", &keys.issuer_jwk());
    let now = app.clock_now().unix_timestamp();
    app.agent(&app.org.sandbox, "buyer").await;
    let acme_second = app.agent(&app.org.sandbox, "second").await;
    let globex_buyer = app.agent(&globex.sandbox, "buyer").await;
    app.agent(&app.org.live, "buyer").await;
    let open = budget_mandate(&keys, now);

    let r = import(&app, "buyer", &open).await;
    assert_eq!(r.status, 201, "{}", r.text);
    // Where it is in force, it may be imported again (another agent of the organization,
    // whose mandate then carries it in place of buyer's).
    let r = import(&app, "second", &open).await;
    assert_eq!(r.status, 201, "{}", r.text);
    // Refused elsewhere, saying so without naming where: the organization's id and
    // environment are another tenant's business.
    let acme = app.org_id("acme");
    for (key, sd_jwt) in [
        (&globex.sandbox, open.clone()),
        (&app.org.live, open.clone()),
        (&globex.sandbox, twin(&open)),
    ] {
        let r = import_with(&app, key, "buyer", &sd_jwt).await;
        let message = r.assert_error(400, "invalid_request");
        assert!(
            message
                .starts_with("ap2.open_mandate: this open mandate is already in force elsewhere"),
            "{message}"
        );
        assert!(!message.contains(&acme), "{message}");
        assert!(!message.contains("sandbox"), "{message}");
    }
    // The twin is the same consent in acme too.
    let r = import(&app, "second", &twin(&open)).await;
    assert_eq!(r.status, 201, "{}", r.text);

    // Its closed mandate: one allow, in acme; globex has no mandate of it to spend under.
    let closed = keys.closed(&open, "tx-1", 4000, "USD", "shop", now);
    let r = pay(&app, &acme_second, "40", "vendor:shop", &closed).await;
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    let r = pay(&app, &globex_buyer, "40", "vendor:shop", &closed).await;
    let message = r.assert_error(400, "invalid_request");
    assert!(message.contains("has no mandate"), "{message}");

    // Two imports of a new open mandate at once, into two places: one is in force.
    let fresh = keys.open(
        json!([{"type": "payment.amount_range", "currency": "USD", "max": 1000}]),
        now - 30,
        now + 86_400,
    );
    let (a, b) = tokio::join!(
        import_with(&app, &globex.sandbox, "buyer", &fresh),
        import_with(&app, &app.org.live, "buyer", &fresh),
    );
    let mut statuses = [a.status, b.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 400], "{} / {}", a.text, b.text);
}

/// A closed mandate without `exp` is redeemed when it is made (#51): presented more than
/// 15 minutes (and the leeway) after its `iat`, it is refused and not consumed; one made
/// before its open mandate was issued is refused too.
#[mandate_test_macros::on_each_engine]
async fn a_stale_closed_mandate_is_refused() {
    let app = spawn_app().await;
    let keys = Ap2Keys::new(8);
    trust(&app, &keys.issuer_jwk());
    let now = app.clock_now().unix_timestamp();
    let key = app.agent(&app.org.sandbox, "buyer").await;
    let open = budget_mandate(&keys, now);
    let r = import(&app, "buyer", &open).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let early = keys.closed(&open, "tx-0", 1000, "USD", "shop", now - 3600);
    let r = pay(&app, &key, "10", "vendor:shop", &early).await;
    let message = r.assert_error(400, "invalid_request");
    assert!(
        message.contains("before the open mandate's iat"),
        "{message}"
    );
    let made = keys.closed(&open, "tx-1", 1000, "USD", "shop", now);
    app.advance(15 * 60 + 61);
    let r = pay(&app, &key, "10", "vendor:shop", &made).await;
    let message = r.assert_error(400, "invalid_request");
    assert!(message.contains("more than 900 s ago"), "{message}");
    let fresh = keys.closed(&open, "tx-1", 1000, "USD", "shop", now + 15 * 60 + 61);
    let r = pay(&app, &key, "10", "vendor:shop", &fresh).await;
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
}

#[mandate_test_macros::on_each_engine]
async fn a_member_repeated_beside_ap2_is_refused_naming_it_and_consumes_nothing() {
    // The body is parsed once, and a member repeated anywhere in it is refused: a gateway
    // that keeps the first of two members would see another payment than the one judged.
    let app = spawn_app().await;
    let keys = Ap2Keys::new(5);
    trust(&app, &keys.issuer_jwk());
    let now = app.clock_now().unix_timestamp();
    let key = app.agent(&app.org.sandbox, "twice").await;
    let open = budget_mandate(&keys, now);
    let r = import(&app, "twice", &open).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let tx = keys.closed(&open, "tx-1", 4000, "USD", "shop", now);
    let ap2 = format!(r#""ap2": {{"closed_mandate": "{tx}"}}"#);
    let plain = r#""currency": "USD", "recipient": "vendor:shop", "category": "shopping""#;
    let x402 = r#""x402": {"scheme": "exact", "network": "eip155:8453", "amount": "40000000",
        "asset": "USD", "payTo": "shop", "maxTimeoutSeconds": 60}"#;
    let cases = [
        (
            format!(r#"{{"amount": 40, {plain}, "ap2": {{"closed_mandate": "x"}}, {ap2}}}"#),
            "ap2",
        ),
        (
            format!(r#"{{"amount": 99, {plain}, {ap2}, "amount": 40}}"#),
            "amount",
        ),
        (
            format!(r#"{{"amount": 40, {plain}, {ap2}, {x402}, {x402}}}"#),
            "x402",
        ),
        (
            format!(
                r#"{{"amount": 40, {plain}, "ap2": {{"closed_mandate": "{tx}", "closed_mandate": "x"}}}}"#
            ),
            "ap2.closed_mandate",
        ),
        (
            format!(r#"{{"amount": 40, {plain}, "acp": {{"allowance": {{}}}}, "acp": null}}"#),
            "acp",
        ),
    ];
    for (body, member) in &cases {
        let r = app.post_text(&key, "/v1/authorizations", body).await;
        assert_eq!(
            r.assert_error(400, "invalid_request"),
            format!("duplicate member \"{member}\": send each member once"),
            "{body}"
        );
    }
    // Nothing was decided or consumed: the closed mandate is accepted once, its member sent
    // once.
    let r = pay(&app, &key, "40", "vendor:shop", &tx).await;
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    assert_eq!(claims(&r)["ap2_transaction"], "tx-1");
}

/// A request of `amount` USD to the open mandates' payee `shop`, without a closed mandate:
/// judged against the imported terms alone.
async fn spend(app: &TestApp, key: &str, amount: &str) -> Resp {
    app.post_text(
        key,
        "/v1/authorizations",
        &format!(
            r#"{{"amount": {amount}, "currency": "USD", "recipient": "vendor:shop", "category": "shopping"}}"#
        ),
    )
    .await
}

/// The verdict of a request, after it was answered 201.
fn verdict(r: &Resp) -> &str {
    assert_eq!(r.status, 201, "{}", r.text);
    r.body["verdict"].as_str().unwrap()
}

/// An open mandate of 100 USD a payment and `constraints` besides, to payee `shop`.
fn open_of(keys: &Ap2Keys, now: i64, constraints: &[Value]) -> String {
    let mut all = vec![
        json!({"type": "payment.amount_range", "currency": "USD", "max": 10000}),
        json!({"type": "payment.allowed_payees", "allowed": [{"id": "shop", "name": "Shop"}]}),
    ];
    all.extend(constraints.iter().cloned());
    keys.open(Value::Array(all), now - 60, now + 7 * 86_400)
}

/// An open mandate is one running total (#67): one with a budget of 100 USD imported three
/// times in one organization and environment (agent one, agent two, agent one again)
/// allowed 300 USD. Each import now supersedes the mandate carrying it before, whatever its
/// agent, shows what was spent already (`source.spent_before`, `remaining`), and spends on
/// from there: 100 in all.
#[mandate_test_macros::on_each_engine]
async fn an_open_mandate_s_budget_is_one_running_total_across_imports() {
    let app = spawn_app().await;
    let keys = Ap2Keys::new(21);
    trust(&app, &keys.issuer_jwk());
    let now = app.clock_now().unix_timestamp();
    let one = app.agent(&app.org.sandbox, "one").await;
    let two = app.agent(&app.org.sandbox, "two").await;
    let budget = json!({"type": "payment.budget", "currency": "USD", "max": 100});
    let open = open_of(&keys, now, &[budget]);

    let first = import(&app, "one", &open).await;
    assert_eq!(first.status, 201, "{}", first.text);
    assert!(
        first.body["source"].get("spent_before").is_none(),
        "{}",
        first.text
    );
    assert_eq!(verdict(&spend(&app, &one, "60").await), "allow");

    let second = import(&app, "two", &open).await;
    assert_eq!(second.status, 201, "{}", second.text);
    assert_eq!(
        second.body["source"]["spent_before"],
        json!({"count": 1, "total": 60}),
        "{}",
        second.text
    );
    let id = second.body["id"].as_str().unwrap();
    let read = app
        .get(&app.org.sandbox, &format!("/v1/mandates/{id}"))
        .await;
    assert_eq!(
        read.body["remaining"]["total"].to_string(),
        "40.00",
        "{}",
        read.text
    );
    assert_eq!(read.body["source"], second.body["source"]);
    // The first mandate no longer carries it: superseded, its agent refused.
    let first_id = first.body["id"].as_str().unwrap();
    let old = app
        .get(&app.org.sandbox, &format!("/v1/mandates/{first_id}"))
        .await;
    assert_eq!(old.body["status"], "superseded", "{}", old.text);
    assert_eq!(verdict(&spend(&app, &one, "10").await), "deny_no_mandate");
    // The second spends what is left, and no more.
    let over = spend(&app, &two, "50").await;
    assert_eq!(verdict(&over), "deny_limit");
    assert!(
        over.body["reason"].as_str().unwrap().contains("total"),
        "{}",
        over.text
    );
    assert_eq!(verdict(&spend(&app, &two, "40").await), "allow");

    // Imported again for the first agent: everything is spent.
    let third = import(&app, "one", &open).await;
    assert_eq!(
        third.body["source"]["spent_before"],
        json!({"count": 2, "total": 100}),
        "{}",
        third.text
    );
    assert_eq!(verdict(&spend(&app, &one, "0.01").await), "deny_limit");
    assert_eq!(verdict(&spend(&app, &two, "0.01").await), "deny_no_mandate");
    let allowed = app
        .get(&app.org.sandbox, "/v1/decisions?verdict=allow&limit=100")
        .await;
    assert_eq!(
        allowed.body["data"].as_array().unwrap().len(),
        2,
        "{}",
        allowed.text
    );
}

/// `max_occurrences` is one count across imports (#67): an open mandate of two payments
/// imported three times gave six. A revoked mandate's payments count too, as do those of a
/// mandate imported before the consent key was kept with it (its key is read from its
/// SD-JWT at the next import), and the other ECDSA twin of the issuer's signature is the
/// same open mandate.
#[mandate_test_macros::on_each_engine]
async fn max_occurrences_are_one_count_across_imports_revocations_and_twins() {
    let app = spawn_app().await;
    let keys = Ap2Keys::new(22);
    trust(&app, &keys.issuer_jwk());
    let now = app.clock_now().unix_timestamp();
    let one = app.agent(&app.org.sandbox, "one").await;
    let two = app.agent(&app.org.sandbox, "two").await;
    let three = app.agent(&app.org.sandbox, "three").await;
    let recurrence = json!({"type": "payment.agent_recurrence", "frequency": "ON_DEMAND",
                            "max_occurrences": 2});
    let open = open_of(&keys, now, &[recurrence]);

    let first = import(&app, "one", &open).await;
    assert_eq!(first.status, 201, "{}", first.text);
    assert_eq!(verdict(&spend(&app, &one, "5").await), "allow");
    // As if imported before migration 0018: no consent key kept with it.
    let first_id = first.body["id"].as_str().unwrap();
    app.db.execute(
        "UPDATE mandates SET ap2_consent = NULL WHERE id = $1",
        &[first_id],
    );
    let revoked = app
        .post_empty(&app.org.sandbox, &format!("/v1/mandates/{first_id}/revoke"))
        .await;
    assert_eq!(revoked.status, 200, "{}", revoked.text);

    let second = import(&app, "two", &twin(&open)).await;
    assert_eq!(
        second.body["source"]["spent_before"],
        json!({"count": 1, "total": 5}),
        "{}",
        second.text
    );
    let id = second.body["id"].as_str().unwrap();
    let read = app
        .get(&app.org.sandbox, &format!("/v1/mandates/{id}"))
        .await;
    assert_eq!(read.body["remaining"]["count"]["total"], 1, "{}", read.text);
    assert_eq!(verdict(&spend(&app, &two, "7").await), "allow");
    let over = spend(&app, &two, "1").await;
    assert_eq!(verdict(&over), "deny_limit");
    assert!(
        over.body["reason"]
            .as_str()
            .unwrap()
            .contains("count.total"),
        "{}",
        over.text
    );

    let third = import(&app, "three", &open).await;
    assert_eq!(
        third.body["source"]["spent_before"],
        json!({"count": 2, "total": 12}),
        "{}",
        third.text
    );
    assert_eq!(verdict(&spend(&app, &three, "1").await), "deny_limit");
}

/// An import racing the payments of the agent whose mandate carried the open mandate
/// (#67): what that agent was allowed before the import counts, what came after is
/// refused, and the new agent spends exactly the rest (budget 150, payments of 40: three
/// in all, whichever agent made them).
#[mandate_test_macros::on_each_engine]
async fn an_import_racing_payments_spends_the_budget_once() {
    let app = spawn_app().await;
    let keys = Ap2Keys::new(23);
    trust(&app, &keys.issuer_jwk());
    let now = app.clock_now().unix_timestamp();
    let one = app.agent(&app.org.sandbox, "one").await;
    let two = app.agent(&app.org.sandbox, "two").await;
    let budget = json!({"type": "payment.budget", "currency": "USD", "max": 150});
    let open = open_of(&keys, now, &[budget]);
    let r = import(&app, "one", &open).await;
    assert_eq!(r.status, 201, "{}", r.text);

    let payments = futures_util::future::join_all((0..6).map(|_| spend(&app, &one, "40")));
    let (payments, moved) = tokio::join!(payments, import(&app, "two", &open));
    assert_eq!(moved.status, 201, "{}", moved.text);
    let before = payments.iter().filter(|r| verdict(r) == "allow").count();
    for r in &payments {
        assert!(
            ["allow", "deny_limit", "deny_no_mandate"].contains(&verdict(r)),
            "{}",
            r.text
        );
    }
    let carried = &moved.body["source"]["spent_before"];
    assert_eq!(carried["count"], before, "{}", moved.text);
    let mut after = 0;
    loop {
        let r = spend(&app, &two, "40").await;
        match verdict(&r) {
            "allow" => after += 1,
            "deny_limit" => break,
            other => panic!("{other}: {}", r.text),
        }
    }
    assert_eq!(
        before + after,
        3,
        "{before} before the import, {after} after"
    );
}
