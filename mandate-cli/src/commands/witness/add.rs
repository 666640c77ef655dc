//! `POST /add-checkpoint` (c2sp.org/tlog-witness): the request read, the checks in the
//! specification's order, and the answer with its status.
//!
//! The body is an `old <size>` line, up to 63 consistency-proof lines (one base64 hash
//! each), a blank line and the signed checkpoint. The witness refuses, in this order: a
//! malformed body (400), a log it was not given (404), a checkpoint whose log signature
//! does not hold (403), an `old` above the checkpoint's size (400), an `old` that is not the
//! size it cosigned last (409, with that size), and a checkpoint that does not extend the
//! one it cosigned (422). Checking `old` and recording the new checkpoint happen under one
//! lock, so two requests can never roll the recorded size back.

use std::sync::{Mutex, PoisonError};

use mandate_protocol::tlog::{
    self, Checkpoint, LogHash, LogKeys, SignedNote, WitnessSigner, verify_consistency,
};
use sha2::{Digest as _, Sha256};

use super::state::{Cosigned, StateFile};

/// The most consistency-proof lines a request may have (the specification's limit).
const MAX_PROOF_LINES: usize = 63;

/// The content type of a 409's body, the size the witness cosigned last.
pub const SIZE_CONTENT_TYPE: &str = "text/x.tlog.size";

/// An answer to a request: its status, its content type and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl Answer {
    fn text(status: u16, message: &str) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            body: format!("{message}\n"),
        }
    }
}

/// Why a checkpoint was not cosigned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Refusal {
    /// 400: the body is not what the specification defines.
    Malformed(String),
    /// 404: the checkpoint is of a log this witness was not given.
    UnknownLog(String),
    /// 403: the log's signature does not hold.
    Signature(String),
    /// 409: `old` is not the size cosigned last, which is given.
    Conflict(u64),
    /// 422: the checkpoint does not extend the one cosigned last.
    Inconsistent(String),
}

impl Refusal {
    fn answer(&self) -> Answer {
        match self {
            Self::Malformed(m) => Answer::text(400, m),
            Self::UnknownLog(origin) => Answer::text(
                404,
                &format!(
                    "this witness does not witness the log {origin:?}: its operator must add the log's verifier key with --log"
                ),
            ),
            Self::Signature(m) => Answer::text(403, m),
            Self::Conflict(size) => Answer {
                status: 409,
                content_type: SIZE_CONTENT_TYPE,
                body: format!("{size}\n"),
            },
            Self::Inconsistent(m) => Answer::text(422, m),
        }
    }
}

/// A request, read.
#[derive(Debug)]
struct Request {
    old: u64,
    proof: Vec<LogHash>,
    note: SignedNote,
    checkpoint: Checkpoint,
}

/// The witness: its key, the logs it witnesses and its state.
pub struct Witness {
    signer: WitnessSigner,
    logs: Vec<(String, LogKeys)>,
    state: Mutex<StateFile>,
}

impl Witness {
    /// A witness cosigning with `signer` the logs `logs` (origin and log key), from `state`.
    pub fn new(signer: WitnessSigner, logs: Vec<(String, LogKeys)>, state: StateFile) -> Self {
        Self {
            signer,
            logs,
            state: Mutex::new(state),
        }
    }

    /// The witness's verifier key.
    pub fn verifier_key(&self) -> String {
        self.signer.witness_key().to_string()
    }

    /// Answers `POST /add-checkpoint` with `body`, cosigning at `now` (POSIX seconds).
    pub fn add_checkpoint(&self, body: &[u8], now: u64) -> Answer {
        match self.try_add(body, now) {
            Ok(answer) => answer,
            Err(refusal) => refusal.answer(),
        }
    }

