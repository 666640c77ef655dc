//! API key rows bound to the key-encryption key (issue #40, item 6), on both engines: with a
//! KEK, a key row written into the database without it (planted, or edited to reach
//! further) is refused exactly as an unknown key; rows stored without the KEK are bound by
//! the operator's explicit `bind-api-keys` (here its function), never by a start; a KEK
//! rotation binds them again under the new KEK and the keys keep working.

use mandate_server::model::Env;
use mandate_server::operator;
use mandate_server::signing::api_keys::{self, KeyBinder};
use mandate_server::signing::at_rest::{self, Kek, KeyEncryption};
use mandate_server::storage::keys;

use crate::helpers::{TEST_KEK, TestApp, spawn_app_with};

/// Another KEK, for the rotation.
const NEXT_KEK: &str = "bWFuZGF0ZS10ZXN0cy1rZXktZW5jcnlwdGlvbi1uZXg=";

fn kek(text: &str) -> Kek {
    Kek::from_base64(text.as_bytes(), "test").unwrap()
}

/// A server whose KEK is [`TEST_KEK`] on either engine.
async fn app_with_kek() -> TestApp {
    spawn_app_with(|config| config.key_encryption = KeyEncryption::new(kek(TEST_KEK), None)).await
}

/// Stops `app`'s server and starts another on its database with `keys`.
async fn restart_with(app: &mut TestApp, keys: KeyEncryption) {
    app.running.take().unwrap().shutdown().await.unwrap();
    let mut config = crate::helpers::config(&app.db);
    config.key_encryption = keys;
    let running = mandate_server::serve::start(config, app.clock.clone())
        .await
        .unwrap();
    app.api = format!("http://{}", running.api_addr);
    app.public = format!("http://{}", running.public_addr);
    app.running = Some(running);
}

/// `bytes` as a literal of the engine's binary type.
fn blob(bytes: &[u8]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    if crate::engine::postgres() {
        format!("'\\x{hex}'::bytea")
    } else {
        format!("X'{hex}'")
    }
}

