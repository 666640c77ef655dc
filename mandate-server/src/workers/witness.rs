//! Submitting the decision log's checkpoints to witnesses (c2sp.org/tlog-witness), for the
//! checkpoint worker ([`super::checkpoint`]): each new checkpoint, once durable and before
//! it is shown, is posted to every witness the operator configured (`serve --witness`),
//! with the consistency proof from the size the witness cosigned last; each cosignature
//! that comes back is checked with the witness's verifier key and added to the note
//! (c2sp.org/tlog-cosignature), which readers are then shown.
//!
//! A witness that is down, slow or refusing never stops the log: the checkpoint is shown
//! with the cosignatures obtained. A witness that has cosigned a larger tree of the log
//! than the one signed now, or a tree the log's does not extend, cannot be answered with a
//! proof: the database was rolled back or the log forked. That is said at error level and
//! counted ([`crate::telemetry::WITNESS_SUBMISSIONS`], outcome `rolled_back` or `forked`).
//!
//! What an answer means is [`judge`], a pure function returning what to do next; the
//! [`Witnesses`] shell sends the requests and acts on it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mandate_protocol::tlog::{LogHash, SignedNote, WitnessKey, WitnessPolicy};

/// How long a witness has to answer one request.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// How long a witness that could not be reached (no connection, no answer in
/// [`TIMEOUT`]) is left out: the worker extends logs one at a time, so a witness that hangs
/// must not cost every log's round the timeout.
pub const BACKOFF: Duration = Duration::from_secs(30);

/// The largest answer read from a witness.
const MAX_ANSWER: usize = 16 * 1024;

/// A witness to submit checkpoints to: where it listens and its verifier key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessTarget {
    url: url::Url,
    key: WitnessKey,
}

impl WitnessTarget {
    /// Reads `<URL>=<verifier key>`: an `http` or `https` URL (the witness's
    /// `/add-checkpoint` is under it) and the witness's C2SP verifier key (type `0x04`).
    pub fn parse(entry: &str) -> Result<Self, String> {
        let Some((url, vkey)) = entry.split_once('=') else {
            return Err(format!(
                "{:?} is not <URL>=<verifier key>",
                entry.chars().take(80).collect::<String>()
            ));
        };
        let url = url::Url::parse(url.trim())
            .map_err(|e| format!("the witness URL of {:?}: {e}", vkey.trim()))?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(format!(
                "the witness URL {} must be http:// or https:// with a host",
                shown_url(&url)
            ));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(format!(
                "the witness URL {} must have no query or fragment",
                shown_url(&url)
            ));
        }
        let key = WitnessKey::from_verifier_key(vkey.trim())
            .map_err(|e| format!("the witness at {}: {e}", shown_url(&url)))?;
        Ok(Self { url, key })
    }

    /// The witness's name (its verifier key's).
    pub fn name(&self) -> &str {
        self.key.name()
    }

    /// Where its requests go: `<URL>/add-checkpoint`.
    fn endpoint(&self) -> String {
        format!("{}/add-checkpoint", self.url.as_str().trim_end_matches('/'))
    }
}

/// A URL as logged: without user name, password, query or fragment.
fn shown_url(url: &url::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

/// Refuses a list that names one witness twice (by name and key id, or by key).
pub fn check_targets(targets: &[WitnessTarget]) -> Result<(), String> {
    if targets.is_empty() {
        return Ok(());
    }
    let keys = targets.iter().map(|t| t.key.clone()).collect();
    WitnessPolicy::new(keys, 1)
        .map(|_| ())
        .map_err(|e| format!("--witness: {e}"))
}

/// What to do after a witness's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// It cosigned: these lines (each ending in a newline) verify with its key.
    Cosigned(String),
    /// It cosigned another size last (409): send again, with the proof from that size.
    Retry {
        /// The size it cosigned last.
        old: u64,
    },
    /// It cosigned a larger tree of the log than the checkpoint's: the log was rolled
    /// back (or forked) under it.
    RolledBack {
        /// The size it cosigned last.
        witness_size: u64,
    },
    /// It cosigned a tree the checkpoint's does not extend (422): a fork.
    Forked {
        /// What it said.
        why: String,
    },
    /// Another failure: said, and tried again with the next checkpoint.
    Failed(String),
}

