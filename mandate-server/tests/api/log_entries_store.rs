//! The log's entries at the storage boundary, on each engine (docs/audit.md): appended with
//! their strips in one transaction, read back as C2SP entry bundles across the strips of
//! several appends, refused whole when a token is not its leaf's data, never rewritten.

use mandate_protocol::tlog::{self, LogHash, TileId};
use mandate_server::model::Env;
use mandate_server::storage::log::LogAppend;
use mandate_server::storage::log_entries::{TileRead, split_entries};

use crate::helpers::spawn_app;

/// An append of the tokens `t<from>`..`t<to>` (seqs from 1000) after a log of `from`
/// leaves; no checkpoint, so the worker of the running server leaves the log alone.
fn append(org: &str, from: u64, to: u64) -> LogAppend {
    let tokens: Vec<String> = (from..to).map(|i| format!("t{i}.payload.sig")).collect();
    let leaves = (from..to)
        .zip(&tokens)
        .map(|(i, t)| (i, 1000 + i as i64, tlog::leaf_hash(t.as_bytes())))
        .collect();
    let seq = |n: u64| if n == 0 { 0 } else { 999 + n as i64 };
    LogAppend {
        org: org.to_owned(),
        env: Env::Sandbox,
        from: (from, seq(from)),
        size: to,
        scanned_seq: seq(to),
        leaves,
        tokens,
        tiles: Vec::new(),
        checkpoint: None,
        signed_ms: 0,
    }
}

fn tokens_of(bundle: &[u8]) -> Vec<String> {
    split_entries(bundle, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.to_vec()).unwrap())
        .collect()
}

#[mandate_test_macros::on_each_engine]
async fn entries_are_stored_with_their_strips_and_read_back_as_bundles() {
    let app = spawn_app().await;
    let org = app.org_id("acme");
    let store = &app.running.as_ref().unwrap().state.store;
    // A token that is not its leaf's data: nothing of the append is written.
    let mut bad = append(&org, 0, 200);
    bad.tokens[150] = "another token".into();
    assert!(store.append_log(bad).await.is_err());
    let none = TileRead::Entries(0);
    assert_eq!(
        store.log_tile(&org, Env::Sandbox, none, 1).await.unwrap(),
        None
    );

    // 200 leaves, then 100: bundle 0 is the first append's strip and the second's first.
    assert!(store.append_log(append(&org, 0, 200)).await.unwrap());
    assert!(store.append_log(append(&org, 200, 300)).await.unwrap());
    let full = store
        .log_tile(&org, Env::Sandbox, TileRead::Entries(0), 256)
        .await
        .unwrap()
        .unwrap();
    let expected: Vec<String> = (0..256).map(|i| format!("t{i}.payload.sig")).collect();
    assert_eq!(tokens_of(&full), expected);
    let partial = store
        .log_tile(&org, Env::Sandbox, TileRead::Entries(1), 44)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tokens_of(&partial).last().unwrap(), "t299.payload.sig");
    let short = TileRead::Entries(1);
    assert_eq!(
        store.log_tile(&org, Env::Sandbox, short, 45).await.unwrap(),
        None
    );
    // The level-0 tile holds the entries' hashes.
    let tile = store
        .log_tile(&org, Env::Sandbox, TileRead::Hashes(TileId::new(0, 0)), 256)
        .await
        .unwrap()
        .unwrap();
    let hashes: Vec<LogHash> = tile
        .chunks(32)
        .map(|c| LogHash::from_bytes(c.try_into().unwrap()))
        .collect();
    let from_entries: Vec<LogHash> = expected
        .iter()
        .map(|t| tlog::leaf_hash(t.as_bytes()))
        .collect();
    assert_eq!(hashes, from_entries);

    // The same append again finds the log moved: nothing is rewritten.
    let mut again = append(&org, 200, 300);
    again.tokens = (200..300).map(|i| format!("x{i}")).collect();
    again.leaves = again
        .leaves
        .iter()
        .zip(&again.tokens)
        .map(|((i, s, _), t)| (*i, *s, tlog::leaf_hash(t.as_bytes())))
        .collect();
    assert!(!store.append_log(again).await.unwrap());
    let after = store
        .log_tile(&org, Env::Sandbox, TileRead::Entries(0), 256)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after, full);
    let rows = app.db.query_i64(
        "SELECT COUNT(*) FROM log_entries WHERE org_id = $1 AND env = 'sandbox'",
        &[&org],
    );
    assert_eq!(rows, 3, "a row a strip: 0-199, 200-255, 256-299");
}
