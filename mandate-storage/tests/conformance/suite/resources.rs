//! The contracts of the resources around decisions: organizations and keys, agents,
//! modes, mandates, the event log, idempotency claims,
//! signing keys, health and peers.

use super::webhooks::webhook;
use super::*;

pub async fn orgs_are_unique_by_name_and_a_refused_org_writes_nothing(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    let version = onboard(store).await;
    assert!(version.starts_with("pol_2026-11-22."), "{version}");
    assert_eq!(store.org_id_by_name("acme").unwrap().as_deref(), Some(ORG));
    assert_eq!(store.org_name(ORG).await.unwrap(), "acme");
    // The same name again, under another id and key: refused, and its key is not stored.
    let again = store
        .create_org(&NewOrg {
            id: "org_other".into(),
            name: "acme".into(),
            policy_prefix: "pol_2026-11-22.".into(),
            keys: vec![([9; 32], Env::Sandbox, None)],
            now_ms: ms(NOW),
        })
        .unwrap();
    assert_eq!(again, None);
    assert!(store.caller([9; 32]).await.unwrap().is_none());
    assert_eq!(store.org_id_by_name("nobody").unwrap(), None);
}

pub async fn keys_are_callers_until_revoked_and_each_change_moves_the_generation(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    let version = onboard(store).await;
    let caller = store.caller(ORG_KEY).await.unwrap().expect("an org key");
    assert_eq!(&*caller.org_id, ORG);
    assert_eq!(caller.env, Env::Sandbox);
    assert_eq!(caller.agent, None);
    assert_eq!(&*caller.policy_version, version.as_str());
    assert_eq!(
        store.caller(LIVE_KEY).await.unwrap().unwrap().env,
        Env::Live
    );
    assert!(store.caller([7; 32]).await.unwrap().is_none());
    // An agent key is its agent's caller.
    agent(store, "agt_keyed", 30).await;
    let agent_caller = store.caller([30; 32]).await.unwrap().unwrap();
    assert_eq!(agent_caller.agent, Some(agent_id("agt_keyed")));
    // Each operator change moves the generation that running servers reload on.
    let generation = store.key_generation().await.unwrap();
    assert!(store.set_key_rate(&ORG_KEY, 7).unwrap());
    assert!(!store.set_key_rate(&[7; 32], 7).unwrap(), "an unknown key");
    assert_eq!(
        store.caller(ORG_KEY).await.unwrap().unwrap().rate_per_sec,
        7
    );
    // A rate stored as 0 still lets its caller make one request a second.
    assert!(store.set_key_rate(&LIVE_KEY, 0).unwrap());
    assert_eq!(
        store.api_key(LIVE_KEY).await.unwrap().unwrap().rate_per_sec,
        0
    );
    assert_eq!(
        store.caller(LIVE_KEY).await.unwrap().unwrap().rate_per_sec,
        1
    );
    let after_rate = store.key_generation().await.unwrap();
    assert!(after_rate > generation);
    assert!(store.revoke_key(&ORG_KEY, ms(NOW)).unwrap());
    assert!(
        !store.revoke_key(&ORG_KEY, ms(NOW)).unwrap(),
        "revoked already"
    );
    assert!(store.caller(ORG_KEY).await.unwrap().is_none());
    // The engine still reads the revoked row, typed and marked; the rule that it makes
    // no caller is the boundary's, not the engine's.
    let revoked = store
        .api_key(ORG_KEY)
        .await
        .unwrap()
        .expect("a revoked key's row");
    assert!(revoked.revoked);
    assert_eq!(
        (
            revoked.org_id.as_str(),
            revoked.env,
            revoked.class,
            revoked.binding.clone()
        ),
        (ORG, Env::Sandbox, KeyClass::Org, None)
    );
    assert_eq!(revoked.rate_per_sec, 7);
    assert!(CallerRow::of_key(ORG_KEY, revoked).is_none());
    assert!(store.api_key([7; 32]).await.unwrap().is_none());
    assert!(store.key_generation().await.unwrap() > after_rate);
    assert_eq!(
        store.key_generation_now().unwrap(),
        store.key_generation().await.unwrap()
    );
    // Operators see keys by fingerprint, never the key.
    let keys = store.list_keys(ORG).unwrap();
    assert_eq!(keys.iter().filter(|k| k.revoked).count(), 1, "{keys:?}");
    let org_key = keys
        .iter()
        .find(|k| k.fingerprint == mandate_storage::keys::fingerprint(&ORG_KEY))
        .unwrap();
    assert_eq!(
        (
            org_key.env,
            org_key.class,
            org_key.revoked,
            org_key.rate_per_sec
        ),
        (Env::Sandbox, KeyClass::Org, true, 7)
    );
    let agent_key = keys.iter().find(|k| k.class == KeyClass::Agent).unwrap();
    assert_eq!(agent_key.agent.as_deref(), Some("agt_keyed"));
    let fingerprint = mandate_storage::keys::fingerprint(&LIVE_KEY);
    assert_eq!(
        store.key_hash_by_fingerprint(&fingerprint).unwrap(),
        Some(LIVE_KEY.to_vec())
    );
}

