use std::collections::HashMap;

use mandate_protocol::jws::P256Signer;
use mandate_protocol::tlog::{LogKey, NodeId, ProofPlan, TreeEdge, WitnessPolicy};

use super::*;

const ORIGIN: &str = "verdicts.example.com/log/org_1/live";

/// A log of `n` leaves kept whole, to sign checkpoints of and prove its growth.
struct Log {
    key: P256Signer,
    edges: Vec<TreeEdge>,
    stored: HashMap<NodeId, LogHash>,
}

impl Log {
    fn new(n: u64) -> Self {
        let mut edge = TreeEdge::new();
        let mut edges = vec![edge.clone()];
        let mut stored = HashMap::new();
        for i in 0..n {
            stored.extend(edge.push(tlog::leaf_hash(&i.to_be_bytes())).unwrap());
            edges.push(edge.clone());
        }
        let key = P256Signer::from_secret_bytes("log-1", &[9; 32]).unwrap();
        Self { key, edges, stored }
    }

    fn note(&self, size: u64) -> String {
        let edge = &self.edges[size as usize];
        let checkpoint = tlog::checkpoint(ORIGIN, size, edge.root()).unwrap();
        tlog::sign_checkpoint(&checkpoint, &self.key).unwrap()
    }

    fn proof(&self, old: u64, new: u64) -> Vec<LogHash> {
        let plan = ProofPlan::consistency(old, new).unwrap();
        let hashes: Vec<LogHash> = plan.nodes().iter().map(|id| self.stored[id]).collect();
        plan.assemble(&hashes).unwrap()
    }

    fn body(&self, old: u64, proof: &[LogHash], note: &str) -> Vec<u8> {
        let mut body = format!("old {old}\n");
        for hash in proof {
            body.push_str(&format!("{hash}\n"));
        }
        body.push('\n');
        body.push_str(note);
        body.into_bytes()
    }

    fn vkey(&self) -> String {
        LogKey::of_signer(&self.key).verifier_key(ORIGIN)
    }
}

fn witness(log: &Log, dir: &std::path::Path) -> Witness {
    let (origin, key) = LogKey::from_verifier_key(&log.vkey()).unwrap();
    let state = StateFile::open(dir.join("state.json")).unwrap();
    let signer = WitnessSigner::from_seed("w.example/1", [3; 32]).unwrap();
    Witness::new(signer, vec![(origin, tlog::log_keys(vec![key]))], state)
}

#[test]
fn a_log_that_grows_is_cosigned_and_one_that_forks_or_shrinks_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::new(8);
    let w = witness(&log, dir.path());
    let add = |old: u64, proof: &[LogHash], size: u64| {
        w.add_checkpoint(&log.body(old, proof, &log.note(size)), 1_700_000_000)
    };

    // First checkpoint, then an extension with its proof: 200, a cosignature line that
    // verifies on the checkpoint.
    let first = add(0, &[], 3);
    assert_eq!(first.status, 200, "{first:?}");
    assert!(first.body.starts_with("— w.example/1 ") && first.body.ends_with('\n'));
    let grown = add(3, &log.proof(3, 7), 7);
    assert_eq!(grown.status, 200, "{grown:?}");
    let policy = WitnessPolicy::new(
        vec![
            WitnessSigner::from_seed("w.example/1", [3; 32])
                .unwrap()
                .witness_key(),
        ],
        1,
    )
    .unwrap();
    let cosigned = format!("{}{}", log.note(7), grown.body);
    assert_eq!(
        policy.check(&cosigned).unwrap()[0].timestamp(),
        1_700_000_000
    );

    // The same checkpoint again: cosigned again.
    assert_eq!(add(7, &[], 7).status, 200);
    // A rollback: `old` above the size is 400; `old` the smaller size is 409 with 7.
    assert_eq!(add(7, &[], 5).status, 400);
    let conflict = add(5, &[], 5);
    assert_eq!(
        (
            conflict.status,
            conflict.content_type,
            conflict.body.as_str()
        ),
        (409, SIZE_CONTENT_TYPE, "7\n")
    );
    // A fork at the same size: 422, named.
    let other = Log {
        edges: {
            let mut edge = TreeEdge::new();
            (0..=7u64)
                .map(|i| {
                    let e = edge.clone();
                    edge.push(tlog::leaf_hash(&[i as u8, 1])).unwrap();
                    e
                })
                .collect()
        },
        ..Log::new(0)
    };
    let fork = w.add_checkpoint(&log.body(7, &[], &other.note(7)), 1);
    assert_eq!(fork.status, 422);
    assert!(fork.body.contains("the log forked"), "{}", fork.body);
    // A proof that does not hold: 422 with the sizes.
    let bad = add(7, &log.proof(3, 8), 8);
    assert_eq!(bad.status, 422);
    assert!(bad.body.contains("from size 7 to 8"), "{}", bad.body);
    // Nothing refused moved the state: 7 is still what old must be.
    assert_eq!(add(7, &log.proof(7, 8), 8).status, 200);
}

