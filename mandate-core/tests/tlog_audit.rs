//! The auditor against a log that is tampered with: a decision deleted, changed or
//! reordered, the database rolled back after more decisions were checkpointed, two
//! checkpoints of one size; and signed checkpoints read strictly (round trips, hostile
//! notes, keys it must ignore). The log is made as the service would: complete subtrees
//! stored as the worker appends, proofs from them, checkpoints signed with a log key.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use mandate_core::{
    Checkpoint, CheckpointError, LogEntry, LogError, LogKeys, NoteError, P256Signer,
};
use mandate_protocol::tlog::LogHash;
use mandate_protocol::{
    tlog::AuditError, tlog::AuditLeaf, tlog::AuditState, tlog::LogKey, tlog::NodeId,
    tlog::ProofPlan, tlog::SignedNote, tlog::TreeEdge, tlog::sign_checkpoint,
};

const ORIGIN: &str = "verdicts.example.com/log/org_4Fq2/live";

fn log_key() -> P256Signer {
    P256Signer::from_secret_bytes("log-1", &[9; 32]).unwrap()
}

fn keys() -> LogKeys {
    mandate_protocol::tlog::log_keys(vec![LogKey::of_signer(&log_key())])
}

/// A log as the service keeps it: the tokens in `seq` order and the complete subtrees.
struct Log {
    tokens: Vec<String>,
    stored: HashMap<NodeId, LogHash>,
    edge: TreeEdge,
}

impl Log {
    fn new() -> Self {
        Self {
            tokens: Vec::new(),
            stored: HashMap::new(),
            edge: TreeEdge::new(),
        }
    }

    fn with(count: usize, prefix: &str) -> Self {
        let mut log = Self::new();
        log.append(count, prefix);
        log
    }

    fn append(&mut self, count: usize, prefix: &str) {
        for _ in 0..count {
            let token = format!("{prefix}{}.payload.signature", self.tokens.len());
            self.stored.extend(
                self.edge
                    .push(mandate_protocol::tlog::leaf_hash(token.as_bytes()))
                    .unwrap(),
            );
            self.tokens.push(token);
        }
    }

    /// The root at `size` from the stored subtrees.
    fn root(&self, size: u64) -> LogHash {
        let nodes = TreeEdge::node_ids(size)
            .iter()
            .map(|id| self.stored[id])
            .collect();
        TreeEdge::from_parts(size, nodes).unwrap().root()
    }

    /// The signed checkpoint at `size`.
    fn checkpoint(&self, size: u64) -> String {
        let checkpoint = mandate_protocol::tlog::checkpoint(ORIGIN, size, self.root(size)).unwrap();
        sign_checkpoint(&checkpoint, &log_key()).unwrap()
    }

    fn entry(&self, index: u64, size: u64) -> LogEntry {
        let plan = ProofPlan::inclusion(index, size).unwrap();
        let hashes: Vec<LogHash> = plan.nodes().iter().map(|id| self.stored[id]).collect();
        mandate_protocol::tlog::log_entry(
            index,
            self.checkpoint(size),
            plan.assemble(&hashes).unwrap(),
        )
    }

    /// The export from `from` on, each line with its `log` against the checkpoint of
    /// `size` when it covers it (and `proofs` is on), `null` otherwise.
    fn export(&self, from: usize, size: u64, proofs: bool) -> Vec<(String, Option<LogEntry>)> {
        (from..self.tokens.len())
            .map(|i| {
                let entry = (proofs && (i as u64) < size).then(|| self.entry(i as u64, size));
                (self.tokens[i].clone(), entry)
            })
            .collect()
    }
}

fn leaves(lines: &[(String, Option<LogEntry>)]) -> Vec<AuditLeaf> {
    lines
        .iter()
        .map(|(token, entry)| AuditLeaf::token(token, entry.clone()))
        .collect()
}

/// An auditor that accepted the log's first `size` decisions, through a stored state.
fn audited(log: &Log, size: u64) -> AuditState {
    let state = AuditState::new(ORIGIN)
        .advance(
            &leaves(&log.export(0, size, true)),
            &log.checkpoint(size),
            &keys(),
        )
        .unwrap();
    let stored = serde_json::to_string(&state).unwrap();
    serde_json::from_str(&stored).unwrap()
}

