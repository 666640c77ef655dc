//! The checkpoint worker: appends decisions already stored to their organization's log
//! and signs a checkpoint of each log that grew (docs/audit.md). Off the decision path:
//! nothing here runs in a decision's transaction or delays its answer.
//!
//! Every interval (`--log-checkpoint-interval`, 1 s by default) it takes the logs this
//! process decided in since ([`News`](crate::model::news::News)), and, when it sweeps
//! (`workers::Sweeper`, every [`SWEEP_EVERY`](super::SWEEP_EVERY)), asks the store which logs
//! have decisions not yet logged and no checkpoint signed within two intervals (another
//! process's, that died before logging them); and
//! for each, one at a time:
//!
//! 0. leaves for a later round a log of its news that is quiet (fewer than
//!    `--log-quiet-below` decisions waiting, [`QUIET_BELOW`] by default) and whose
//!    checkpoint was signed within the last [`QUIET_HOLD`] intervals, having read only its
//!    head ([`Quiet`]): a log deciding a few a second is extended every few seconds with all
//!    of them rather than every round with a few, each round costing the database a log's
//!    reads and writes whatever it appends. A log whose recent checkpoint this process
//!    already knows (it read the head or signed it) and to which it committed fewer than
//!    that many decisions since is left without even that read ([`Quiet::holds`]);
//!
//! 1. reads the log's head, its tree's edge and the seqs and ids of the decisions after
//!    the head up to the readers' watermark (at most [`BATCH`]), and checks that the stored
//!    tree still has the stored checkpoint's root (otherwise the tables were changed under
//!    it: it stops on that log with an error and never signs);
//! 2. takes the tokens this process's decision service answered and left in memory
//!    ([`Answered`](crate::model::leaves::Answered)) as they were signed, and reads the
//!    other decisions' rows, rebuilds their tokens and verifies each before it is appended
//!    ([`super::log_verify`]): by the leaf tag stored with the row, or else by its
//!    signature against the service's verdict keys and its decision.
//!    The first decision refused stops the run there: it is logged at error level and
//!    counted (`mandate_log_refused_total`), and the log waits before it, every round,
//!    until its row is restored;
//! 3. appends the leaf hashes to the edge (the core's `TreeEdge`), collecting
//!    the leaves and the tiles the appends complete, and signs a checkpoint of the new
//!    size with every log key of the environment;
//! 4. has the store write all of it, the tokens with their leaves, in one transaction,
//!    only if the log is still where it was read (another process may have logged it
//!    meanwhile);
//! 5. once that commit is durable, submits the checkpoint to the witnesses the operator
//!    configured ([`super::witness`]) and shows it to readers with the cosignatures that
//!    came back (a witness that is down or refuses never holds the log: the checkpoint is
//!    shown without its cosignature). A checkpoint no reader saw may be lost to a crash; it
//!    is never a fork, since the tree is a function of the durable decisions in seq order.
//!
//! A log never has two checkpoints of one size with different roots: leaves are only
//! appended, from the decisions in seq order, and the size only grows.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mandate_core::{Checkpoint, DecisionId, Signer};
use mandate_protocol::tlog::LogHash;
use mandate_protocol::tlog::{self, SignedNote, TileId, TreeEdge};
use tokio::task::JoinHandle;

use super::Context;
use super::log_verify;
use super::witness::Witnesses;
use crate::clock::ms;
use crate::model::Env;
use crate::model::leaves::Token;
use crate::storage::StorageError;
use crate::storage::log::{CheckpointShow, LogAppend, LogTail, Quiet};

/// The default time between two rounds.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// Decisions appended to one log a run, at most.
pub const BATCH: i64 = 10_000;

/// Logs looked at a round, at most.
const LOGS_A_ROUND: i64 = 1_000;

/// Fewer decisions waiting than this, a log whose checkpoint was signed within the last
/// [`QUIET_HOLD`] intervals waits for a later round ([`Quiet`]): a log deciding a few a
/// second is then extended every few seconds with all of them, instead of every round with
/// each round's few, which costs as many reads and writes a round as a busy log's.
pub const QUIET_BELOW: i64 = 32;

/// Intervals a quiet log waits after its newest checkpoint was signed.
pub const QUIET_HOLD: i64 = 2;

/// Runs of decisions whose rows a round reads one by one, at most; past it, one read
/// from the first decision missing a hash to the last.
const RUNS_READ: usize = 16;

/// A decision to log: its seq, its id and its leaf hash (`None`: stored before tokens
/// were kept, so it has none).
type Leaf = (i64, DecisionId, Option<LogHash>);

/// Why a log was not extended.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// No log key is loaded for the environment.
    #[error("no log key is loaded for {}", .0.as_str())]
    NoLogKey(Env),
    /// The stored tree or head is not what was checkpointed: the tables were changed.
    #[error("the log {origin} was changed under the worker, which stops logging it: {why}")]
    Tampered {
        /// The log.
        origin: String,
        /// What does not hold.
        why: String,
    },
    /// Signing failed.
    #[error("signing a checkpoint of {origin}: {why}")]
    Signing {
        /// The log.
        origin: String,
        /// Why.
        why: String,
    },
}

/// The log's name: the verdicts URL without its scheme, then `/log/<org>/<env>`.
pub fn origin(issuer: &str, org: &str, env: Env) -> String {
    let host = issuer
        .split_once("://")
        .map_or(issuer, |(_, rest)| rest)
        .trim_end_matches('/');
    format!("{host}/log/{org}/{}", env.as_str())
}