#[test]
fn each_refusal_has_the_specifications_status_and_says_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::new(4);
    let w = witness(&log, dir.path());
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"\xff".to_vec(), 400, "not UTF-8"),
        (b"new 3\n\n".to_vec(), 400, "\"old <size>\""),
        (b"old 03\n\n".to_vec(), 400, "without leading zeros"),
        (log.body(0, &[], "not a note\n"), 400, "not a signed note"),
        (
            format!("old 0\nAAAA\n\n{}", log.note(2)).into_bytes(),
            400,
            "proof line 1 is not a 32-byte hash",
        ),
        (
            format!("old 0\n{}", log.note(2)).into_bytes(),
            400,
            "proof line 1",
        ),
        (
            log.body(0, &vec![tlog::empty_root(); 64], &log.note(2)),
            400,
            "at most 63 lines",
        ),
        (
            log.body(0, &[], &log.note(2).replace(ORIGIN, "other.example/log")),
            404,
            "does not witness the log \"other.example/log\"",
        ),
        (
            log.body(0, &[], &log.note(2).replace("\n2\n", "\n3\n")),
            403,
            "not signed by the key of the log",
        ),
        (log.body(3, &[], &log.note(2)), 400, "old 3 is above"),
        (log.body(1, &[], &log.note(2)), 409, "0"),
        (
            log.body(0, &log.proof(1, 2), &log.note(2)),
            422,
            "send no consistency proof lines",
        ),
    ];
    for (body, status, says) in cases {
        let answer = w.add_checkpoint(&body, 1);
        assert_eq!(answer.status, status, "{answer:?}");
        assert!(answer.body.contains(says), "{says:?} not in {answer:?}");
    }
    // A checkpoint of size 0 must have the empty tree's root.
    let key = P256Signer::from_secret_bytes("log-1", &[9; 32]).unwrap();
    let empty_but_not = tlog::checkpoint(ORIGIN, 0, tlog::leaf_hash(b"x")).unwrap();
    let note = tlog::sign_checkpoint(&empty_but_not, &key).unwrap();
    let answer = w.add_checkpoint(&log.body(0, &[], &note), 1);
    assert_eq!(answer.status, 422);
    assert!(answer.body.contains("empty tree's root"), "{answer:?}");
    // Nothing was recorded.
    assert!(w.checkpoint_of(&hex_sha256(ORIGIN)).is_none());
    assert_eq!(
        w.add_checkpoint(&log.body(0, &[], &log.note(0)), 1).status,
        200
    );
    let kept = w.checkpoint_of(&hex_sha256(ORIGIN)).unwrap();
    assert!(kept.starts_with(&format!("{ORIGIN}\n0\n")) && kept.contains("— w.example/1 "));
}