#[test]
fn an_honest_log_is_followed_run_after_run() {
    let mut log = Log::with(5, "t");
    let state = audited(&log, 5);
    assert_eq!((state.size(), state.root()), (5, log.root(5)));
    // The same checkpoint again, and the same size with nothing new: accepted.
    let state = state.advance(&[], &log.checkpoint(5), &keys()).unwrap();
    log.append(9, "t");
    // The export runs past the checkpoint: only what it counts is used.
    let state = state
        .advance(
            &leaves(&log.export(5, 12, true)),
            &log.checkpoint(12),
            &keys(),
        )
        .unwrap();
    assert_eq!(state.size(), 12);
    assert_eq!(state.checkpoint(), Some(log.checkpoint(12).as_str()));
    // Without inclusion proofs the tree alone is checked.
    let state = state
        .advance(
            &leaves(&log.export(12, 14, false)),
            &log.checkpoint(14),
            &keys(),
        )
        .unwrap();
    assert_eq!(state.root(), log.root(14));
}

#[test]
fn a_deleted_decision_is_named_by_its_index() {
    let mut log = Log::with(5, "t");
    let state = audited(&log, 5);
    log.append(9, "t");
    for proofs in [true, false] {
        let mut lines = log.export(5, 12, proofs);
        lines.remove(7 - 5);
        let error = state
            .advance(&leaves(&lines), &log.checkpoint(12), &keys())
            .unwrap_err();
        if proofs {
            // The line after it is logged at 8, where 7 was expected.
            assert_eq!(error, AuditError::Missing { index: 7, size: 12 });
            assert!(
                error
                    .to_string()
                    .contains("no decision at index 7: it was deleted"),
                "{error}"
            );
        } else {
            assert_eq!(error, AuditError::RootMismatch { from: 5, to: 12 });
        }
    }
    // The last decisions deleted: the export runs short of what the checkpoint counts.
    let lines = log.export(5, 12, false);
    let error = state
        .advance(&leaves(&lines[..5]), &log.checkpoint(12), &keys())
        .unwrap_err();
    assert_eq!(
        error,
        AuditError::Missing {
            index: 10,
            size: 12
        }
    );
}

#[test]
fn a_changed_decision_is_named_by_its_index() {
    let mut log = Log::with(5, "t");
    let state = audited(&log, 5);
    log.append(9, "t");
    for proofs in [true, false] {
        let mut lines = log.export(5, 12, proofs);
        lines[8 - 5].0 = lines[8 - 5].0.replace("payload", "pay1oad");
        let error = state
            .advance(&leaves(&lines), &log.checkpoint(12), &keys())
            .unwrap_err();
        match (proofs, &error) {
            (
                true,
                AuditError::Changed {
                    index: 8,
                    reason: LogError::NotIncluded { .. },
                },
            ) => {
                assert!(
                    error
                        .to_string()
                        .starts_with("the decision at index 8 is not the one the log holds there"),
                    "{error}"
                );
            }
            (false, AuditError::RootMismatch { from: 5, to: 12 }) => {}
            _ => panic!("{proofs}: {error:?}"),
        }
    }
}

#[test]
fn reordered_decisions_are_named() {
    let mut log = Log::with(5, "t");
    let state = audited(&log, 5);
    log.append(9, "t");
    let mut lines = log.export(5, 12, true);
    lines.swap(6 - 5, 7 - 5);
    let error = state
        .advance(&leaves(&lines), &log.checkpoint(12), &keys())
        .unwrap_err();
    assert_eq!(
        error,
        AuditError::Reordered {
            index: 6,
            found_at: 7
        }
    );
    let mut lines = log.export(5, 12, false);
    lines.swap(6 - 5, 7 - 5);
    let error = state
        .advance(&leaves(&lines), &log.checkpoint(12), &keys())
        .unwrap_err();
    assert_eq!(error, AuditError::RootMismatch { from: 5, to: 12 });
}