/// A log appended to in a round: its position, origin and tail, and the new size,
/// checkpoint and signing time of its append.
type Appended = (usize, String, LogTail, (u64, Option<String>, i64));

/// What a log's tail and decisions give to append ([`Checkpointer::planned`]).
enum Planned {
    /// No leaf: its stored checkpoint may still be shown.
    Nothing,
    /// The append, and whether its batch was full.
    Append(LogAppend, bool),
}

/// What extending one log did.
struct Extended {
    /// It moved, or a checkpoint was shown.
    moved: bool,
    /// Its batch was full: more decisions may be waiting.
    full: bool,
    /// It was left for a later round: to the process that signed it within the
    /// interval, or to wait as quiet.
    left: bool,
}

/// The checkpoint worker.
pub struct Checkpointer {
    context: Context,
    interval: Duration,
    batch: i64,
    sweep: std::sync::Mutex<super::SweepTimer>,
    witnesses: Option<Arc<Witnesses>>,
    /// Fewer decisions waiting than this, a recently signed log waits ([`QUIET_BELOW`];
    /// 0: none waits).
    quiet_below: i64,
    /// When this process last signed each log's checkpoint that it stored.
    signed: std::sync::Mutex<HashMap<(String, Env), i64>>,
    /// When each log's newest checkpoint was signed, as this process last read its head or
    /// signed it: a quiet log of its news whose checkpoint it knows is recent waits without
    /// a read ([`Quiet::holds`]).
    seen_signed: std::sync::Mutex<HashMap<(String, Env), i64>>,
    /// The round before was behind: this one leaves no log to others.
    catching_up: std::sync::atomic::AtomicBool,
}

/// Whether a log whose checkpoint was signed at `signed_ms` is left, at `now_ms`, to the
/// process that signed it: it was signed within the last `interval`, by another process
/// (`own_ms`: when this one last signed it), so that process's next round logs what came
/// since, this process's decisions too. One signed more than an interval ahead of this
/// clock is not left: a process whose clock is wrong holds no log.
pub fn left_to_others(
    now_ms: i64,
    interval: Duration,
    signed_ms: i64,
    own_ms: Option<i64>,
) -> bool {
    let interval = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
    own_ms != Some(signed_ms)
        && signed_ms > now_ms.saturating_sub(interval)
        && signed_ms <= now_ms.saturating_add(interval)
}

/// What one round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// How many logs moved.
    pub moved: usize,
    /// Whether a log is still behind: a batch came back full, or more logs had news than
    /// a round takes. The worker then starts the next round at once instead of waiting.
    pub behind: bool,
}

impl Checkpointer {
    /// A worker that runs a round every `interval`, logging at most `batch` decisions of
    /// a log a round ([`BATCH`] in service).
    pub fn new(context: Context, interval: Duration, batch: i64) -> Self {
        Self {
            context,
            interval,
            batch: batch.max(1),
            sweep: Default::default(),
            witnesses: None,
            quiet_below: QUIET_BELOW,
            signed: Default::default(),
            seen_signed: Default::default(),
            catching_up: Default::default(),
        }
    }

    /// The same worker, submitting each new checkpoint to `witnesses` before showing it.
    #[must_use]
    pub fn with_witnesses(mut self, witnesses: Arc<Witnesses>) -> Self {
        self.witnesses = (!witnesses.is_empty()).then_some(witnesses);
        self
    }

    /// One round: every log with news extended once: the logs this process decided in
    /// since the last round, and, when it sweeps, every log with decisions not yet logged.
    pub async fn round(&self) -> Round {
        let mut logs: Vec<(String, Env)> = Vec::new();
        let mut swept: std::collections::HashSet<(String, Env)> = Default::default();
        let mut behind = false;
        let sweeping = self
            .sweep
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .due(self.context.sweeper.sweeps());
        if sweeping {
            // Logs no live process is extending: none signed them within two intervals.
            let interval = i64::try_from(self.interval.as_millis()).unwrap_or(i64::MAX);
            let idle_since = ms(self.context.now()).saturating_sub(interval.saturating_mul(2));
            match self
                .context
                .store
                .logs_with_news(LOGS_A_ROUND, idle_since)
                .await
            {
                Ok(found) => {
                    behind = found.len() as i64 >= LOGS_A_ROUND;
                    swept.extend(found.iter().cloned());
                    logs.extend(found);
                }
                Err(e) => tracing::error!("decision log: finding the logs with news: {e}"),
            }
        }
        let mut decided: HashMap<(String, Env), u64> = HashMap::new();
        for ((org, env), decisions) in self.context.news.take_logs() {
            logs.push((org.to_string(), env));
            decided.insert((org.to_string(), env), decisions);
        }
        let mut seen = std::collections::HashSet::new();
        logs.retain(|log| seen.insert(log.clone()));
        let mut round = Round { moved: 0, behind };
        let catching_up = self.catching_up.swap(false, Ordering::Relaxed);
        // A log of this process's news may be left to another process that signed it
        // within the interval, or wait as quiet; a log the sweep found (its decisions may
        // be no live process's news) never is, nor any while this process catches up.
        let leave: Vec<bool> = logs
            .iter()
            .map(|log| !catching_up && !swept.contains(log))
            .collect();
        // A quiet log whose recent checkpoint this process knows waits without a read, named
        // again with its decisions for the next round: a log deciding a few a second is
        // read once a hold, not every round.
        let quiet = self.quiet();
        let (logs, leave): (Vec<(String, Env)>, Vec<bool>) = {
            let seen_signed = self.seen_signed.lock().unwrap_or_else(|p| p.into_inner());
            logs.into_iter()
                .zip(leave)
                .filter(|(log, leave)| {
                    let decisions = decided.get(log).copied().unwrap_or(0);
                    let held = *leave && quiet.holds(seen_signed.get(log).copied(), decisions);
                    if held {
                        self.context
                            .news
                            .again(&Arc::from(log.0.as_str()), log.1, decisions);
                    }
                    !held
                })
                .unzip()
        };
        if self.context.store.logs_at_once() && !logs.is_empty() {
            match self.extend_all(&logs, &leave).await {
                Ok(extended) => {
                    for ((org, env), e) in logs.iter().zip(extended) {
                        round.moved += usize::from(e.moved);
                        round.behind |= e.moved && e.full;
                        if e.moved || e.left {
                            // Looked at again next round: what a watermark held back, a
                            // batch left, or the process it was left to did not log.
                            self.context.news.again(&Arc::from(org.as_str()), *env, 0);
                        }
                    }
                    self.catching_up.store(round.behind, Ordering::Relaxed);
                    return round;
                }
                // One log at a time, below: a log the store cannot serve holds up no other.
                Err(e) => tracing::error!("decision log: a round over {} logs: {e}", logs.len()),
            }
        }
        for ((org, env), leave) in logs.into_iter().zip(leave) {
            match self.extend(&org, env, leave).await {
                Ok(Extended { moved, full, left }) => {
                    round.moved += usize::from(moved);
                    round.behind |= moved && full;
                    if moved || left {
                        // Looked at again next round: what a watermark held back, a
                        // batch left, or the process it was left to did not log.
                        self.context.news.again(&Arc::from(org.as_str()), env, 0);
                    }
                }
                Err(e) => tracing::error!("decision log of {org} ({}): {e}", env.as_str()),
            }
        }
        self.catching_up.store(round.behind, Ordering::Relaxed);
        round
    }

