//! The upgrade from the previous release to this one in place, on PostgreSQL and on Citus.
//! The previous release left a database at schema migration 16, its writers storing a group
//! in two calls (migration 15's functions) and leaving their rows in `decision_claims`; this
//! one stores a group in one call (migration 17, and on Citus its distribution). A database
//! with decisions of several months, made by servers of this build on a manual clock, is
//! taken back to what the previous release left (no `mandate_record`, migration 16 the
//! last recorded, a writer's settled claim row); a server of this build migrates it and
//! decides on. Nothing is lost, every token answered before
//! verifies against the JWK Set and is served byte for byte, and an export that followed
//! the log continues with exactly the new decisions.

use std::sync::Arc;

use mandate_core::JwkSet;
use mandate_server::clock::{Clock, ManualClock};
use mandate_server::serve;
use serde_json::Value;

use crate::deploy::{Backend, Deployment, Http, ISSUER, mandate};
use crate::{deployment, on_each_backend};

/// A server of this build in this process on `deployment`'s database, on `clock`.
async fn server(deployment: &Deployment, clock: Arc<ManualClock>) -> serve::Running {
    serve::start(deployment.in_process_config(), clock)
        .await
        .unwrap()
}

/// Every decision of the export after `after` (all without), oldest first.
async fn export(http: &Http, api: &str, key: &str, after: Option<&str>) -> Vec<Value> {
    let path = match after {
        Some(id) => format!("/v1/exports/decisions?after={id}"),
        None => "/v1/exports/decisions".to_owned(),
    };
    let r = http.get(api, key, &path).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

async fn a_database_of_the_previous_release_upgrades_in_place(backend: Backend) {
    let deployment = deployment!(backend);
    let start = time::macros::datetime!(2026-09-10 12:00 UTC);
    let clock = Arc::new(ManualClock::new(start));
    let first = server(&deployment, clock.clone()).await;
    let api = format!("http://{}", first.api_addr);
    let org = deployment.onboard("acme");
    let http = Http::default();
    let key = http.agent(&api, &org.sandbox, "buyer").await;
    http.mandate(
        &api,
        &org.sandbox,
        &mandate("buyer", "100", "100000", Some("50")),
    )
    .await;
    // Decisions of three months: allows, a review, a denial each month.
    let mut made: Vec<(String, String, time::OffsetDateTime)> = Vec::new();
    for _month in 0..3 {
        for (amount, category) in [("10", "software"), ("60", "software"), ("5", "food")] {
            let r = http.authorize(&api, &key, amount, category).await;
            assert_eq!(r.status, 201, "{}", r.text);
            made.push((
                r.body["id"].as_str().unwrap().to_owned(),
                r.body["verdict_token"].as_str().unwrap().to_owned(),
                clock.now(),
            ));
            clock.advance(time::Duration::hours(1));
        }
        clock.advance(time::Duration::days(31));
    }
    let before = export(&http, &api, &org.sandbox, None).await;
    assert_eq!(before.len(), 9);
    first.shutdown().await.unwrap();

    // The database as the previous release left it.
    let db = deployment.db.connect().await;
    for statement in [
        "DROP FUNCTION mandate_record",
        "DELETE FROM schema_migrations WHERE version = 17",
        "INSERT INTO decision_claims (org_id, writer, first_seq, first_event, claimed_at)
         SELECT org_id, 'previous-0', NULL, NULL, now() FROM environments LIMIT 1",
    ] {
        db.batch_execute(statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }

    let second = server(&deployment, clock.clone()).await;
    let api = format!("http://{}", second.api_addr);
    let again: i64 = db
        .query_one(
            "SELECT COUNT(*) FROM schema_migrations WHERE version = 17",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(again, 1, "migrated again");
    if backend == Backend::Citus {
        let distributed: i64 = db
            .query_one(
                "SELECT COUNT(*) FROM pg_dist_object o JOIN pg_proc p ON p.oid = o.objid
                 WHERE p.proname IN ('mandate_claim', 'mandate_store', 'mandate_record')
                   AND o.distribution_argument_index = 0",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(distributed, 3, "the writers' functions distributed");
    }
    let mut new = Vec::new();
    for amount in ["10", "20", "60"] {
        let r = http.authorize(&api, &key, amount, "software").await;
        assert_eq!(r.status, 201, "{}", r.text);
        new.push(r.body["id"].as_str().unwrap().to_owned());
    }

    // An export that followed the log goes on with exactly the new decisions.
    let last = before.last().unwrap()["id"].as_str().unwrap();
    let after: Vec<String> = export(&http, &api, &org.sandbox, Some(last))
        .await
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(after, new);
    // Nothing lost, in order; every earlier token served byte for byte and verifying.
    let all = export(&http, &api, &org.sandbox, None).await;
    let ids = |decisions: &[Value]| -> Vec<String> {
        decisions
            .iter()
            .map(|d| d["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(all.len(), 12);
    // (Their reviews have expired since: the clock is months on.)
    assert_eq!(ids(&all[..9]), ids(&before));
    let jwks = reqwest::get(format!(
        "http://{}/.well-known/jwks.json",
        second.public_addr
    ))
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    let set = JwkSet::from_json(jwks.as_bytes()).unwrap();
    for (id, token, at) in &made {
        let stored = all
            .iter()
            .find(|d| d["id"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} is in the export"));
        assert_eq!(stored["verdict_token"], token.as_str(), "{id}");
        let options = mandate_core::VerifyOptions {
            issuer: ISSUER.to_owned(),
            now: *at,
            leeway_secs: 60,
        };
        mandate_core::verify_verdict(token, &set, &options)
            .unwrap_or_else(|e| panic!("{id}'s token: {e:?}"));
    }
    second.shutdown().await.unwrap();
}

on_each_backend!(a_database_of_the_previous_release_upgrades_in_place);
