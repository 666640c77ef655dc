//! The contracts of the decision log's entries (docs/audit.md): appended with their strips
//! in one transaction, read back as C2SP entry bundles across the strips of several appends,
//! refused whole when a token is not its leaf's data, never rewritten.

use mandate_protocol::tlog::{self, LogHash, TileId};
use mandate_storage::log::LogAppend;
use mandate_storage::log_entries::{TileRead, split_entries};
use mandate_storage::model::Env;

use super::{Fresh, ORG, onboard};

/// An append of the tokens `t<from>`..`t<to>` (seqs from 1000) after a log of `from` leaves.
fn append(from: u64, to: u64, name: &str) -> LogAppend {
    let tokens: Vec<String> = (from..to)
        .map(|i| format!("{name}{i}.payload.sig"))
        .collect();
    let leaves = (from..to)
        .zip(&tokens)
        .map(|(i, t)| (i, 1000 + i as i64, tlog::leaf_hash(t.as_bytes())))
        .collect();
    let seq = |n: u64| if n == 0 { 0 } else { 999 + n as i64 };
    LogAppend {
        org: ORG.to_owned(),
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

pub async fn the_log_keeps_its_entries_with_its_strips_and_never_rewrites_them(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    let read = |tile: TileRead, width: usize| store.log_tile(ORG, Env::Sandbox, tile, width);
    // A token that is not its leaf's data: nothing of the append is written.
    let mut bad = append(0, 200, "t");
    bad.tokens[150] = "another token".into();
    assert!(store.append_log(bad).await.is_err());
    assert_eq!(read(TileRead::Entries(0), 1).await.unwrap(), None);

    // 200 leaves, then 100: bundle 0 is the first append's strip and the second's first.
    assert!(store.append_log(append(0, 200, "t")).await.unwrap());
    assert!(store.append_log(append(200, 300, "t")).await.unwrap());
    let full = read(TileRead::Entries(0), 256).await.unwrap().unwrap();
    let expected: Vec<String> = (0..256).map(|i| format!("t{i}.payload.sig")).collect();
    assert_eq!(tokens_of(&full), expected);
    let partial = read(TileRead::Entries(1), 44).await.unwrap().unwrap();
    assert_eq!(tokens_of(&partial).len(), 44);
    assert_eq!(tokens_of(&partial).last().unwrap(), "t299.payload.sig");
    assert_eq!(read(TileRead::Entries(1), 45).await.unwrap(), None);
    assert_eq!(read(TileRead::Entries(2), 1).await.unwrap(), None);
    // The level-0 tile holds the entries' hashes.
    let tile = read(TileRead::Hashes(TileId::new(0, 0)), 256)
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

    // The same leaves with other tokens find the log moved: nothing is rewritten.
    assert!(!store.append_log(append(200, 300, "x")).await.unwrap());
    assert_eq!(read(TileRead::Entries(0), 256).await.unwrap(), Some(full));
    let other = store.log_tile("org_other", Env::Sandbox, TileRead::Entries(0), 1);
    assert_eq!(
        other.await.unwrap(),
        None,
        "another organization's log is its own"
    );
}