    fn try_add(&self, body: &[u8], now: u64) -> Result<Answer, Refusal> {
        let request = parse(body)?;
        let origin = request.checkpoint.origin().to_owned();
        let keys = self
            .logs
            .iter()
            .find(|(o, _)| *o == origin)
            .map(|(_, keys)| keys)
            .ok_or_else(|| Refusal::UnknownLog(origin.clone()))?;
        keys.verify(&request.note.to_string()).map_err(|e| {
            Refusal::Signature(format!(
                "the checkpoint is not signed by the key of the log {origin:?}: {e}"
            ))
        })?;
        if request.old > request.checkpoint.size() {
            return Err(Refusal::Malformed(format!(
                "old {} is above the checkpoint's size {}: old is the size of the last checkpoint this witness cosigned",
                request.old,
                request.checkpoint.size()
            )));
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let recorded = state.get(&origin);
        if let Err(refusal) = extends(&request, recorded) {
            let answer = refusal.answer();
            eprintln!(
                "mandate witness: refused {origin} at {} ({}): {}",
                request.checkpoint.size(),
                answer.status,
                answer.body.trim_end()
            );
            return Err(refusal);
        }
        let line = self
            .signer
            .cosign(&request.checkpoint, now)
            .map_err(|e| Refusal::Malformed(format!("cannot cosign: {e}")))?;
        // The note kept for monitors: the log's signatures (its origin's) and this one.
        let mut lines: Vec<_> = request
            .note
            .signatures()
            .iter()
            .filter(|s| s.name() == origin)
            .cloned()
            .collect();
        lines.push(line.clone());
        let checkpoint = SignedNote::new(request.note.text(), lines)
            .map_err(|e| Refusal::Malformed(format!("the checkpoint cannot be cosigned: {e}")))?
            .to_string();
        let cosigned = Cosigned {
            size: request.checkpoint.size(),
            root: *tlog::root_of(&request.checkpoint),
            checkpoint,
        };
        if let Err(e) = state.record(&origin, cosigned) {
            eprintln!("mandate witness: cannot write the state file: {e}");
            return Ok(Answer::text(
                500,
                "the witness could not record the checkpoint, so it did not cosign it: try again later",
            ));
        }
        eprintln!(
            "mandate witness: cosigned {origin} at {}",
            request.checkpoint.size()
        );
        Ok(Answer::text(200, &line.to_string()))
    }

    /// `GET /<hex SHA-256 of the origin>/checkpoint`: the last checkpoint cosigned of that
    /// log, with the log's signatures and the cosignature.
    pub fn checkpoint_of(&self, origin_hash: &str) -> Option<String> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.logs
            .iter()
            .find(|(origin, _)| hex_sha256(origin) == origin_hash)
            .and_then(|(origin, _)| state.get(origin))
            .map(|cosigned| cosigned.checkpoint.clone())
    }
}

/// The checks against the checkpoint cosigned last (`recorded`; none: the empty tree).
fn extends(request: &Request, recorded: Option<&Cosigned>) -> Result<(), Refusal> {
    let (size, root) = (
        request.checkpoint.size(),
        *tlog::root_of(&request.checkpoint),
    );
    let (last, last_root) = recorded.map_or((0, tlog::empty_root()), |c| (c.size, c.root));
    if request.old != last {
        return Err(Refusal::Conflict(last));
    }
    if size == 0 && root != tlog::empty_root() {
        return Err(Refusal::Inconsistent(
            "a checkpoint of size 0 must have the empty tree's root (SHA-256 of nothing)".into(),
        ));
    }
    if request.old == 0 {
        return if request.proof.is_empty() {
            Ok(())
        } else {
            Err(Refusal::Inconsistent(
                "old is 0: send no consistency proof lines (the empty tree is consistent with any tree)".into(),
            ))
        };
    }
    if size == last && root != last_root {
        return Err(Refusal::Inconsistent(format!(
            "the checkpoint has the size {size} this witness cosigned last with another root: the log forked"
        )));
    }
    verify_consistency(last, &last_root, size, &root, &request.proof).map_err(|e| {
        Refusal::Inconsistent(format!(
            "the consistency proof from size {last} to {size} does not hold: {e}"
        ))
    })
}

/// Reads a request body: `old <size>`, the proof lines, a blank line, the signed note.
fn parse(body: &[u8]) -> Result<Request, Refusal> {
    let malformed = |m: &str| Refusal::Malformed(m.to_owned());
    let text = std::str::from_utf8(body).map_err(|_| malformed("the body is not UTF-8"))?;
    let (first, mut rest) = text
        .split_once('\n')
        .ok_or_else(|| malformed("the body must start with an \"old <size>\" line"))?;
    let old = first
        .strip_prefix("old ")
        .and_then(parse_size)
        .ok_or_else(|| {
            malformed(
                "the first line must be \"old <size>\", the size in decimal without leading zeros",
            )
        })?;
    let mut proof = Vec::new();
    loop {
        let (line, after) = rest.split_once('\n').ok_or_else(|| {
            malformed("the proof lines must be followed by a blank line, then the checkpoint")
        })?;
        rest = after;
        if line.is_empty() {
            break;
        }
        if proof.len() == MAX_PROOF_LINES {
            return Err(malformed("a consistency proof has at most 63 lines"));
        }
        let hash = LogHash::from_base64(line).ok_or_else(|| {
            Refusal::Malformed(format!(
                "proof line {} is not a 32-byte hash in standard base64",
                proof.len() + 1
            ))
        })?;
        proof.push(hash);
    }
    let note = SignedNote::parse(rest)
        .map_err(|e| Refusal::Malformed(format!("the checkpoint is not a signed note: {e}")))?;
    let checkpoint = Checkpoint::parse(note.text())
        .map_err(|e| Refusal::Malformed(format!("the note is not a checkpoint: {e}")))?;
    Ok(Request {
        old,
        proof,
        note,
        checkpoint,
    })
}

/// A size in decimal without leading zeros (`0` alone).
fn parse_size(text: &str) -> Option<u64> {
    let canonical =
        text == "0" || (!text.starts_with('0') && text.bytes().all(|b| b.is_ascii_digit()));
    text.parse().ok().filter(|_| canonical)
}

/// The lower-case hex SHA-256 of `text`.
pub fn hex_sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;