    /// The same worker, letting a log with fewer than `below` decisions waiting and a
    /// checkpoint signed within the last [`QUIET_HOLD`] intervals wait (0: none waits, so
    /// every log with news is extended every round).
    #[must_use]
    pub fn with_quiet_below(mut self, below: i64) -> Self {
        self.quiet_below = below.max(0);
        self
    }

    /// How a log that may wait is read this round: it waits if its checkpoint was signed
    /// within the last [`QUIET_HOLD`] intervals (not ahead of this clock by more than one)
    /// and fewer than `quiet_below` decisions wait.
    fn quiet(&self) -> Quiet {
        let now = ms(self.context.now());
        let interval = i64::try_from(self.interval.as_millis()).unwrap_or(i64::MAX);
        Quiet {
            signed_after_ms: now.saturating_sub(interval.saturating_mul(QUIET_HOLD)),
            signed_until_ms: now.saturating_add(interval),
            fewer_than: self.quiet_below,
        }
    }

    /// Runs a round every interval until the task is aborted; while a log is behind (a
    /// round's batch came back full) the next round starts at once, so that a log keeps
    /// up with an organization deciding more than a batch an interval.
    pub fn start(self) -> JoinHandle<()> {
        tokio::spawn(async move {
            let mut behind = false;
            loop {
                if !behind {
                    tokio::time::sleep(self.interval).await;
                }
                behind = self.round().await.behind;
            }
        })
    }