/// A refusal as a caller sees it: the status and the envelope but its request id.
fn refusal(r: &crate::helpers::Resp) -> (u16, String, String) {
    let field = |name: &str| {
        r.body["error"][name]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    (r.status, field("code"), field("message"))
}

/// The 401 an unknown key gets, to compare refusals with.
async fn unknown_401(app: &TestApp) -> (u16, String, String) {
    let r = app
        .get("sk_live_nosuchkeynosuchkeynosuchkey00", "/v1/agents")
        .await;
    refusal(&r)
}

/// Plants an organization key row for `key` (no binding), as someone with write access to
/// the database could.
fn plant(app: &TestApp, key: &str, org_id: &str, env: &str) {
    let hash = keys::hash(key);
    app.db.execute(
        &format!(
            "INSERT INTO api_keys (hash, fingerprint, org_id, env, class, agent_id, created_ms)
             VALUES ({}, $1, $2, $3, 'org', NULL, 0)",
            blob(&hash)
        ),
        &[&keys::fingerprint(&hash), org_id, env],
    );
}

#[mandate_test_macros::on_each_engine]
async fn with_a_kek_a_key_row_planted_or_edited_in_the_database_is_refused_as_unknown() {
    let app = app_with_kek().await;
    let org_key = app.org.sandbox.clone();
    assert_eq!(app.get(&org_key, "/v1/agents").await.status, 200);
    let unknown = unknown_401(&app).await;
    assert_eq!(unknown.0, 401, "{unknown:?}");
    let org_id = app.org_id("acme");

    // A planted live organization key: refused exactly as an unknown key.
    let planted = "sk_live_plantedplantedplantedplanted1";
    plant(&app, planted, &org_id, "live");
    let r = app.get(planted, "/v1/agents").await;
    assert_eq!(refusal(&r), unknown);
    // The same with a binding copied from a genuine row: made for another row.
    app.db.execute(
        "UPDATE api_keys SET binding = (SELECT binding FROM api_keys WHERE fingerprint = $2)
         WHERE fingerprint = $1",
        &[
            &keys::fingerprint(&keys::hash(planted)),
            &keys::fingerprint(&keys::hash(&org_key)),
        ],
    );
    let r = app.get(planted, "/v1/agents").await;
    assert_eq!(refusal(&r), unknown);

    // Rows edited to reach further, before their keys are first used: an organization key
    // moved to the live environment, an agent key moved to another agent, an agent key
    // made an organization key.
    let running = app.running.as_ref().unwrap();
    let (moved, moved_fp) = operator::issue_key(
        &*running.state.store,
        &running.state.api_keys,
        "acme",
        Env::Sandbox,
        app.clock_now(),
    )
    .unwrap();
    app.db.execute(
        "UPDATE api_keys SET env = 'live' WHERE fingerprint = $1",
        &[&moved_fp],
    );
    let r = app.get(&moved, "/v1/agents").await;
    assert_eq!(refusal(&r), unknown);
    let victim = app.agent(&org_key, "victim").await;
    let thief = app.agent(&org_key, "thief").await;
    let promoted = app.agent(&org_key, "promoted").await;
    let victim_id = "agt_victim";
    app.db.execute(
        "UPDATE api_keys SET agent_id = $2 WHERE fingerprint = $1",
        &[&keys::fingerprint(&keys::hash(&thief)), victim_id],
    );
    app.db.execute(
        "UPDATE api_keys SET class = 'org', agent_id = NULL WHERE fingerprint = $1",
        &[&keys::fingerprint(&keys::hash(&promoted))],
    );
    for key in [&thief, &promoted] {
        let r = app.get(key, "/v1/agents").await;
        assert_eq!(refusal(&r), unknown);
    }
    // The genuine keys work on.
    assert_eq!(app.get(&victim, "/v1/agents").await.status, 200);
    assert_eq!(app.get(&org_key, "/v1/agents").await.status, 200);

    // A revoked key set back to unrevoked in the database: its binding went with the
    // revocation.
    operator::revoke_key(&*running.state.store, &victim, app.clock_now()).unwrap();
    app.until_refused(&victim).await;
    app.db.execute(
        "UPDATE api_keys SET revoked_ms = NULL WHERE fingerprint = $1",
        &[&keys::fingerprint(&keys::hash(&victim))],
    );
    let r = app.get(&victim, "/v1/agents").await;
    assert_eq!(refusal(&r), unknown);

    // The operator's binding pass binds no row whose binding is not its own: the edited
    // ones are named, the planted row with a copied binding too.
    let keys = KeyEncryption::new(kek(TEST_KEK), None);
    let bound = api_keys::bind_unbound(&*running.state.store, &keys).unwrap();
    for key in [planted, moved.as_str(), thief.as_str(), promoted.as_str()] {
        let fp = keys::fingerprint(&keys::hash(key));
        assert!(bound.refused.contains(&fp), "{fp} in {bound:?}");
    }
    for key in [planted, &moved, &thief, &promoted] {
        assert_eq!(app.get(key, "/v1/agents").await.status, 401);
    }
}

#[mandate_test_macros::on_each_engine]
async fn rows_stored_without_the_kek_are_refused_until_bind_api_keys_binds_them() {
    let app = app_with_kek().await;
    let running = app.running.as_ref().unwrap();
    let store = &*running.state.store;
    // As a database made before binding (or by a command without the KEK) holds them.
    let old = operator::onboard(store, &KeyBinder::default(), "older", app.clock_now()).unwrap();
    let unknown = unknown_401(&app).await;
    for key in [&old.sandbox_key, &old.live_key] {
        let r = app.get(key, "/v1/agents").await;
        assert_eq!(refusal(&r), unknown);
    }
    // Starting again binds nothing.
    let mut app = app;
    restart_with(&mut app, KeyEncryption::new(kek(TEST_KEK), None)).await;
    assert_eq!(app.get(&old.sandbox_key, "/v1/agents").await.status, 401);

    let running = app.running.as_ref().unwrap();
    let store = &*running.state.store;
    let keys = KeyEncryption::new(kek(TEST_KEK), None);
    let bound = api_keys::bind_unbound(store, &keys).unwrap();
    assert_eq!(bound.bound, 2, "{bound:?}");
    assert!(bound.refused.is_empty(), "{bound:?}");
    for key in [&old.sandbox_key, &old.live_key] {
        assert_eq!(app.get(key, "/v1/agents").await.status, 200);
    }
    // An agent made with the bound key works; running it again changes nothing.
    let agent = app.standard_agent(&old.sandbox_key, "late").await;
    assert_eq!(app.get(&agent, "/v1/agents").await.status, 200);
    let again = api_keys::bind_unbound(store, &keys).unwrap();
    assert_eq!(again.bound, 0, "{again:?}");
}

#[mandate_test_macros::on_each_engine]
async fn a_kek_rotation_binds_the_rows_again_and_the_keys_keep_working() {
    let mut app = app_with_kek().await;
    let org_key = app.org.sandbox.clone();
    let agent = app.standard_agent(&org_key, "rotating").await;
    let running = app.running.as_ref().unwrap();
    let store = &*running.state.store;
    let old = KeyEncryption::new(kek(TEST_KEK), None);
    let next = kek(NEXT_KEK);
    at_rest::rotate(store, &old, &next).unwrap();
    // As `rotate-key-encryption-key` does: the log keys too.
    let resealed = mandate_server::signing::log_keys::reseal(store, &old, &next)
        .await
        .unwrap();
    assert_eq!(resealed, 2, "a log key per environment");
    let rebound = api_keys::rebind(store, &old, &next).unwrap();
    // acme's two organization keys and the agent's.
    assert_eq!(rebound.bound, 3, "{rebound:?}");
    assert!(rebound.refused.is_empty(), "{rebound:?}");
    assert_eq!(api_keys::rebind(store, &old, &next).unwrap().bound, 0);

    // A process given only the new KEK accepts them; one given only the old one does not
    // (the rows are the new KEK's now).
    let only = |text: &str| KeyEncryption::new(kek(text), None);
    let checks = |keys: &KeyEncryption| {
        let binder = KeyBinder::new(keys);
        store
            .all_api_keys()
            .unwrap()
            .iter()
            .filter(|row| {
                binder
                    .check(
                        &api_keys::KeyAuthority::of_stored(row),
                        row.binding.as_deref(),
                    )
                    .admits()
            })
            .count()
    };
    assert_eq!(checks(&only(NEXT_KEK)), 3);
    assert_eq!(checks(&only(TEST_KEK)), 0);
    assert_eq!(
        checks(&KeyEncryption::new(kek(NEXT_KEK), Some(kek(TEST_KEK)))),
        3
    );

    // The server restarted with the new KEK alone: the same keys authenticate and decide.
    restart_with(&mut app, only(NEXT_KEK)).await;
    assert_eq!(app.get(&org_key, "/v1/agents").await.status, 200);
    let r = app.authorize(&agent, "10", "software").await;
    assert_eq!(r.status, 201, "{}", r.text);
}
