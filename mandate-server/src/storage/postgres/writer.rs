//! Group commit of decisions on PostgreSQL: the decisions that arrive while a group is being
//! committed are sent together as the next one, in one transaction on one connection, their
//! statements pipelined (one round trip, one commit and one WAL flush for the whole group).
//!
//! A few writers run side by side, each with a queue of its own; a decision goes to the
//! next in turn. A group holds its agents' rows locked until it commits; every group takes
//! them in the order of the agents' keys, so groups of different processes never wait on
//! each other in a circle. Before its transaction a group claims a block of seqs
//! ([`claims`]); each decision's statement is the one it would run alone
//! ([`RecordStatement`]), then the group's decisions are inserted with the claimed seqs by
//! one statement that also clears the claim: a decision refused because its agent changed
//! meanwhile refuses only itself (its statement stores nothing and the transaction goes on). If a
//! statement fails, the whole group is rolled back and each of its decisions is stored
//! again alone, so one bad decision never costs the others theirs. Each decision is answered
//! after its group's commit (or its own).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot};

use super::Result;
use super::claims;
use super::decisions;
use super::record::{Outcome, RecordStatement};
use crate::storage::StorageError;
use crate::storage::deciding::{NewDecision, Recorded};

/// The most decisions in one group.
pub const MAX_GROUP: usize = 128;

/// A decision waiting for its group, with where to answer.
struct Job {
    new: NewDecision,
    reply: oneshot::Sender<Result<Recorded>>,
}

/// The writers: each a task with its queue.
pub(crate) struct Writers {
    queues: Vec<mpsc::UnboundedSender<Job>>,
    next: AtomicUsize,
}

impl Writers {
    /// Starts `count` writers (`decision_writers` of the URL in a server) on the current runtime, taking
    /// connections from `pool`; they end when this is dropped.
    pub(crate) fn start(pool: &Pool, count: usize) -> Self {
        // Each writer's name in `decision_claims`: random for this process, so that no two
        // processes share a claim row, then the writer's number.
        let mut process = [0u8; 8];
        crate::clock::fill_id_random(&mut process);
        let process: String = process.iter().map(|b| format!("{b:02x}")).collect();
        let queues = (0..count.max(1))
            .map(|n| {
                let (send, receive) = mpsc::unbounded_channel();
                let writer = Writer {
                    pool: pool.clone(),
                    name: format!("{process}-{n}"),
                };
                tokio::spawn(run(writer, receive));
                send
            })
            .collect();
        Self {
            queues,
            next: AtomicUsize::new(0),
        }
    }

    /// Stores `new` in the next group of the next writer; answers after that group's
    /// commit.
    pub(crate) async fn record(&self, new: NewDecision) -> Result<Recorded> {
        let (reply, answer) = oneshot::channel();
        let n = self.next.fetch_add(1, Ordering::Relaxed) % self.queues.len();
        self.queues[n]
            .send(Job { new, reply })
            .map_err(|_| StorageError::Task("the decision writer has stopped".into()))?;
        answer
            .await
            .map_err(|_| StorageError::Task("the decision writer dropped a decision".into()))?
    }
}

/// One writer's connections and its name in `decision_claims`.
struct Writer {
    pool: Pool,
    name: String,
}

/// One writer: takes what waits in its queue (at most [`MAX_GROUP`]) as a group, commits it,
/// answers, and again.
async fn run(writer: Writer, mut queue: mpsc::UnboundedReceiver<Job>) {
    while let Some(first) = queue.recv().await {
        let mut jobs = vec![first];
        while jobs.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        // Agents' rows are locked in the order of their keys, in every group of every
        // process: two groups waiting on each other's agents (a deadlock, broken by the
        // database only after a second) cannot happen.
        jobs.sort_by_key(|job| job.new.hint.seq);
        let answers = commit_group(&writer, &jobs).await;
        for (job, answer) in jobs.into_iter().zip(answers) {
            let answer = answer.map(|outcome| outcome.recorded(job.new));
            // A caller that went away (cancelled) needs no answer.
            let _ = job.reply.send(answer);
        }
    }
}

/// What a group came to for each of its decisions: its outcome, or its error.
async fn commit_group(writer: &Writer, jobs: &[Job]) -> Vec<Result<Outcome>> {
    let news: Vec<&NewDecision> = jobs.iter().map(|job| &job.new).collect();
    match try_group(writer, &news).await {
        Ok(outcomes) => outcomes.into_iter().map(Ok).collect(),
        Err(Retry::Alone(_)) => {
            let mut answers = Vec::with_capacity(jobs.len());
            for new in news {
                answers.push(alone(writer, new).await);
            }
            answers
        }
        Err(Retry::Fail(e)) => {
            let text = e.to_string();
            jobs.iter()
                .map(|_| {
                    Err(match &e {
                        StorageError::Unavailable(_) => StorageError::Unavailable(text.clone()),
                        _ => StorageError::Backend(text.clone()),
                    })
                })
                .collect()
        }
    }
}