#[test]
fn a_rollback_is_caught_as_a_shrunk_log_or_a_rewritten_history() {
    let log = Log::with(12, "t");
    let state = audited(&log, 12);
    // The database restored from a backup of 10 decisions: its next checkpoint is smaller.
    let restored = Log::with(10, "t");
    let error = state
        .advance(&[], &restored.checkpoint(10), &keys())
        .unwrap_err();
    assert_eq!(
        error,
        AuditError::Shrank {
            accepted: 12,
            presented: 10
        }
    );
    assert!(
        error
            .to_string()
            .starts_with("the log shrank from 12 to 10 decisions"),
        "{error}"
    );
    // It takes new decisions at 10, 11, ...: once past 12, the new ones are in its log as
    // exported, but the first 12 are not those the auditor accepted.
    let mut regrown = Log::with(10, "t");
    regrown.append(5, "u");
    let lines = regrown.export(12, 15, true);
    let error = state
        .advance(&leaves(&lines), &regrown.checkpoint(15), &keys())
        .unwrap_err();
    assert_eq!(error, AuditError::Rewritten { accepted_size: 12 });
    let lines = regrown.export(12, 15, false);
    let error = state
        .advance(&leaves(&lines), &regrown.checkpoint(15), &keys())
        .unwrap_err();
    assert_eq!(error, AuditError::RootMismatch { from: 12, to: 15 });
}

#[test]
fn two_checkpoints_of_one_size_are_a_fork() {
    let log = Log::with(12, "t");
    let state = audited(&log, 12);
    let other = Log::with(12, "x");
    let error = state
        .advance(&[], &other.checkpoint(12), &keys())
        .unwrap_err();
    assert_eq!(
        error,
        AuditError::Fork {
            size: 12,
            accepted: log.root(12),
            presented: other.root(12)
        }
    );
    assert!(error.to_string().ends_with("the log forked"), "{error}");
    // A fork shown through a decision's entry: its checkpoint has the audited size and
    // another root.
    let mut grown = Log::with(12, "t");
    grown.append(3, "t");
    let mut forked = Log::with(12, "t");
    forked.append(3, "y");
    let mut lines = grown.export(12, 15, true);
    lines[1].1 = Some(forked.entry(13, 15));
    let error = state
        .advance(&leaves(&lines), &grown.checkpoint(15), &keys())
        .unwrap_err();
    assert!(
        matches!(error, AuditError::Fork { size: 15, .. }),
        "{error:?}"
    );
}

#[test]
fn checkpoints_of_another_log_or_key_are_refused() {
    let log = Log::with(3, "t");
    let state = AuditState::new("verdicts.example.com/log/org_other/live");
    let error = state
        .advance(
            &leaves(&log.export(0, 3, true)),
            &log.checkpoint(3),
            &keys(),
        )
        .unwrap_err();
    assert!(matches!(error, AuditError::OtherLog { .. }), "{error:?}");
    let stranger = mandate_protocol::tlog::log_keys(vec![LogKey::of_signer(
        &P256Signer::from_secret_bytes("log-2", &[8; 32]).unwrap(),
    )]);
    let error = AuditState::new(ORIGIN)
        .advance(
            &leaves(&log.export(0, 3, true)),
            &log.checkpoint(3),
            &stranger,
        )
        .unwrap_err();
    assert_eq!(
        error,
        AuditError::Checkpoint(CheckpointError::NoKnownSignature {
            origin: ORIGIN.to_owned()
        })
    );
}

#[test]
fn a_stored_state_whose_tree_is_not_its_checkpoints_is_refused() {
    let log = Log::with(5, "t");
    let state = audited(&log, 5);
    let mut stored: serde_json::Value = serde_json::to_value(&state).unwrap();
    stored["edge"]["nodes"][0] =
        serde_json::Value::from(mandate_protocol::tlog::leaf_hash(b"x").to_base64());
    assert!(serde_json::from_value::<AuditState>(stored).is_err());
    let mut stored: serde_json::Value = serde_json::to_value(&state).unwrap();
    stored["checkpoint"] = serde_json::Value::Null;
    assert!(serde_json::from_value::<AuditState>(stored).is_err());
    let fresh = serde_json::to_string(&AuditState::new(ORIGIN)).unwrap();
    assert_eq!(
        serde_json::from_str::<AuditState>(&fresh).unwrap(),
        AuditState::new(ORIGIN)
    );
}

// Signed checkpoints: round trips and hostile notes.

fn signed(size: u64) -> String {
    Log::with(size as usize, "t").checkpoint(size)
}