    /// Whether the log of `tail` is left to the process that signed its checkpoint
    /// within the interval ([`left_to_others`]).
    fn left(&self, org: &str, env: Env, tail: &LogTail) -> bool {
        let Some(signed_ms) = tail.head.signed_ms else {
            return false;
        };
        let own = self
            .signed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(org.to_owned(), env))
            .copied();
        left_to_others(ms(self.context.now()), self.interval, signed_ms, own)
    }

    /// Keeps `signed_ms` as when this process last signed the log of `org` in `env`.
    fn signed_at(&self, org: &str, env: Env, signed_ms: i64) {
        self.signed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((org.to_owned(), env), signed_ms);
        self.seen(org, env, Some(signed_ms));
    }

    /// Keeps `signed_ms`, read from the head of the log of `org` in `env` or signed here,
    /// as when its newest checkpoint was signed, unless a later one is known.
    fn seen(&self, org: &str, env: Env, signed_ms: Option<i64>) {
        let Some(signed_ms) = signed_ms else {
            return;
        };
        let mut seen = self.seen_signed.lock().unwrap_or_else(|p| p.into_inner());
        let at = seen.entry((org.to_owned(), env)).or_insert(signed_ms);
        *at = (*at).max(signed_ms);
    }

    /// Extends one log (see the module's steps): whether it moved or a checkpoint was
    /// shown, and whether its batch was full (more may be waiting).
    async fn extend(&self, org: &str, env: Env, leave: bool) -> Result<Extended, CheckpointError> {
        let store = &self.context.store;
        let quiet = leave.then(|| self.quiet());
        let tail = store.log_tail(org, env, self.batch, quiet).await?;
        self.seen(org, env, tail.head.signed_ms);
        if tail.waiting || (leave && !tail.decisions.is_empty() && self.left(org, env, &tail)) {
            return Ok(Extended {
                moved: false,
                full: false,
                left: true,
            });
        }
        let origin = origin(&self.context.issuer, org, env);
        if tail.decisions.is_empty() {
            let moved = self.show_stored(org, env, &tail).await?;
            return Ok(Extended {
                moved,
                full: false,
                left: false,
            });
        }
        check_head(&tail, &origin)?;
        let (kept, missing) = self.kept(&tail.decisions);
        let read = if missing.is_empty() {
            Vec::new()
        } else {
            let ranges = ranges_of(&tail.decisions, &missing);
            store.log_tokens(org, env, ranges).await?
        };
        let (leaves, tokens) = self
            .leaves_from(env, &tail.decisions, kept, read, &origin)
            .await?;
        let (append, full) = match self.planned(org, env, &tail, leaves, tokens, &origin)? {
            Planned::Nothing => {
                let moved = self.show_stored(org, env, &tail).await?;
                return Ok(Extended {
                    moved,
                    full: false,
                    left: false,
                });
            }
            Planned::Append(append, full) => (append, full),
        };
        let (size, checkpoint, signed_ms) =
            (append.size, append.checkpoint.clone(), append.signed_ms);
        if !store.append_log(append).await? {
            return Ok(Extended {
                moved: false,
                full,
                left: false,
            });
        }
        self.signed_at(org, env, signed_ms);
        if let Some(s) = self
            .to_show(org, env, &origin, &tail, size, checkpoint)
            .await
        {
            store
                .show_checkpoint(&s.org, s.env, s.size, &s.signed, &s.note)
                .await?;
        }
        Ok(Extended {
            moved: true,
            full,
            left: false,
        })
    }

    /// What to append to a log from its tail and the leaves and tokens of its decisions
    /// ([`Checkpointer::leaves_from`]): nothing, or the append, its checkpoint signed, and
    /// whether its batch was full (more may be waiting).
    fn planned(
        &self,
        org: &str,
        env: Env,
        tail: &LogTail,
        leaves: Vec<Leaf>,
        tokens: Vec<String>,
        origin: &str,
    ) -> Result<Planned, CheckpointError> {
        // A refusal cuts the run short: nothing after it waits in this batch.
        let full = leaves.len() == tail.decisions.len() && leaves.len() as i64 >= self.batch;
        if leaves.is_empty() {
            return Ok(Planned::Nothing);
        }
        let grown = grow(tail, &leaves, origin)?;
        let checkpoint = if grown.edge.size() > tail.head.size {
            let signers = self.signers(env)?;
            Some(sign(origin, &grown.edge, &signers)?)
        } else {
            tail.head.checkpoint.clone()
        };
        let append = LogAppend {
            org: org.to_owned(),
            env,
            from: (tail.head.size, tail.head.scanned_seq),
            size: grown.edge.size(),
            scanned_seq: grown.scanned_seq,
            leaves: grown.leaves,
            tokens,
            tiles: grown.tiles,
            checkpoint,
            signed_ms: ms(self.context.now()),
        };
        Ok(Planned::Append(append, full))
    }

    /// Extends every one of `logs` (see the module's steps) with each step one call of the
    /// store for all of them ([`LogStore::logs_at_once`](crate::storage::log::LogStore)):
    /// what [`Checkpointer::extend`] did for each. A log that cannot be extended (its tree
    /// changed, no log key) is said at error level and left where it is; a failure of the
    /// store fails the round.
    async fn extend_all(
        &self,
        logs: &[(String, Env)],
        leave: &[bool],
    ) -> Result<Vec<Extended>, StorageError> {
        let store = &self.context.store;
        let quiet = self.quiet();
        let reads = logs
            .iter()
            .zip(leave)
            .map(|((org, env), &leave)| (org.clone(), *env, leave.then_some(quiet)))
            .collect();
        let tails = store.log_tails(reads, self.batch).await?;
        for ((org, env), tail) in logs.iter().zip(&tails) {
            self.seen(org, *env, tail.head.signed_ms);
        }
        let mut outcome: Vec<Extended> = (0..logs.len())
            .map(|_| Extended {
                moved: false,
                full: false,
                left: false,
            })
            .collect();
        // Each log's tokens: those kept in memory, and the ranges of the others to read.
        let mut planned = Vec::new();
        let mut reads = Vec::new();
        for (i, ((org, env), tail)) in logs.iter().zip(tails).enumerate() {
            if tail.waiting
                || (leave[i] && !tail.decisions.is_empty() && self.left(org, *env, &tail))
            {
                outcome[i].left = true;
                continue;
            }
            let origin = origin(&self.context.issuer, org, *env);
            if !tail.decisions.is_empty()
                && let Err(e) = check_head(&tail, &origin)
            {
                tracing::error!("decision log of {org} ({}): {e}", env.as_str());
                continue;
            }
            let (kept, missing) = self.kept(&tail.decisions);
            if !missing.is_empty() {
                reads.push((org.clone(), *env, ranges_of(&tail.decisions, &missing)));
            }
            planned.push((i, origin, tail, kept, !missing.is_empty()));
        }
        let mut read = store.logs_tokens(reads).await?.into_iter();
        let mut appends = Vec::new();
        let mut shows = Vec::new();
        let mut appended = Vec::new();
        for (i, origin, tail, kept, reads) in planned {
            let (org, env) = (&logs[i].0, logs[i].1);
            if tail.decisions.is_empty() {
                shows.extend(self.stored_show(i, org, env, &tail, &origin).await);
                continue;
            }
            let tokens = if reads {
                read.next().unwrap_or_default()
            } else {
                Vec::new()
            };
            let planned = match self
                .leaves_from(env, &tail.decisions, kept, tokens, &origin)
                .await
                .and_then(|(leaves, tokens)| self.planned(org, env, &tail, leaves, tokens, &origin))
            {
                Ok(planned) => planned,
                Err(e) => {
                    tracing::error!("decision log of {org} ({}): {e}", env.as_str());
                    continue;
                }
            };
            match planned {
                Planned::Nothing => {
                    shows.extend(self.stored_show(i, org, env, &tail, &origin).await);
                }
                Planned::Append(append, full) => {
                    outcome[i].full = full;
                    let signed = (append.size, append.checkpoint.clone(), append.signed_ms);
                    appended.push((i, origin, tail, signed));
                    appends.push(append);
                }
            }
        }
        let written = store.append_logs(appends).await?;
        self.written(logs, appended, written, &mut outcome, &mut shows)
            .await;
        let (at, shows): (Vec<usize>, Vec<CheckpointShow>) = shows.into_iter().unzip();
        for (i, shown) in at.into_iter().zip(store.show_checkpoints(shows).await?) {
            outcome[i].moved |= shown;
        }
        Ok(outcome)
    }

    /// After a round's appends: each written one's log moved, its signing time kept as
    /// this process's, and its new checkpoint (with the witnesses' cosignatures) to show.
    async fn written(
        &self,
        logs: &[(String, Env)],
        appended: Vec<Appended>,
        written: Vec<bool>,
        outcome: &mut [Extended],
        shows: &mut Vec<(usize, CheckpointShow)>,
    ) {
        for ((i, origin, tail, (size, checkpoint, signed_ms)), written) in
            appended.into_iter().zip(written)
        {
            if !written {
                continue;
            }
            outcome[i].moved = true;
            let (org, env) = (&logs[i].0, logs[i].1);
            self.signed_at(org, env, signed_ms);
            if let Some(show) = self
                .to_show(org, env, &origin, &tail, size, checkpoint)
                .await
            {
                shows.push((i, show));
            }
        }
    }

    /// The checkpoint of `size` an append to a log with `tail` stored (its commit durable),
    /// to show readers with the witnesses' cosignatures, if it is bigger than the one shown.
    async fn to_show(
        &self,
        org: &str,
        env: Env,
        origin: &str,
        tail: &LogTail,
        size: u64,
        checkpoint: Option<String>,
    ) -> Option<CheckpointShow> {
        let note = checkpoint.filter(|_| size > tail.head.shown_size)?;
        let previous = tail.head.checkpoint.as_deref().map(|n| (n, tail.head.size));
        let shown = self.cosigned(org, env, origin, &note, size, previous).await;
        Some(CheckpointShow {
            org: org.to_owned(),
            env,
            size,
            signed: note,
            note: shown,
        })
    }

    /// The stored checkpoint of a log with nothing to append, to show if readers are not
    /// shown it yet (its commit is durable: it was read back), with the witnesses'
    /// cosignatures.
    async fn stored_show(
        &self,
        i: usize,
        org: &str,
        env: Env,
        tail: &LogTail,
        origin: &str,
    ) -> Option<(usize, CheckpointShow)> {
        let note = tail.head.checkpoint.as_ref()?;
        if tail.head.shown_size >= tail.head.size {
            return None;
        }
        let size = tail.head.size;
        let shown = self.cosigned(org, env, origin, note, size, None).await;
        Some((
            i,
            CheckpointShow {
                org: org.to_owned(),
                env,
                size,
                signed: note.clone(),
                note: shown,
            },
        ))
    }

    /// Shows the stored checkpoint if readers are not shown it yet (its commit is durable:
    /// it was read back).
    async fn show_stored(
        &self,
        org: &str,
        env: Env,
        tail: &LogTail,
    ) -> Result<bool, CheckpointError> {
        match &tail.head.checkpoint {
            Some(note) if tail.head.shown_size < tail.head.size => {
                let origin = origin(&self.context.issuer, org, env);
                let size = tail.head.size;
                let shown = self.cosigned(org, env, &origin, note, size, None).await;
                Ok(self
                    .context
                    .store
                    .show_checkpoint(org, env, size, note, &shown)
                    .await?)
            }
            _ => Ok(false),
        }
    }

    /// `note`, the durable checkpoint of `size` leaves, with the cosignatures of the
    /// witnesses that gave one (as it is when none is configured); `previous` is the log's
    /// checkpoint before it, and its size.
    async fn cosigned(
        &self,
        org: &str,
        env: Env,
        origin: &str,
        note: &str,
        size: u64,
        previous: Option<(&str, u64)>,
    ) -> String {
        let Some(witnesses) = &self.witnesses else {
            return note.to_owned();
        };
        let store = &self.context.store;
        let proof = |old: u64| async move {
            store
                .log_consistency(org, env, old, size)
                .await
                .map_err(|e| format!("the consistency proof from size {old}: {e}"))
        };
        witnesses.cosign(origin, note, size, previous, proof).await
    }

    /// The token this process answered and kept in memory of each of `decisions`, taken,
    /// and the positions of those it did not keep (to read).
    fn kept(
        &self,
        decisions: &[(i64, DecisionId, Option<LogHash>)],
    ) -> (Vec<Option<Token>>, Vec<usize>) {
        let kept: Vec<Option<Token>> = decisions
            .iter()
            .map(|(_, id, _)| self.context.leaves.take(id))
            .collect();
        let missing: Vec<usize> = (0..decisions.len())
            .filter(|&i| kept[i].is_none())
            .collect();
        (kept, missing)
    }

    /// The leaf of each decision and the tokens of those that have one, in order, from
    /// the tokens `kept` ([`Checkpointer::kept`]) and those `read` of the others. A token
    /// kept is appended as signed; the others were rebuilt from their rows and are verified
    /// ([`log_verify::verify`]): by the leaf tag stored with the row, or by their
    /// signature. The decisions from the first refused on are left out (logged and
    /// counted): the log waits before it.
    async fn leaves_from(
        &self,
        env: Env,
        decisions: &[(i64, DecisionId, Option<LogHash>)],
        kept: Vec<Option<Token>>,
        read: Vec<(i64, Option<String>)>,
        origin: &str,
    ) -> Result<(Vec<Leaf>, Vec<String>), CheckpointError> {
        let missing: Vec<usize> = (0..decisions.len())
            .filter(|&i| kept[i].is_none())
            .collect();
        let mut read: HashMap<i64, Option<String>> = read.into_iter().collect();
        // What each decision's token is: kept (already good), or rebuilt, to verify.
        let mut jobs = Vec::with_capacity(missing.len());
        for &i in &missing {
            let (seq, id, stored) = &decisions[i];
            let Some(token) = read.remove(seq) else {
                return Err(CheckpointError::Tampered {
                    origin: origin.to_owned(),
                    why: format!("decision {id} (seq {seq}) was listed but cannot be read"),
                });
            };
            jobs.push((id.clone(), token, *stored));
        }
        let checked = if jobs.is_empty() {
            Vec::new()
        } else {
            let (keys, tags) = {
                let ring = self.context.keys.read().unwrap_or_else(|p| p.into_inner());
                (ring.verdict_keys.clone(), ring.leaf_tags.clone())
            };
            // ES256 verifications are CPU work: off the async workers.
            tokio::task::spawn_blocking(move || log_verify::verify_run(jobs, &keys, &tags))
                .await
                .map_err(|e| CheckpointError::Tampered {
                    origin: origin.to_owned(),
                    why: format!("verifying tokens: {e}"),
                })?
        };
        let mut checked = checked.into_iter();
        let mut leaves: Vec<Leaf> = Vec::with_capacity(decisions.len());
        let mut logged = Vec::with_capacity(decisions.len());
        let mut kept = kept.into_iter();
        while let Some(token) = kept.next() {
            let (seq, id, _) = &decisions[leaves.len()];
            let result = match token {
                Some((leaf, token)) => Ok(Some((leaf, String::from(token)))),
                // A run of checks stops at its first refusal: nothing is left after it.
                None => match checked.next() {
                    Some(result) => result,
                    None => break,
                },
            };
            match result {
                Ok(None) => leaves.push((*seq, id.clone(), None)),
                Ok(Some((leaf, token))) => {
                    leaves.push((*seq, id.clone(), Some(leaf)));
                    logged.push(token);
                }
                Err(why) => {
                    self.refuse(origin, env, (*seq, id), &why);
                    // The tokens kept of those not logged, kept for the next round.
                    let after = &decisions[leaves.len() + 1..];
                    for ((_, id, _), token) in after.iter().zip(kept.by_ref()) {
                        if let Some(token) = token {
                            self.context.leaves.keep(id.clone(), token);
                        }
                    }
                    break;
                }
            }
        }
        Ok((leaves, logged))
    }

    /// Says that the log of `origin` waits before decision `id`, refused for `why`: at
    /// error level and in `mandate_log_refused_total`, every round it waits.
    fn refuse(
        &self,
        origin: &str,
        env: Env,
        (seq, id): (i64, &DecisionId),
        why: &log_verify::Refused,
    ) {
        tracing::error!(
            decision = %id,
            seq,
            "decision log {origin}: decision {id} (seq {seq}) refused, not appended: {why}; the log waits before it until its row is restored"
        );
        metrics::counter!(crate::telemetry::LOG_REFUSED, "env" => env.as_str()).increment(1);
    }

    fn signers(&self, env: Env) -> Result<Vec<std::sync::Arc<dyn Signer>>, CheckpointError> {
        let signers = self
            .context
            .keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .log
            .signers(env);
        if signers.is_empty() {
            return Err(CheckpointError::NoLogKey(env));
        }
        Ok(signers)
    }
}