/// What the answer (`status`, `body`) of `target` to the checkpoint `note` of `size`
/// leaves, sent with `old` (`retried`: the second request), means.
pub fn judge(
    target: &WitnessTarget,
    note: &str,
    size: u64,
    retried: bool,
    status: u16,
    body: &str,
) -> Next {
    let said = || body.trim().chars().take(300).collect::<String>();
    match status {
        200 => cosignatures(&target.key, note, body),
        409 => match body.trim().parse::<u64>() {
            Ok(witness_size) if witness_size > size => Next::RolledBack { witness_size },
            Ok(_) if retried => Next::Failed(format!(
                "answered 409 ({}) again after a proof from the size it gave",
                said()
            )),
            Ok(old) => Next::Retry { old },
            Err(_) => Next::Failed(format!("answered 409 without a size: {:?}", said())),
        },
        422 => Next::Forked { why: said() },
        _ => Next::Failed(format!("answered {status}: {}", said())),
    }
}

/// The lines of a 200's `body` that are cosignatures of `key` over `note`, or why none is.
fn cosignatures(key: &WitnessKey, note: &str, body: &str) -> Next {
    let Ok(policy) = WitnessPolicy::new(vec![key.clone()], 1) else {
        return Next::Failed("no policy of one witness".into());
    };
    let mut lines = String::new();
    for line in body.lines().filter(|l| !l.is_empty()) {
        let line = format!("{line}\n");
        // Only its own lines are kept, each checked alone over the checkpoint's text.
        if policy.check(&format!("{note}{line}")).is_ok() {
            lines.push_str(&line);
        }
    }
    if lines.is_empty() {
        return Next::Failed(
            "answered 200 without a cosignature that verifies with its verifier key".into(),
        );
    }
    Next::Cosigned(lines)
}

/// `note` with `lines` added as further signature lines, if the result is still a valid
/// signed note (else `note` as it is).
fn with_lines(note: &str, lines: &str) -> String {
    let cosigned = format!("{note}{lines}");
    if SignedNote::parse(&cosigned).is_ok() {
        cosigned
    } else {
        note.to_owned()
    }
}

/// A checkpoint being submitted: its log, its signed note and its size.
#[derive(Clone, Copy)]
struct Submitted<'a> {
    origin: &'a str,
    note: &'a str,
    size: u64,
}

/// The witnesses the service submits its checkpoints to, and the size each cosigned last
/// of each log, as this process believes it.
pub struct Witnesses {
    targets: Vec<WitnessTarget>,
    client: reqwest::Client,
    cosigned: Mutex<HashMap<(usize, String), u64>>,
    /// The witnesses left out until then, having not been reached ([`BACKOFF`]).
    unreached: Mutex<HashMap<usize, Instant>>,
}

impl Witnesses {
    /// Submitting to `targets` (none: checkpoints are shown as signed).
    pub fn new(targets: Vec<WitnessTarget>) -> reqwest::Result<Self> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            .user_agent(concat!("mandate-log/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self {
            targets,
            client,
            cosigned: Mutex::default(),
            unreached: Mutex::default(),
        })
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// `note`, the checkpoint of `size` leaves of `origin`, with the cosignatures of every
    /// witness that gave one; `previous` is the log's checkpoint before it (what a witness
    /// that cosigned it cosigned last) and `proof` gives the consistency proof from a size.
    pub async fn cosign<F, Fut>(
        &self,
        origin: &str,
        note: &str,
        size: u64,
        previous: Option<(&str, u64)>,
        proof: F,
    ) -> String
    where
        F: Fn(u64) -> Fut,
        Fut: Future<Output = Result<Vec<LogHash>, String>>,
    {
        let checkpoint = Submitted { origin, note, size };
        let submissions = self.targets.iter().enumerate().map(|(i, target)| {
            let old = self.believed(i, target, origin, previous);
            self.submit(i, target, checkpoint, old, &proof)
        });
        let lines: String = futures_util::future::join_all(submissions)
            .await
            .into_iter()
            .flatten()
            .collect();
        with_lines(note, &lines)
    }