#[test]
fn a_signed_checkpoint_round_trips_exactly() {
    let note = signed(7);
    let parsed = SignedNote::parse(&note).unwrap();
    assert_eq!(parsed.to_string(), note);
    assert_eq!(parsed.signatures().len(), 1);
    assert_eq!(parsed.signatures()[0].name(), ORIGIN);
    assert_eq!(
        parsed.signatures()[0].key_id(),
        LogKey::of_signer(&log_key()).key_id()
    );
    let checkpoint = keys().verify(&note).unwrap();
    assert_eq!(checkpoint.to_string(), parsed.text());
    assert_eq!(Checkpoint::parse(parsed.text()).unwrap(), checkpoint);
    // ECDSA with RFC 6979 nonces: the same checkpoint signs to the same note.
    assert_eq!(signed(7), note);
}

#[test]
fn extension_lines_are_signed_and_kept() {
    let checkpoint =
        mandate_protocol::tlog::checkpoint(ORIGIN, 0, mandate_protocol::tlog::empty_root())
            .unwrap();
    let checkpoint =
        mandate_protocol::tlog::with_extension(checkpoint, "witnessed-by: nobody yet").unwrap();
    let note = sign_checkpoint(&checkpoint, &log_key()).unwrap();
    assert_eq!(keys().verify(&note).unwrap(), checkpoint);
    // An extension line added after signing breaks the signature.
    let forged = note.replacen("nobody yet\n", "nobody yet\nsize: 1000000\n", 1);
    assert!(matches!(
        keys().verify(&forged),
        Err(CheckpointError::BadSignature { .. })
    ));
}

#[test]
fn hostile_notes_are_refused_by_name() {
    let note = signed(3);
    let (text, signature_line) = note.split_once("\n\n").unwrap();
    let cases = [
        // Extra lines: a blank line after the signatures, one before them.
        (
            format!("{note}\n"),
            CheckpointError::Note(NoteError::NoSignatures),
        ),
        (
            format!("{text}\n\n\n{signature_line}"),
            CheckpointError::Lines,
        ),
        (
            format!("{text}\nextra\n\n{signature_line}"),
            CheckpointError::BadSignature {
                kid: "log-1".into(),
                name: ORIGIN.into(),
            },
        ),
        (
            note.trim_end().to_owned(),
            CheckpointError::Note(NoteError::MissingFinalNewline),
        ),
        (
            format!("{note}{signature_line}"),
            CheckpointError::Note(NoteError::DuplicateSignature {
                name: ORIGIN.into(),
                key_id: LogKey::of_signer(&log_key()).key_id(),
            }),
        ),
        (
            note.replace('\n', "\r\n"),
            CheckpointError::Note(NoteError::ControlCharacter(0x0d)),
        ),
    ];
    for (hostile, error) in cases {
        assert_eq!(keys().verify(&hostile), Err(error), "{hostile:?}");
    }
}

/// A signature line by `signer` over `text` under `name`, with `key_id`.
fn signature_line(text: &str, name: &str, key_id: u32, signer: &P256Signer) -> String {
    use mandate_core::Signer as _;
    let raw = signer.sign(text.as_bytes()).unwrap();
    let der = p256::ecdsa::Signature::from_slice(&raw).unwrap().to_der();
    let mut bytes = key_id.to_be_bytes().to_vec();
    bytes.extend_from_slice(der.as_bytes());
    format!("\u{2014} {name} {}\n", STANDARD.encode(bytes))
}