pub async fn agents_are_unique_in_their_environment_and_listed_newest_first(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    for (i, name) in ["agt_a", "agt_b", "agt_c"].iter().enumerate() {
        agent(store, name, 10 + i as u8).await;
    }
    // The name again with another key: refused, and the key is not stored.
    let again = store
        .create_agent(
            ORG,
            Env::Sandbox,
            &agent_id("agt_a"),
            [20; 32],
            None,
            ms(NOW),
        )
        .await
        .unwrap();
    assert!(again.is_none());
    assert!(store.caller([20; 32]).await.unwrap().is_none());
    // The same name in the other environment is another agent.
    assert!(
        store
            .create_agent(ORG, Env::Live, &agent_id("agt_a"), [21; 32], None, ms(NOW))
            .await
            .unwrap()
            .is_some()
    );
    let page = store
        .agents_page(ORG, Env::Sandbox, None, i64::MAX, 2)
        .await
        .unwrap();
    let ids: Vec<&str> = page.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["agt_c", "agt_b"]);
    let rest = store
        .agents_page(ORG, Env::Sandbox, None, page[1].seq, 2)
        .await
        .unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].id, "agt_a");
    let only = store
        .agents_page(ORG, Env::Sandbox, Some(&agent_id("agt_b")), i64::MAX, 10)
        .await
        .unwrap();
    assert_eq!(only.len(), 1);
    let one = store
        .agent(ORG, Env::Sandbox, &agent_id("agt_b"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((one.id.as_str(), one.created_ms), ("agt_b", ms(NOW)));
    assert!(
        store
            .agent("org_other", Env::Sandbox, &agent_id("agt_b"))
            .await
            .unwrap()
            .is_none()
    );
}

pub async fn setting_the_mode_in_force_changes_nothing(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    let (mode, since) = store.mode(ORG, Env::Sandbox).await.unwrap();
    let other = match mode {
        Mode::Enforce => Mode::Observe,
        Mode::Observe => Mode::Enforce,
    };
    let later = ms(NOW) + 60_000;
    assert_eq!(
        store
            .set_mode(ORG, Env::Sandbox, mode, later)
            .await
            .unwrap(),
        (mode, since)
    );
    assert_eq!(
        store
            .set_mode(ORG, Env::Sandbox, other, later)
            .await
            .unwrap(),
        (other, later)
    );
    assert_eq!(store.mode(ORG, Env::Sandbox).await.unwrap(), (other, later));
    // One environment's mode is its own.
    let live = store.mode(ORG, Env::Live).await.unwrap();
    store
        .set_mode(ORG, Env::Sandbox, mode, later + 1)
        .await
        .unwrap();
    assert_eq!(store.mode(ORG, Env::Live).await.unwrap(), live);
}

pub async fn a_new_mandate_supersedes_the_active_one_and_revoking_fires_once(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_m", 10).await;
    let first = mandate(store, "agt_m").await;
    let second = mandate(store, "agt_m").await;
    let read = |id: MandateId| async move {
        store
            .mandate(ORG, Env::Sandbox, &id)
            .await
            .unwrap()
            .unwrap()
    };
    assert_eq!(
        read(first.id.clone()).await.status,
        MandateStatus::Superseded
    );
    assert_eq!(read(second.id.clone()).await, second);
    let page = store
        .mandates_page(
            ORG,
            Env::Sandbox,
            &MandateFilters::default(),
            "2026-11-22",
            i64::MAX,
            10,
        )
        .await
        .unwrap();
    let ids: Vec<&MandateId> = page.iter().map(|(_, m)| &m.id).collect();
    assert_eq!(ids, [&second.id, &first.id], "newest first");
    let active = store
        .mandates_page(
            ORG,
            Env::Sandbox,
            &MandateFilters {
                agent: Some("agt_m".into()),
                status: Some(MandateStatus::Active),
            },
            "2026-11-22",
            i64::MAX,
            10,
        )
        .await
        .unwrap();
    assert_eq!(active.len(), 1);
    // Revoking: once, with its event; again, nothing.
    let at = NOW + Duration::minutes(5);
    let Revocation::Revoked(revoked) = store
        .revoke_mandate(ORG, Env::Sandbox, &second.id, at, revocation)
        .await
        .unwrap()
    else {
        panic!("an active mandate is revoked");
    };
    assert_eq!(revoked.status, MandateStatus::Revoked);
    assert_eq!(
        store
            .revoke_mandate(ORG, Env::Sandbox, &second.id, at, revocation)
            .await
            .unwrap(),
        Revocation::NotActive(MandateStatus::Revoked)
    );
    assert_eq!(
        store
            .revoke_mandate(
                ORG,
                Env::Sandbox,
                &MandateId::from_random([3; 16]),
                at,
                revocation
            )
            .await
            .unwrap(),
        Revocation::Missing
    );
    // Told to revoke it again regardless, the engine finds its row no longer active and
    // writes nothing, event included.
    let regardless = |mandate: &Mandate, now: OffsetDateTime| {
        let mut active = mandate.clone();
        active.status = MandateStatus::Active;
        revocation(&active, now)
    };
    assert_eq!(
        store
            .revoke_mandate(ORG, Env::Sandbox, &second.id, at, regardless)
            .await
            .unwrap(),
        Revocation::NotActive(MandateStatus::Revoked)
    );
    let revocations = all_events(store, Some("mandate.revoked")).await;
    assert_eq!(revocations.len(), 1, "{revocations:?}");
    assert_eq!(revocations[0].data["id"], second.id.as_str());
    assert_eq!(revocations[0].data["status"], "revoked");
    assert_eq!(revocations[0].created_ms, ms(at));
    // An expired mandate stays expired: not revoked, nothing written.
    let lapsed = mandate_of("agt_m", &TERMS.replace("2026-12-31", "2026-11-21"), NOW);
    store
        .insert_mandate(ORG, Env::Sandbox, &lapsed)
        .await
        .unwrap();
    assert_eq!(
        store
            .revoke_mandate(ORG, Env::Sandbox, &lapsed.id, at, revocation)
            .await
            .unwrap(),
        Revocation::NotActive(MandateStatus::Expired)
    );
    assert_eq!(all_events(store, Some("mandate.revoked")).await.len(), 1);
}

pub async fn the_event_log_pages_newest_first_without_gaps_or_repeats(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    let hook = webhook(store, &[]).await;
    let mut written = Vec::new();
    for i in 0..5 {
        written.push(
            store
                .ping_webhook(ORG, Env::Sandbox, &hook, json!({"n": i}), ms(NOW) + i)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    agent(store, "agt_e", 10).await;
    let mandate = mandate(store, "agt_e").await;
    store
        .revoke_mandate(ORG, Env::Sandbox, &mandate.id, NOW, revocation)
        .await
        .unwrap();
    let events = all_events(store, None).await;
    assert_eq!(events.len(), 6);
    assert!(
        events.windows(2).all(|w| w[0].seq > w[1].seq),
        "newest first"
    );
    assert_eq!(events[0].event_type, "mandate.revoked");
    let pinged: Vec<&str> = events[1..].iter().rev().map(|e| e.id.as_str()).collect();
    let expected: Vec<&str> = written.iter().map(|e| e.as_str()).collect();
    assert_eq!(pinged, expected, "in the order written");
    assert_eq!(all_events(store, Some("mandate.revoked")).await.len(), 1);
    // One organization and environment's log: the other sees none of it.
    assert!(
        store
            .events_page(ORG, Env::Live, None, i64::MAX, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .event("org_other", Env::Sandbox, &events[0].id)
            .await
            .unwrap()
            .is_none()
    );
}

pub async fn an_idempotency_key_is_claimed_once_even_at_once(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    let (digest, other) = ([1u8; 32], [2u8; 32]);
    let claims = join_all(
        (0..16).map(|_| store.claim_idempotency_key(ORG, ORG_KEY, "k-race", digest, CLAIM, NOW)),
    )
    .await;
    let actions: Vec<NextAction> = claims.into_iter().map(|c| c.unwrap().0).collect();
    let started = actions
        .iter()
        .filter(|a| matches!(a, NextAction::StartProcessing))
        .count();
    assert_eq!(started, 1, "{actions:?}");
    assert!(actions.iter().all(|a| matches!(
        a,
        NextAction::StartProcessing | NextAction::ConflictInFlight
    )));
    let (action, _) = store
        .claim_idempotency_key(ORG, ORG_KEY, "k-race", other, CLAIM, NOW)
        .await
        .unwrap();
    assert_eq!(action, NextAction::ConflictDifferentRequest);
    // The key is scoped to the API key: another caller's same key is its own.
    let (action, _) = store
        .claim_idempotency_key(ORG, LIVE_KEY, "k-race", digest, CLAIM, NOW)
        .await
        .unwrap();
    assert_eq!(action, NextAction::StartProcessing);
    // Released, a retry runs the request again.
    store
        .finish_idempotency(ORG, LIVE_KEY, "k-race", CLAIM, None)
        .await
        .unwrap();
    let (action, _) = store
        .claim_idempotency_key(ORG, LIVE_KEY, "k-race", digest, CLAIM, NOW)
        .await
        .unwrap();
    assert_eq!(action, NextAction::StartProcessing);
    // Finished, the answer is replayed with the id of the request it answered.
    store
        .finish_idempotency(
            ORG,
            ORG_KEY,
            "k-race",
            CLAIM,
            Some(record("k-race", "req_first")),
        )
        .await
        .unwrap();
    let (action, original) = store
        .claim_idempotency_key(
            ORG,
            ORG_KEY,
            "k-race",
            digest,
            CLAIM,
            NOW + Duration::seconds(1),
        )
        .await
        .unwrap();
    assert!(
        matches!(&action, NextAction::ReturnSavedResponse(r) if r.status == 201 && r.body == b"sealed k-race"),
        "{action:?}"
    );
    assert_eq!(original.as_deref(), Some("req_first"));
    // A sweep at start releases the unfinished claim (the live key's) and keeps records
    // newer than its bound: the finished answer is still replayed.
    assert_eq!(store.sweep_idempotency(ms(NOW) - 1).await.unwrap(), 1);
    let (action, _) = store
        .claim_idempotency_key(ORG, LIVE_KEY, "k-race", digest, CLAIM, NOW)
        .await
        .unwrap();
    assert_eq!(action, NextAction::StartProcessing, "released by the sweep");
    let (action, _) = store
        .claim_idempotency_key(ORG, ORG_KEY, "k-race", digest, CLAIM, NOW)
        .await
        .unwrap();
    assert!(matches!(action, NextAction::ReturnSavedResponse(_)));
}

pub async fn the_store_is_ready_and_counts_its_processes(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    let schema = store.readiness().await.unwrap();
    assert_eq!(schema.applied, schema.latest);
    assert!(schema.latest > 0);
    let peers = store.heartbeat("proc_a").await.unwrap();
    assert!(peers.live >= 1);
    assert!(peers.sweeps, "the only process sweeps");
    store.leave("proc_a").await.unwrap();
    // The cursor secret is made once and kept.
    let secret = store.prepare_start(0, &[4; 32]).unwrap();
    assert_eq!(store.prepare_start(0, &[5; 32]).unwrap(), secret);
}

pub async fn signing_keys_rotate_and_their_secrets_change_only_as_read(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    let seal = |kid: &str| Ok(format!("secret of {kid}").into_bytes());
    store
        .ensure_signing_key(Env::Sandbox, &seal, ms(NOW))
        .unwrap();
    store
        .ensure_signing_key(Env::Sandbox, &seal, ms(NOW))
        .unwrap();
    let first = store.signing_keys_now(0).unwrap();
    assert_eq!(first.len(), 1, "ensured once: {first:?}");
    assert_eq!(
        first[0].secret,
        format!("secret of {}", first[0].kid).into_bytes()
    );
    let generation = store.key_generation_now().unwrap();
    let rotated_at = ms(NOW) + 1_000;
    let kid = store
        .rotate_signing_key(Env::Sandbox, &seal, rotated_at)
        .unwrap();
    assert_ne!(kid, first[0].kid);
    assert!(store.key_generation_now().unwrap() > generation);
    // The retired key is still published after `published_after_ms` before its retirement.
    let published = store.signing_keys(rotated_at - 1).await.unwrap();
    assert_eq!(published.len(), 2, "{published:?}");
    let retired = published.iter().find(|k| k.kid == first[0].kid).unwrap();
    assert_eq!(retired.retired_ms, Some(rotated_at));
    let current = store.signing_keys(rotated_at).await.unwrap();
    assert_eq!(current.len(), 1);
    assert_eq!(
        (current[0].kid.as_str(), current[0].retired_ms),
        (kid.as_str(), None)
    );
    // A refused key's seal aborts the rotation: nothing is written.
    let failing = |_: &str| Err(mandate_storage::StorageError::Corrupt("no".into()));
    assert!(
        store
            .rotate_signing_key(Env::Sandbox, &failing, rotated_at + 1)
            .is_err()
    );
    assert_eq!(store.all_signing_keys().unwrap().len(), 2);
    // Secrets are replaced only if the stored keys are exactly those read.
    let all = store.all_signing_keys().unwrap();
    let changes: Vec<SecretChange> = all
        .iter()
        .map(|k| SecretChange {
            kid: k.kid.clone(),
            from: k.secret.clone(),
            to: [b"resealed ".as_slice(), &k.secret].concat(),
        })
        .collect();
    assert!(
        !store.replace_signing_key_secrets(&changes[..1]).unwrap(),
        "a key left out"
    );
    assert!(store.replace_signing_key_secrets(&changes).unwrap());
    assert!(
        !store.replace_signing_key_secrets(&changes).unwrap(),
        "they changed since"
    );
    for key in store.all_signing_keys().unwrap() {
        assert!(key.secret.starts_with(b"resealed "), "{key:?}");
    }
}

pub async fn org_keys_and_policy_versions_change_what_callers_carry(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    let generation = store.key_generation_now().unwrap();
    let fingerprint = store
        .insert_org_key(ORG, Env::Live, &[40; 32], None, ms(NOW))
        .unwrap();
    assert_eq!(fingerprint, mandate_storage::keys::fingerprint(&[40; 32]));
    assert_eq!(
        store.caller([40; 32]).await.unwrap().unwrap().env,
        Env::Live
    );
    store.set_policy_version(ORG, "pol_2026-11-23.2").unwrap();
    assert!(store.key_generation_now().unwrap() > generation);
    for key in [ORG_KEY, [40; 32]] {
        let caller = store.caller(key).await.unwrap().unwrap();
        assert_eq!(&*caller.policy_version, "pol_2026-11-23.2");
    }
    assert_eq!(store.list_keys(ORG).unwrap().len(), 3);
}

pub async fn api_key_bindings_are_stored_as_given_and_replaced_only_as_read(fresh: &Fresh) {
    use mandate_storage::keys::BindingChange;
    let store = fresh.store.as_ref();
    store
        .create_org(&NewOrg {
            id: ORG.into(),
            name: "acme".into(),
            policy_prefix: "pol_2026-11-22.".into(),
            keys: vec![(ORG_KEY, Env::Sandbox, Some(b"bound org".to_vec()))],
            now_ms: ms(NOW),
        })
        .unwrap()
        .unwrap();
    store
        .insert_org_key(ORG, Env::Live, &LIVE_KEY, None, ms(NOW))
        .unwrap();
    store
        .create_agent(
            ORG,
            Env::Sandbox,
            &agent_id("agt_bound"),
            [30; 32],
            Some(b"bound agent".to_vec()),
            ms(NOW),
        )
        .await
        .unwrap()
        .unwrap();
    // Each row's binding and class as stored, through the caller and the operators' read.
    let row = store.caller(ORG_KEY).await.unwrap().unwrap();
    assert_eq!(row.binding.as_deref(), Some(&b"bound org"[..]));
    assert_eq!(row.class, KeyClass::Org);
    let row = store.caller([30; 32]).await.unwrap().unwrap();
    assert_eq!(row.binding.as_deref(), Some(&b"bound agent"[..]));
    assert_eq!(row.class, KeyClass::Agent);
    assert_eq!(store.caller(LIVE_KEY).await.unwrap().unwrap().binding, None);
    let all = store.all_api_keys().unwrap();
    assert_eq!(all.len(), 3);
    let live = all.iter().find(|k| k.hash == LIVE_KEY).unwrap();
    assert_eq!(
        (live.env, live.class, live.binding.clone()),
        (Env::Live, KeyClass::Org, None)
    );
    let agent = all.iter().find(|k| k.hash == [30; 32]).unwrap();
    assert_eq!(agent.agent.as_deref(), Some("agt_bound"));
    // Replaced only if every row holds what was read; otherwise nothing changes.
    let generation = store.key_generation_now().unwrap();
    let stale = [
        BindingChange {
            hash: LIVE_KEY,
            from: None,
            to: b"live".to_vec(),
        },
        BindingChange {
            hash: ORG_KEY,
            from: None,
            to: b"org".to_vec(),
        },
    ];
    assert!(!store.replace_api_key_bindings(&stale).unwrap());
    assert_eq!(store.caller(LIVE_KEY).await.unwrap().unwrap().binding, None);
    let fresh_changes = [BindingChange {
        hash: LIVE_KEY,
        from: None,
        to: b"live".to_vec(),
    }];
    assert!(store.replace_api_key_bindings(&fresh_changes).unwrap());
    assert_eq!(
        store
            .caller(LIVE_KEY)
            .await
            .unwrap()
            .unwrap()
            .binding
            .as_deref(),
        Some(&b"live"[..])
    );
    assert!(store.key_generation_now().unwrap() > generation);
    // A revocation drops the binding, and revoked rows are not read for binding.
    assert!(store.revoke_key(&LIVE_KEY, ms(NOW)).unwrap());
    assert_eq!(store.all_api_keys().unwrap().len(), 2);
    assert!(!store.replace_api_key_bindings(&fresh_changes).unwrap());
}