/// Why a group was not committed.
enum Retry {
    /// Rolled back (a statement failed, or the transaction lost a race): each decision is
    /// stored alone.
    Alone(StorageError),
    /// Unknown (the connection failed midway, perhaps after the commit): every decision of
    /// the group gets this error, as a decision stored alone would.
    Fail(StorageError),
}

/// What a failed step means for its group: rolled back (a statement's error; the server
/// then answers ROLLBACK to the COMMIT; or a commit refused for a race), or unknown (a
/// broken connection).
fn retry(e: tokio_postgres::Error) -> Retry {
    let rolled_back = e.code().is_some_and(|code| {
        let class = code.code();
        !(class.starts_with("08") || class.starts_with("57"))
    });
    if rolled_back {
        Retry::Alone(e.into())
    } else {
        Retry::Fail(e.into())
    }
}

/// One decision stored alone (after its group was rolled back), in a group of its own.
async fn alone(writer: &Writer, new: &NewDecision) -> Result<Outcome> {
    match try_group(writer, &[new]).await {
        Ok(mut outcome) => Ok(outcome.pop().unwrap_or(Outcome::Changed)),
        // The transaction lost a race (a distributed engine): nothing was stored, and the
        // decision is made again like one whose agent changed.
        Err(Retry::Alone(StorageError::Conflict)) => Ok(Outcome::Changed),
        Err(Retry::Alone(e) | Retry::Fail(e)) => Err(e),
    }
}

/// Stores a group on one connection, in two pipelines. The first claims the group's seqs
/// in a transaction of its own ([`claims`]), then opens the group's transaction with
/// `BEGIN` and each decision's statement ([`RecordStatement`]: the agent's version, review,
/// event, idempotency record). The second, once their answers say which decisions are to
/// be stored, inserts those decisions with the claimed seqs and clears the claim
/// ([`decisions::INSERT_CLAIMED`]), then `COMMIT`. No lock is held across the group's
/// commit that another group needs, so groups commit side by side and their WAL flushes
/// are shared.
async fn try_group(
    writer: &Writer,
    news: &[&NewDecision],
) -> std::result::Result<Vec<Outcome>, Retry> {
    let c = writer.pool.get().await.map_err(|e| Retry::Fail(e.into()))?;
    let statements: Vec<Option<RecordStatement>> =
        news.iter().map(|new| RecordStatement::of(new)).collect();
    // Prepared (on a connection's first use of each variant) before the pipeline.
    let mut prepared = Vec::with_capacity(statements.len());
    for statement in statements.iter().flatten() {
        let stmt = c
            .prepare_cached(statement.sql())
            .await
            .map_err(|e| Retry::Fail(e.into()))?;
        prepared.push(stmt);
    }
    let prepare = |sql: &'static str| c.prepare_cached(sql);
    let claim = prepare(claims::CLAIM)
        .await
        .map_err(|e| Retry::Fail(e.into()))?;
    let settle = prepare(claims::SETTLE)
        .await
        .map_err(|e| Retry::Fail(e.into()))?;
    let insert = c
        .prepare_cached(&decisions::INSERT_CLAIMED)
        .await
        .map_err(|e| Retry::Fail(e.into()))?;
    // Metrics (docs/operations.md): the group's size, and the time from sending it to its
    // commit's answer (the database's flush of its WAL included).
    metrics::histogram!(crate::telemetry::WRITER_GROUP).record(prepared.len() as f64);
    let committing = std::time::Instant::now();
    // A seq for each decision that has a statement; those it does not store leave gaps.
    let claimed = i64::try_from(prepared.len().max(1)).unwrap_or(i64::MAX);
    let (first, counts) = {
        let values: Vec<_> = statements
            .iter()
            .flatten()
            .map(RecordStatement::values)
            .collect();
        let mut steps: Vec<Pin<Box<dyn Future<Output = Step> + Send + '_>>> =
            Vec::with_capacity(prepared.len() + 4);
        steps.push(Box::pin(async {
            Step::Control(c.simple_query(claims::BEGIN_CLAIM).await.map(|_| ()))
        }));
        steps.push(Box::pin(async {
            Step::Claimed(
                c.query_one(&claim, &[&writer.name, &claimed])
                    .await
                    .map(|row| row.get::<_, i64>(0)),
            )
        }));
        steps.push(Box::pin(async {
            Step::Control(c.simple_query("COMMIT").await.map(|_| ()))
        }));
        steps.push(Box::pin(async {
            Step::Control(c.simple_query("BEGIN").await.map(|_| ()))
        }));
        for (stmt, values) in prepared.iter().zip(&values) {
            let c = &c;
            steps.push(Box::pin(async move {
                Step::Stored(
                    c.query_one(stmt, values)
                        .await
                        .map(|row| row.get::<_, i64>(0)),
                )
            }));
        }
        let done = InOrder::new(steps).await;
        let first = done.iter().find_map(|step| match step {
            Step::Claimed(Ok(first)) => Some(*first),
            _ => None,
        });
        match outcomes(done) {
            Ok(counts) => (first.unwrap_or(0), counts),
            Err(e) => {
                // The transaction is aborted: end it before the connection goes back, and
                // clear the claim if it was made, so that readers need not wait for it.
                let _ = c.simple_query("ROLLBACK").await;
                if let Some(first) = first {
                    let _ = c.execute(&settle, &[&writer.name, &first]).await;
                }
                return Err(retry(e));
            }
        }
    };
    let mut counts = counts.into_iter();
    let mut batch = decisions::Batch::default();
    let mut answers = Vec::with_capacity(statements.len());
    for statement in statements {
        let outcome = match statement {
            Some(statement) => {
                let outcome = statement.outcome(counts.next().unwrap_or(0));
                if matches!(outcome, Outcome::Stored(_)) {
                    let (agent_seq, params) = statement.into_decision();
                    batch.push(agent_seq, params);
                }
                outcome
            }
            // The agent was not found when its state was read: read it again.
            None => Outcome::Changed,
        };
        answers.push(outcome);
    }
    let mut values = batch.values(&first).to_vec();
    values.push(&writer.name);
    let mut steps: Vec<Pin<Box<dyn Future<Output = Step> + Send + '_>>> = Vec::with_capacity(2);
    if batch.len() > 0 {
        steps.push(Box::pin(async {
            Step::Control(c.execute(&insert, &values).await.map(|_| ()))
        }));
    } else {
        steps.push(Box::pin(async {
            Step::Control(
                c.execute(&settle, &[&writer.name, &first])
                    .await
                    .map(|_| ()),
            )
        }));
    }
    steps.push(Box::pin(async {
        Step::Control(c.simple_query("COMMIT").await.map(|_| ()))
    }));
    if let Err(e) = outcomes(InOrder::new(steps).await) {
        let _ = c.execute(&settle, &[&writer.name, &first]).await;
        return Err(retry(e));
    }
    metrics::histogram!("mandate_writer_commit_seconds").record(committing.elapsed().as_secs_f64());
    Ok(answers)
}