/// Checks that the stored tree is the one the stored checkpoint signed: same origin, same
/// size, same root.
fn check_head(tail: &LogTail, origin: &str) -> Result<(), CheckpointError> {
    let tampered = |why: String| CheckpointError::Tampered {
        origin: origin.to_owned(),
        why,
    };
    let Some(note) = &tail.head.checkpoint else {
        if tail.head.size == 0 {
            return Ok(());
        }
        return Err(tampered(format!(
            "the head counts {} leaves but has no checkpoint",
            tail.head.size
        )));
    };
    let note = SignedNote::parse(note).map_err(|e| tampered(format!("its checkpoint: {e}")))?;
    let signed =
        Checkpoint::parse(note.text()).map_err(|e| tampered(format!("its checkpoint: {e}")))?;
    if signed.origin() != origin || signed.size() != tail.head.size {
        return Err(tampered(format!(
            "the head's checkpoint is of {} at {}, the head of {origin} at {}",
            signed.origin(),
            signed.size(),
            tail.head.size
        )));
    }
    if *tlog::root_of(&signed) != tail.edge.root() {
        return Err(tampered(format!(
            "the stored tree of {} leaves has root {}, its checkpoint {}",
            tail.head.size,
            tail.edge.root(),
            tlog::root_of(&signed)
        )));
    }
    Ok(())
}