#[test]
fn signatures_of_unknown_keys_are_ignored_and_one_known_signature_is_needed() {
    let note = signed(3);
    let text = SignedNote::parse(&note).unwrap().text().to_owned();
    let witness = P256Signer::from_secret_bytes("witness", &[5; 32]).unwrap();
    let ours = LogKey::of_signer(&log_key()).key_id();
    // A witness's cosignature beside the log's: ignored, the note verifies.
    let cosigned = format!(
        "{note}{}",
        signature_line(&text, "witness.example/w1", 0x1234_5678, &witness)
    );
    assert!(keys().verify(&cosigned).is_ok());
    // A garbage signature under our name with an unknown key id: ignored.
    let unknown_id = format!("{note}\u{2014} {ORIGIN} AAAAAAE=\n");
    assert!(keys().verify(&unknown_id).is_ok());
    // Our key id under another name, alone: not our key's signature, so none is known.
    let other_name = format!(
        "{text}\n{}",
        signature_line(&text, "other.example/log", ours, &log_key())
    );
    assert_eq!(
        keys().verify(&other_name),
        Err(CheckpointError::NoKnownSignature {
            origin: ORIGIN.into()
        })
    );
    // Our name and key id, another key's signature: a known key's signature that fails.
    let impostor = format!("{text}\n{}", signature_line(&text, ORIGIN, ours, &witness));
    assert!(matches!(
        keys().verify(&impostor),
        Err(CheckpointError::BadSignature { .. })
    ));
    // With a valid one beside it, the failing one still refuses the note.
    let both = format!("{note}{}", signature_line(&text, ORIGIN, ours, &witness));
    assert!(matches!(
        keys().verify(&both),
        Err(CheckpointError::Note(NoteError::DuplicateSignature { .. }))
    ));
    // No key at all.
    assert!(matches!(
        LogKeys::default().verify(&note),
        Err(CheckpointError::NoKnownSignature { .. })
    ));
}

#[test]
fn an_origin_that_cannot_name_a_key_cannot_be_signed() {
    for origin in ["verdicts example/log", "verdicts.example/log+1"] {
        let checkpoint =
            mandate_protocol::tlog::checkpoint(origin, 0, mandate_protocol::tlog::empty_root())
                .unwrap();
        assert_eq!(
            sign_checkpoint(&checkpoint, &log_key()),
            Err(CheckpointError::OriginNotKeyName(origin.to_owned()))
        );
    }
    // A checkpoint whose origin has a space is still read (the specification allows it),
    // but no signature line can carry its name.
    let text = format!("a log\n0\n{}\n", mandate_protocol::tlog::empty_root());
    let line = signature_line(
        &text,
        "a",
        LogKey::of_signer(&log_key()).key_id(),
        &log_key(),
    );
    assert_eq!(
        keys().verify(&format!("{text}\n{line}")),
        Err(CheckpointError::NoKnownSignature {
            origin: "a log".into()
        })
    );
}

#[test]
fn the_log_key_is_published_as_a_jwk_a_jwt_verifier_skips() {
    let verdict_key = P256Signer::from_secret_bytes("live-1", &[7; 32]).unwrap();
    let log = LogKey::of_signer(&log_key());
    let jwks = serde_json::json!({ "keys": [
        mandate_core::Signer::public_jwk(&verdict_key), log,
    ]});
    let member = &jwks["keys"][1];
    assert_eq!(member["use"], "tlog-checkpoint");
    assert_eq!(member["kid"], "log-1");
    assert!(member.get("alg").is_none(), "{member}");
    let bytes = jwks.to_string().into_bytes();
    // The verdict keys' reader skips it; the log keys' reader takes only it.
    let verdict_keys = mandate_core::JwkSet::from_json(&bytes).unwrap();
    assert_eq!(verdict_keys.keys.len(), 1);
    assert!(verdict_keys.find("log-1").is_none());
    let log_keys = LogKeys::from_jwks_json(&bytes).unwrap();
    assert_eq!(
        mandate_protocol::tlog::keys_of(&log_keys),
        std::slice::from_ref(&log)
    );
    assert!(log_keys.verify(&signed(2)).is_ok());
    // Its C2SP verifier key reads back to the same key.
    let vkey = log.verifier_key(ORIGIN);
    assert!(
        vkey.starts_with(&format!("{ORIGIN}+{:08x}+AjBZ", log.key_id())),
        "{vkey}"
    );
    assert_eq!(
        LogKey::from_verifier_key(&vkey).unwrap().1.key_id(),
        log.key_id()
    );
    // A broken log key is refused, not skipped: it claims to be one.
    let mut broken = jwks.clone();
    broken["keys"][1]["x"] = serde_json::Value::from("AAAA");
    assert!(LogKeys::from_jwks_json(broken.to_string().as_bytes()).is_err());
    let mut private = jwks.clone();
    private["keys"][1]["d"] = serde_json::Value::from("AAAA");
    assert!(LogKeys::from_jwks_json(private.to_string().as_bytes()).is_err());
}
