//! The PostgreSQL engine's signing keys against a real database: processes starting at
//! once share one key an environment, and secrets are replaced all at once or not at all.

use super::*;

/// Two processes starting at once on an empty database agree on one signing key per
/// environment, and both serve it.
#[tokio::test]
async fn processes_starting_at_once_share_one_signing_key_per_environment() {
    let db = database!("processes_starting_at_once_share_one_signing_key_per_environment");
    let (a, b) = (open(&db).await, open(&db).await);
    // Each process would store bytes of its own: one of them is stored, for both.
    let seal_a = |_kid: &str| -> Result<Vec<u8>, StorageError> { Ok(vec![0xa; 32]) };
    let seal_b = |_kid: &str| -> Result<Vec<u8>, StorageError> { Ok(vec![0xb; 32]) };
    let now = ms(NOW);
    let (ra, rb) = std::thread::scope(|scope| {
        let ta = scope.spawn(|| a.ensure_signing_key(Env::Live, &seal_a, now));
        let tb = scope.spawn(|| b.ensure_signing_key(Env::Live, &seal_b, now));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    ra.unwrap();
    rb.unwrap();
    let (ka, kb) = (
        a.signing_keys_now(0).unwrap(),
        b.signing_keys_now(0).unwrap(),
    );
    assert_eq!(ka.len(), 1);
    assert_eq!(ka[0].kid, "live-1");
    assert_eq!(ka[0].secret, kb[0].secret);
}

/// A key-encryption key rotation replaces every stored secret at once, only if the keys
/// are still exactly those it read; the replaced row versions are rewritten away.
#[tokio::test]
async fn signing_key_secrets_are_replaced_all_at_once_or_not_at_all() {
    use mandate_storage::admin::SecretChange;

    let db = database!("signing_key_secrets_are_replaced_all_at_once_or_not_at_all");
    let store = open(&db).await;
    let seal = |kid: &str| -> Result<Vec<u8>, StorageError> { Ok(kid.as_bytes().to_vec()) };
    store.ensure_signing_key(Env::Live, &seal, 0).unwrap();
    store.ensure_signing_key(Env::Sandbox, &seal, 0).unwrap();
    store.rotate_signing_key(Env::Live, &seal, 10).unwrap();
    let all = store.all_signing_keys().unwrap();
    let kids: Vec<&str> = all.iter().map(|k| k.kid.as_str()).collect();
    assert_eq!(kids, ["live-1", "live-2", "sandbox-1"]);
    let changes: Vec<SecretChange> = all
        .iter()
        .map(|k| SecretChange {
            kid: k.kid.clone(),
            from: k.secret.clone(),
            to: format!("sealed {}", k.kid).into_bytes(),
        })
        .collect();
    // A key missing from the list, or one whose secret changed since: nothing is written.
    assert!(!store.replace_signing_key_secrets(&changes[..2]).unwrap());
    let mut stale = changes.clone();
    stale[1].from = b"something else".to_vec();
    assert!(!store.replace_signing_key_secrets(&stale).unwrap());
    assert_eq!(store.all_signing_keys().unwrap()[1].secret, b"live-2");
    let file = "SELECT pg_relation_filenode('signing_keys')::BIGINT";
    let before = db.number(file);
    assert!(store.replace_signing_key_secrets(&changes).unwrap());
    let after: Vec<Vec<u8>> = store
        .all_signing_keys()
        .unwrap()
        .into_iter()
        .map(|k| k.secret)
        .collect();
    assert_eq!(
        after,
        [&b"sealed live-1"[..], b"sealed live-2", b"sealed sandbox-1"]
    );
    // Rewritten into a new file: the old row versions are not in the table's file.
    assert_ne!(db.number(file), before);
}
