//! The contracts of the decision log's entries (docs/audit.md): appended with their strips
//! in one transaction, read back as C2SP entry bundles across the strips of several appends,
//! refused whole when a token is not its leaf's data, never rewritten.

use mandate_protocol::tlog::{self, LogHash, TileId};
use mandate_storage::log::{CheckpointShow, LogAppend, Quiet};
use mandate_storage::log_entries::{TileRead, split_entries};
use mandate_storage::model::Env;

use super::{Fresh, ORG, agent, mandate, onboard};

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

/// An append to `org`'s log in `env` of `n` leaves from `from`, its tokens named `name`,
/// signed (as the worker would) by the checkpoint `note`.
fn append_to(org: &str, env: Env, from: u64, to: u64, name: &str, note: &str) -> LogAppend {
    LogAppend {
        org: org.to_owned(),
        env,
        checkpoint: Some(note.to_owned()),
        ..append(from, to, name)
    }
}

pub async fn many_logs_are_read_and_written_as_each_alone(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_many", 3).await;
    mandate(store, "agt_many").await;
    let mut ids = Vec::new();
    for amount in ["10", "20", "30"] {
        let new =
            super::made::decided(store, "agt_many", amount, mandate_core::Verdict::Allow).await;
        ids.push(super::made::stored(store, new).await.claims.jti);
    }
    let logs = vec![
        (ORG.to_owned(), Env::Sandbox),
        (ORG.to_owned(), Env::Live),
        ("org_other".to_owned(), Env::Sandbox),
    ];
    // The tails of many logs are each log's, read alone.
    let tails = store.log_tails(unquiet(&logs), 2).await.unwrap();
    assert_eq!(tails.len(), 3);
    for ((org, env), tail) in logs.iter().zip(&tails) {
        let alone = store.log_tail(org, *env, 2, None).await.unwrap();
        assert_eq!(tail.head, alone.head);
        assert_eq!(tail.decisions, alone.decisions);
        assert_eq!(tail.edge.size(), alone.edge.size());
    }
    // The sandbox's first two decisions (the batch), in seq order; the others have none.
    let listed: Vec<_> = tails[0]
        .decisions
        .iter()
        .map(|(_, id, _)| id.clone())
        .collect();
    assert_eq!(listed, ids[..2].to_vec());
    assert!(tails[1].decisions.is_empty() && tails[2].decisions.is_empty());
    // Their tokens, read for many logs at once as for each alone.
    let seqs: Vec<i64> = tails[0].decisions.iter().map(|(seq, _, _)| *seq).collect();
    let first_two = vec![(0, seqs[1] + 1, 10)];
    let reads = vec![
        (ORG.to_owned(), Env::Sandbox, first_two.clone()),
        (
            "org_other".to_owned(),
            Env::Sandbox,
            vec![(0, i64::MAX, 10)],
        ),
    ];
    let read = store.logs_tokens(reads).await.unwrap();
    let alone = store
        .log_tokens(ORG, Env::Sandbox, first_two)
        .await
        .unwrap();
    assert_eq!(read[0], alone);
    assert_eq!(
        read[0].iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        seqs
    );
    assert!(read[0].iter().all(|(_, token)| token.is_some()));
    assert!(read[1].is_empty());

    // Appends to three logs, one of them from where its log is not: it alone is refused.
    let appends = vec![
        append_to(ORG, Env::Live, 0, 120, "l", "live-120"),
        append_to("org_other", Env::Sandbox, 0, 50, "o", "other-50"),
        append_to(ORG, Env::Sandbox, 10, 20, "s", "moved"),
    ];
    assert_eq!(
        store.append_logs(appends).await.unwrap(),
        vec![true, true, false]
    );
    let tails = store.log_tails(unquiet(&logs), 2).await.unwrap();
    let heads: Vec<_> = tails
        .iter()
        .map(|t| (t.head.size, t.head.checkpoint.clone()))
        .collect();
    assert_eq!(
        heads,
        vec![
            (0, None),
            (120, Some("live-120".into())),
            (50, Some("other-50".into()))
        ]
    );
    let live = store.log_tile(ORG, Env::Live, TileRead::Entries(0), 120);
    let live = tokens_of(&live.await.unwrap().unwrap());
    assert_eq!((live.len(), live[119].as_str()), (120, "l119.payload.sig"));
    // Growing again from the new heads; a log named twice in one call is refused whole.
    let again = vec![
        append_to(ORG, Env::Live, 120, 200, "l", "live-200"),
        append_to(ORG, Env::Live, 120, 130, "l", "live-130"),
    ];
    assert!(store.append_logs(again).await.is_err());
    let again = vec![append_to(ORG, Env::Live, 120, 200, "l", "live-200")];
    assert_eq!(store.append_logs(again).await.unwrap(), vec![true]);
    let live = store.log_tile(ORG, Env::Live, TileRead::Entries(0), 200);
    assert_eq!(tokens_of(&live.await.unwrap().unwrap()).len(), 200);

    // Shown only where the checkpoint is still the log's newest and bigger than the shown.
    let show = |org: &str, env: Env, size: u64, signed: &str| CheckpointShow {
        org: org.to_owned(),
        env,
        size,
        signed: signed.to_owned(),
        note: format!("{signed}+witnessed"),
    };
    let shows = vec![
        show(ORG, Env::Live, 200, "live-200"),
        show("org_other", Env::Sandbox, 50, "other-50"),
        show(ORG, Env::Sandbox, 10, "never-signed"),
        show("org_nowhere", Env::Live, 1, "none"),
    ];
    assert_eq!(
        store.show_checkpoints(shows).await.unwrap(),
        vec![true, true, false, false]
    );
    let shown = store
        .shown_checkpoint(ORG, Env::Live)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (shown.size, shown.note.as_str()),
        (200, "live-200+witnessed")
    );
    let shown = store
        .shown_checkpoint("org_other", Env::Sandbox)
        .await
        .unwrap();
    assert_eq!(shown.unwrap().note, "other-50+witnessed");
    // Shown once: the same again shows nothing.
    let shows = vec![show(ORG, Env::Live, 200, "live-200+witnessed")];
    assert_eq!(store.show_checkpoints(shows).await.unwrap(), vec![false]);
}