/// The ranges of seqs (above, below, at most) that hold the decisions at `missing`
/// (positions in `decisions`, in order): one a run of consecutive positions, or, past
/// [`RUNS_READ`] runs, one from the first to the last.
fn ranges_of(
    decisions: &[(i64, DecisionId, Option<LogHash>)],
    missing: &[usize],
) -> Vec<(i64, i64, i64)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &i in missing {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == i => *last = i,
            _ => runs.push((i, i)),
        }
    }
    if runs.len() > RUNS_READ {
        runs = vec![(missing[0], missing[missing.len() - 1])];
    }
    runs.into_iter()
        .map(|(first, last)| {
            let count = i64::try_from(last - first + 1).unwrap_or(i64::MAX);
            (decisions[first].0 - 1, decisions[last].0 + 1, count)
        })
        .collect()
}

/// What appending a tail's decisions gives.
struct Grown {
    edge: TreeEdge,
    scanned_seq: i64,
    leaves: Vec<(u64, i64, LogHash)>,
    tiles: Vec<(TileId, Vec<LogHash>)>,
}

/// Appends the leaves of the tail's decisions to its edge: the new leaves, and the tiles of
/// levels 1 to 7 their appends complete nodes in (whole, as they are to be stored). A
/// decision without a token is left out before the log's first leaf (stored before tokens
/// were kept), and stops the log after it (a changed row).
fn grow(tail: &LogTail, decisions: &[Leaf], origin: &str) -> Result<Grown, CheckpointError> {
    let mut edge = tail.edge.clone();
    let mut tiles: HashMap<TileId, Vec<LogHash>> = tail.tiles.clone();
    let mut touched = BTreeSet::new();
    let mut leaves = Vec::with_capacity(decisions.len());
    let mut scanned_seq = tail.head.scanned_seq;
    let tampered = |why: String| CheckpointError::Tampered {
        origin: origin.to_owned(),
        why,
    };
    for (seq, id, leaf) in decisions {
        let Some(leaf) = *leaf else {
            if edge.size() == 0 {
                scanned_seq = *seq;
                continue;
            }
            return Err(tampered(format!(
                "decision {id} (seq {seq}) has no token but comes after the log's first leaf"
            )));
        };
        let index = edge.size();
        let completed = edge.push(leaf).map_err(|e| tampered(e.to_string()))?;
        for (node, hash) in completed.into_iter().filter(|(n, _)| n.level > 0) {
            let Some((tile, position)) = TileId::slot(node) else {
                continue;
            };
            let row = tiles.entry(tile).or_default();
            if row.len() != position {
                return Err(tampered(format!(
                    "tile {}/{} holds {} hashes where the tree puts its next at {position}",
                    tile.level,
                    tile.index,
                    row.len()
                )));
            }
            row.push(hash);
            touched.insert(tile);
        }
        leaves.push((index, *seq, leaf));
        scanned_seq = *seq;
    }
    let tiles = touched
        .into_iter()
        .filter_map(|tile| tiles.remove(&tile).map(|hashes| (tile, hashes)))
        .collect();
    Ok(Grown {
        edge,
        scanned_seq,
        leaves,
        tiles,
    })
}