    /// The size `target` cosigned last of `origin`: as it answered this process, else the
    /// previous checkpoint's if that carries its cosignature, else 0 (a 409 then tells).
    fn believed(
        &self,
        i: usize,
        target: &WitnessTarget,
        origin: &str,
        previous: Option<(&str, u64)>,
    ) -> u64 {
        let known = self
            .cosigned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(i, origin.to_owned()))
            .copied();
        known.unwrap_or_else(|| match previous {
            Some((note, size)) => match WitnessPolicy::new(vec![target.key.clone()], 1) {
                Ok(policy) if policy.check(note).is_ok() => size,
                _ => 0,
            },
            None => 0,
        })
    }

    /// Whether witness `i` is left out, not reached a moment ago.
    fn left_out(&self, i: usize) -> bool {
        let mut unreached = self.unreached.lock().unwrap_or_else(|p| p.into_inner());
        match unreached.get(&i) {
            Some(until) if Instant::now() < *until => true,
            Some(_) => {
                unreached.remove(&i);
                false
            }
            None => false,
        }
    }

    fn remember(&self, i: usize, origin: &str, size: u64) {
        self.cosigned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((i, origin.to_owned()), size);
    }

    /// Submits to witness `i`, retrying once from the size a 409 gives: its lines, if it
    /// cosigned.
    async fn submit<F, Fut>(
        &self,
        i: usize,
        target: &WitnessTarget,
        checkpoint: Submitted<'_>,
        believed: u64,
        proof: &F,
    ) -> Option<String>
    where
        F: Fn(u64) -> Fut,
        Fut: Future<Output = Result<Vec<LogHash>, String>>,
    {
        let Submitted { origin, note, size } = checkpoint;
        let name = target.name();
        let url = shown_url(&target.url);
        if self.left_out(i) {
            count(name, "skipped");
            return None;
        }
        // A size above the checkpoint's cannot be sent as `old` (400): the witness is asked
        // from 0 and its 409 says where it stands.
        let mut old = if believed > size { 0 } else { believed };
        let mut retried = false;
        loop {
            // The round trip counts the request and the witness's answer, not the proof.
            let sent = match proof_from(old, proof).await {
                Err(why) => Err(why),
                Ok(hashes) => Ok((Instant::now(), hashes)),
            };
            let next = match sent {
                Err(why) => Next::Failed(why),
                Ok((sent, hashes)) => match self.post(target, note, old, &hashes).await {
                    Ok((status, body)) => {
                        metrics::histogram!(crate::telemetry::WITNESS_ROUND_TRIP, "witness" => name.to_owned())
                            .record(sent.elapsed().as_secs_f64());
                        judge(target, note, size, retried, status, &body)
                    }
                    Err(why) => {
                        self.unreached
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(i, Instant::now() + BACKOFF);
                        Next::Failed(format!("{why}; it is left out for {} s", BACKOFF.as_secs()))
                    }
                },
            };
            let outcome = match next {
                Next::Cosigned(lines) => {
                    self.remember(i, origin, size);
                    count(name, "cosigned");
                    tracing::debug!("witness {name} cosigned {origin} at {size}");
                    return Some(lines);
                }
                Next::Retry { old: theirs } => {
                    self.remember(i, origin, theirs);
                    (old, retried) = (theirs, true);
                    continue;
                }
                Next::RolledBack { witness_size } => {
                    self.remember(i, origin, witness_size);
                    tracing::error!(
                        witness = name,
                        origin,
                        log_size = size,
                        witness_size,
                        "witness {name} ({url}) refused the checkpoint of {origin} at size \
                         {size}: it has cosigned the log at size {witness_size}. The witness \
                         has cosigned a larger log: this database may have been rolled back \
                         or forked; the checkpoint is shown without its cosignature"
                    );
                    "rolled_back"
                }
                Next::Forked { why } => {
                    tracing::error!(
                        witness = name,
                        origin,
                        log_size = size,
                        witness_size = old,
                        "witness {name} ({url}) refused the checkpoint of {origin} at size \
                         {size} as not extending the one it cosigned at size {old} ({why}). \
                         The witness has cosigned a different log: this database may have \
                         been rolled back or forked; the checkpoint is shown without its \
                         cosignature"
                    );
                    "forked"
                }
                Next::Failed(why) => {
                    tracing::warn!(
                        "witness {name} ({url}) did not cosign the checkpoint of {origin} at \
                         size {size}: {why}; it is shown without this cosignature"
                    );
                    "failed"
                }
            };
            count(name, outcome);
            return None;
        }
    }

    /// Posts the checkpoint with `old` and the proof from it: the status and the body, or
    /// why there was no answer.
    async fn post(
        &self,
        target: &WitnessTarget,
        note: &str,
        old: u64,
        hashes: &[LogHash],
    ) -> Result<(u16, String), String> {
        let mut body = format!("old {old}\n");
        for hash in hashes {
            body.push_str(&format!("{hash}\n"));
        }
        body.push('\n');
        body.push_str(note);
        let response = self
            .client
            .post(target.endpoint())
            .body(body)
            .send()
            .await
            .map_err(|e| super::delivery::describe(&e))?;
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| super::delivery::describe(&e))?;
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_ANSWER)]).into_owned();
        Ok((status, text))
    }
}

/// The consistency proof from `old` (none from 0: the witness has nothing to extend).
async fn proof_from<F, Fut>(old: u64, proof: &F) -> Result<Vec<LogHash>, String>
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = Result<Vec<LogHash>, String>>,
{
    if old == 0 {
        Ok(Vec::new())
    } else {
        proof(old).await
    }
}

/// Counts one submission's outcome.
fn count(witness: &str, outcome: &'static str) {
    metrics::counter!(
        crate::telemetry::WITNESS_SUBMISSIONS,
        "witness" => witness.to_owned(),
        "outcome" => outcome
    )
    .increment(1);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