/// `logs` read with no `Quiet`: none waits.
fn unquiet(logs: &[(String, Env)]) -> Vec<(String, Env, Option<Quiet>)> {
    logs.iter().map(|(o, e)| (o.clone(), *e, None)).collect()
}

pub async fn a_quiet_log_waits_with_only_its_head_read(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_quiet", 3).await;
    mandate(store, "agt_quiet").await;
    for amount in ["10", "20", "30"] {
        let new =
            super::made::decided(store, "agt_quiet", amount, mandate_core::Verdict::Allow).await;
        super::made::stored(store, new).await;
    }
    // A log never signed does not wait, however quiet.
    let quiet = |after: i64, until: i64, fewer_than: i64| Quiet {
        signed_after_ms: after,
        signed_until_ms: until,
        fewer_than,
    };
    let tail = store.log_tail(ORG, Env::Sandbox, 10, Some(quiet(0, i64::MAX, 100)));
    let tail = tail.await.unwrap();
    assert!(!tail.waiting);
    let seqs: Vec<i64> = tail.decisions.iter().map(|(s, _, _)| *s).collect();
    assert_eq!(seqs.len(), 3);
    // The first decision logged, its checkpoint signed at 5 s: two decisions wait, and
    // the seqs from the head to the newest are `span`.
    let token = "q0.payload.sig".to_owned();
    let first = LogAppend {
        org: ORG.to_owned(),
        env: Env::Sandbox,
        from: (0, 0),
        size: 1,
        scanned_seq: seqs[0],
        leaves: vec![(0, seqs[0], tlog::leaf_hash(token.as_bytes()))],
        tokens: vec![token],
        tiles: Vec::new(),
        checkpoint: Some("signed-1".into()),
        signed_ms: 5_000,
    };
    assert!(store.append_log(first).await.unwrap());
    let span = seqs[2] - seqs[0];
    let logs = [(ORG.to_owned(), Env::Sandbox), (ORG.to_owned(), Env::Live)];
    // Signed within the window, fewer than `span + 1` waiting: it waits, its head read.
    for read in [
        Some(quiet(4_999, 5_000, span + 1)),
        Some(quiet(0, i64::MAX, span + 1)),
    ] {
        let tail = store.log_tail(ORG, Env::Sandbox, 10, read).await.unwrap();
        assert!(tail.waiting, "{read:?}");
        assert!(tail.decisions.is_empty() && tail.tiles.is_empty());
        assert_eq!(tail.edge.size(), 0);
        assert_eq!(
            (tail.head.size, tail.head.scanned_seq, tail.head.signed_ms),
            (1, seqs[0], Some(5_000))
        );
        // Read with another log at once: the same, and the other log read as alone.
        let tails = store
            .log_tails(
                logs.iter().map(|(o, e)| (o.clone(), *e, read)).collect(),
                10,
            )
            .await
            .unwrap();
        assert!(tails[0].waiting && tails[0].decisions.is_empty());
        assert_eq!(tails[0].head, tail.head);
        let live = store.log_tail(ORG, Env::Live, 10, None).await.unwrap();
        assert!(!tails[1].waiting);
        assert_eq!(tails[1].head, live.head);
    }
    // As many waiting as `fewer_than`, signed at or before the window's start, or after
    // its end (a clock ahead): it does not wait, and its two decisions are read.
    for read in [
        None,
        Some(quiet(0, i64::MAX, span)),
        Some(quiet(5_000, i64::MAX, span + 1)),
        Some(quiet(0, 4_999, span + 1)),
    ] {
        let tail = store.log_tail(ORG, Env::Sandbox, 10, read).await.unwrap();
        assert!(!tail.waiting, "{read:?}");
        assert_eq!(tail.edge.size(), 1);
        let read_seqs: Vec<i64> = tail.decisions.iter().map(|(s, _, _)| *s).collect();
        assert_eq!(read_seqs, seqs[1..], "{read:?}");
        let tails = store
            .log_tails(vec![(ORG.to_owned(), Env::Sandbox, read)], 10)
            .await
            .unwrap();
        assert!(!tails[0].waiting);
        assert_eq!(tails[0].decisions, tail.decisions);
        assert_eq!(tails[0].edge.size(), 1);
    }
}