/// The checkpoint of `edge` under `origin`, signed by each of `signers` (one note, a
/// signature line each).
fn sign(
    origin: &str,
    edge: &TreeEdge,
    signers: &[std::sync::Arc<dyn Signer>],
) -> Result<String, CheckpointError> {
    let failed = |why: String| CheckpointError::Signing {
        origin: origin.to_owned(),
        why,
    };
    let checkpoint =
        tlog::checkpoint(origin, edge.size(), edge.root()).map_err(|e| failed(e.to_string()))?;
    let mut text = None;
    let mut lines = Vec::with_capacity(signers.len());
    for signer in signers {
        let note = tlog::sign_checkpoint(&checkpoint, signer.as_ref())
            .map_err(|e| failed(e.to_string()))?;
        let note = SignedNote::parse(&note).map_err(|e| failed(e.to_string()))?;
        lines.extend(note.signatures().iter().cloned());
        text = Some(note.text().to_owned());
    }
    let text = text.ok_or_else(|| failed("no log key".into()))?;
    Ok(SignedNote::new(text, lines)
        .map_err(|e| failed(e.to_string()))?
        .to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mandate_core::DecisionId;
    use mandate_protocol::tlog::{TILE_WIDTH, hashes_from_tiles};

    #[test]
    fn the_origin_is_the_verdicts_host_and_path_then_the_log() {
        assert_eq!(
            origin("https://verdicts.example.com/", "org_4F", Env::Live),
            "verdicts.example.com/log/org_4F/live"
        );
        assert_eq!(
            origin("http://127.0.0.1:8081", "org_4F", Env::Sandbox),
            "127.0.0.1:8081/log/org_4F/sandbox"
        );
    }

    fn id(seq: i64) -> DecisionId {
        DecisionId::parse(&format!("dec_{seq:026}")).unwrap()
    }

    fn leaves_of(decisions: Vec<(i64, Option<String>)>) -> Vec<Leaf> {
        decisions
            .into_iter()
            .map(|(seq, token)| (seq, id(seq), token.map(|t| tlog::leaf_hash(t.as_bytes()))))
            .collect()
    }

    #[test]
    fn growing_in_two_runs_stores_the_tiles_one_run_would() {
        let tokens: Vec<(i64, Option<String>)> = (1..=70_000)
            .map(|i| (i, Some(format!("t{i}.a.b"))))
            .collect();
        let empty = LogTail::default();
        let whole = grow(&empty, &leaves_of(tokens.clone()), "o").unwrap();
        let mut first = grow(&empty, &leaves_of(tokens[..40_000].to_vec()), "o").unwrap();
        let mut second_tail = LogTail::default();
        second_tail.head.size = 40_000;
        second_tail.head.scanned_seq = 40_000;
        second_tail.edge = first.edge.clone();
        second_tail.tiles = first
            .tiles
            .drain(..)
            .filter(|(_, h)| h.len() < TILE_WIDTH)
            .collect();
        let second = grow(&second_tail, &leaves_of(tokens[40_000..].to_vec()), "o").unwrap();
        assert_eq!(second.edge.root(), whole.edge.root());
        assert_eq!(second.scanned_seq, 70_000);
        let tiles: HashMap<TileId, Vec<LogHash>> = whole.tiles.into_iter().collect();
        assert_eq!(tiles[&TileId::new(1, 1)].len(), 17);
        // Level-1 node 272 (leaves 69,632 to 69,887), as stored by the second run.
        let stored: HashMap<TileId, Vec<LogHash>> = second.tiles.into_iter().collect();
        let node = mandate_protocol::tlog::NodeId::new(8, 272);
        assert_eq!(
            hashes_from_tiles(&[node], &stored).unwrap(),
            hashes_from_tiles(&[node], &tiles).unwrap()
        );
    }

    /// A log of this process's news whose checkpoint it signed within the hold, with fewer
    /// of its decisions than the threshold, waits without a read: named again with its
    /// count. Past the hold, or at the threshold, it is read (here a log with nothing
    /// stored, so the read leaves it out of the news).
    #[tokio::test]
    async fn a_quiet_log_known_recent_is_named_again_with_its_count_and_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let start = time::macros::datetime!(2026-11-22 12:00 UTC);
        let (context, clock) = Context::on_sqlite_for_test(dir.path(), start).await;
        let news = context.news.clone();
        let worker = Checkpointer::new(context, Duration::from_secs(1), BATCH).with_quiet_below(4);
        let org: Arc<str> = Arc::from("org_quiet");
        let named = || {
            news.take_logs()
                .into_iter()
                .map(|((org, env), n)| (org.to_string(), env, n))
                .collect::<Vec<_>>()
        };
        worker.signed_at(&org, Env::Live, ms(start));
        // Three decisions, signed now: held, named again with its three.
        for _ in 0..3 {
            news.decided(&org, Env::Live);
        }
        assert_eq!(worker.round().await.moved, 0);
        assert_eq!(named(), [(org.to_string(), Env::Live, 3)]);
        // Four (the threshold): read.
        for _ in 0..4 {
            news.decided(&org, Env::Live);
        }
        worker.round().await;
        assert_eq!(named(), []);
        // One, two intervals after the checkpoint (the hold's end): read.
        news.decided(&org, Env::Live);
        clock.advance(time::Duration::seconds(2));
        worker.round().await;
        assert_eq!(named(), []);
    }

    #[test]
    fn a_log_is_left_only_to_another_process_that_signed_it_within_the_interval() {
        let interval = Duration::from_secs(1);
        // Signed half an interval ago, by another process (this one signed it before).
        assert!(left_to_others(10_000, interval, 9_500, None));
        assert!(left_to_others(10_000, interval, 9_500, Some(9_000)));
        // Signed by this process, or an interval ago or more: extended here.
        assert!(!left_to_others(10_000, interval, 9_500, Some(9_500)));
        assert!(!left_to_others(10_000, interval, 9_000, None));
        // Ahead of this clock by up to an interval counts; further ahead, not.
        assert!(left_to_others(10_000, interval, 11_000, None));
        assert!(!left_to_others(10_000, interval, 11_001, None));
    }

    #[test]
    fn a_decision_without_a_token_is_left_out_only_before_the_first_leaf() {
        let empty = LogTail::default();
        let before = leaves_of(vec![(1, None), (2, Some("a.b.c".into()))]);
        let before = grow(&empty, &before, "o").unwrap();
        assert_eq!((before.edge.size(), before.scanned_seq), (1, 2));
        let after = leaves_of(vec![(1, Some("a.b.c".into())), (2, None)]);
        let after = grow(&empty, &after, "o");
        assert!(matches!(after, Err(CheckpointError::Tampered { .. })));
    }

    #[test]
    fn missing_hashes_are_read_a_run_at_a_time_or_in_one_span() {
        // Seqs 10, 12, 13, 20, 21, 22 (another environment's decisions between them).
        let decisions: Vec<(i64, DecisionId, Option<LogHash>)> = [10, 12, 13, 20, 21, 22]
            .iter()
            .map(|&s| (s, id(s), None))
            .collect();
        assert_eq!(
            ranges_of(&decisions, &[0, 1, 4, 5]),
            vec![(9, 13, 2), (20, 23, 2)]
        );
        assert_eq!(ranges_of(&decisions, &[2]), vec![(12, 14, 1)]);
        // Every other decision of 40 missing: past RUNS_READ runs, one span.
        let many: Vec<(i64, DecisionId, Option<LogHash>)> =
            (1..=40).map(|s| (s, id(s), None)).collect();
        let odd: Vec<usize> = (0..40).step_by(2).collect();
        assert_eq!(ranges_of(&many, &odd), vec![(0, 40, 39)]);
    }
}