/// The counts of a pipeline's statements, or its first error.
fn outcomes(done: Vec<Step>) -> std::result::Result<Vec<i64>, tokio_postgres::Error> {
    let mut counts = Vec::with_capacity(done.len());
    let mut failed = None;
    for step in done {
        match step {
            Step::Stored(Ok(n)) => counts.push(n),
            Step::Stored(Err(e)) | Step::Control(Err(e)) | Step::Claimed(Err(e)) => {
                failed.get_or_insert(e);
            }
            Step::Control(Ok(())) | Step::Claimed(Ok(_)) => {}
        }
    }
    failed.map_or(Ok(counts), Err)
}

/// A step of the pipeline.
enum Step {
    /// `BEGIN`, `COMMIT`, or a statement whose answer is only whether it failed.
    Control(std::result::Result<(), tokio_postgres::Error>),
    /// The group's claim: the first seq of its block.
    Claimed(std::result::Result<i64, tokio_postgres::Error>),
    /// A decision's statement: how many decisions it stored.
    Stored(std::result::Result<i64, tokio_postgres::Error>),
}

/// Runs futures together, each first polled in order, so that their requests go to the
/// connection in that order (tokio-postgres sends a request when its future is first
/// polled); yields their outputs in the same order.
struct InOrder<'a, T> {
    futures: Vec<Option<Pin<Box<dyn Future<Output = T> + Send + 'a>>>>,
    outputs: Vec<Option<T>>,
}

impl<'a, T> InOrder<'a, T> {
    fn new(futures: Vec<Pin<Box<dyn Future<Output = T> + Send + 'a>>>) -> Self {
        let outputs = futures.iter().map(|_| None).collect();
        Self {
            futures: futures.into_iter().map(Some).collect(),
            outputs,
        }
    }
}

impl<T: Unpin> Future for InOrder<'_, T> {
    type Output = Vec<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<T>> {
        let this = &mut *self;
        let mut pending = false;
        for (slot, output) in this.futures.iter_mut().zip(this.outputs.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => {
                        *output = Some(value);
                        *slot = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            return Poll::Pending;
        }
        Poll::Ready(this.outputs.iter_mut().filter_map(Option::take).collect())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Every future is first polled in the order given, whatever order they finish in.
    #[tokio::test]
    async fn futures_are_first_polled_in_order_and_answered_in_order() {
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let futures: Vec<Pin<Box<dyn Future<Output = usize> + Send>>> = (0..40usize)
            .map(|i| {
                let order = order.clone();
                Box::pin(async move {
                    order.lock().unwrap().push(i);
                    // Later ones finish first.
                    tokio::time::sleep(std::time::Duration::from_millis(40 - i as u64)).await;
                    i
                }) as Pin<Box<dyn Future<Output = usize> + Send>>
            })
            .collect();
        let outputs = InOrder::new(futures).await;
        assert_eq!(outputs, (0..40).collect::<Vec<_>>());
        assert_eq!(*order.lock().unwrap(), (0..40).collect::<Vec<_>>());
    }
}
