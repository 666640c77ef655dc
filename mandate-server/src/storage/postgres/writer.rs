//! Group commit of decisions on PostgreSQL: the decisions that arrive while a group is being
//! committed are sent together as the next one, in one transaction on one connection, their
//! statements pipelined (one round trip, one commit and one WAL flush for the whole group).
//!
//! A few writers run side by side, each with a queue of its own; a decision goes to the
//! writer of its organization (its id hashed), and a writer splits what it takes by
//! organization: a group is one organization's, its transaction touches only that
//! organization's rows (on Citus, one worker's), and the groups of one take are committed
//! side by side, each on a connection of its own. A group holds its agents' rows locked
//! until it commits; every group takes them in the order of the agents' keys, so groups of
//! different processes never wait on each other in a circle. Before its transaction a group
//! claims a block of its organization's seqs ([`claims`]); each decision's statement is the one it would run alone
//! ([`RecordStatement`]), then the group's decisions are inserted with the claimed seqs by
//! one statement that also clears the claim: a decision refused because its agent changed
//! meanwhile refuses only itself (its statement stores nothing and the transaction goes on). If a
//! statement fails, the whole group is rolled back and each of its decisions is stored
//! again alone, so one bad decision never costs the others theirs. Each decision is answered
//! after its group's commit (or its own).

use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::ToSql;

use super::Result;
use super::claims;
use super::decisions;
use super::gather::Gather;
use super::pipeline::InOrder;
use super::record::{self, Move, Outcome, RecordStatement, moves_of};
use super::script::{self, Opening, SetLocal};
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
}

impl Writers {
    /// Starts `count` writers (`decision_writers` of the URL in a server) on the current
    /// runtime, taking connections from `pool` and waiting up to `gather` for a fuller group
    /// ([`Gather`]); they end when this is dropped.
    pub(crate) fn start(pool: &Pool, count: usize, gather: Duration) -> Self {
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
                    opened: std::sync::Mutex::default(),
                    set_local: tokio::sync::OnceCell::new(),
                };
                tokio::spawn(run(writer, receive, Gather::new(gather)));
                send
            })
            .collect();
        Self { queues }
    }

    /// Queues `new` for the next group of its organization's writer at once; the future
    /// answers after that group's commit. It holds only the answer's channel, not the
    /// decision, so that the futures around it stay small: each is moved whole when made.
    pub(crate) fn record(
        &self,
        new: NewDecision,
    ) -> impl Future<Output = Result<Recorded>> + Send + 'static {
        let (reply, answer) = oneshot::channel();
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        new.org.hash(&mut hasher);
        let n = usize::try_from(hasher.finish() % self.queues.len() as u64).unwrap_or(0);
        let queued = self.queues[n]
            .send(Job { new, reply })
            .map_err(|_| StorageError::Task("the decision writer has stopped".into()));
        async move {
            queued?;
            answer
                .await
                .map_err(|_| StorageError::Task("the decision writer dropped a decision".into()))?
        }
    }
}

/// One writer's connections, its name in `decision_claims`, the organizations where it
/// opened its row there ([`claims::OPEN`]), so that its next claims need not open it again,
/// and where its database takes a `SET LOCAL` (found at its first group).
struct Writer {
    pool: Pool,
    name: String,
    opened: std::sync::Mutex<std::collections::HashSet<String>>,
    set_local: tokio::sync::OnceCell<SetLocal>,
}

impl Writer {
    /// Whether this writer's row of `org` is known to exist.
    fn has_opened(&self, org: &str) -> bool {
        self.opened
            .lock()
            .map(|opened| opened.contains(org))
            .unwrap_or(false)
    }

    /// Notes that this writer's row of `org` exists (`true`) or was found swept (`false`).
    fn note_opened(&self, org: &str, exists: bool) {
        if let Ok(mut opened) = self.opened.lock() {
            if exists {
                opened.insert(org.to_owned());
            } else {
                opened.remove(org);
            }
        }
    }
}

/// One writer: takes what waits in its queue (at most [`MAX_GROUP`]), commits it as one
/// group an organization, side by side, answers, and again.
async fn run(writer: Writer, mut queue: mpsc::UnboundedReceiver<Job>, mut gather: Gather) {
    while let Some(first) = queue.recv().await {
        let jobs = gather.take(first, &mut queue, MAX_GROUP).await;
        let groups = by_organization(jobs);
        let writer = &writer;
        futures_util::future::join_all(groups.into_iter().map(|jobs| async move {
            let answers = commit_group(writer, &jobs).await;
            for (job, answer) in jobs.into_iter().zip(answers) {
                let answer = answer.map(|outcome| outcome.recorded(job.new));
                // A caller that went away (cancelled) needs no answer.
                let _ = job.reply.send(answer);
            }
        }))
        .await;
    }
}

/// `jobs` split into one group an organization, each in the order of its agents' keys:
/// agents' rows are locked in that order in every group of every process, so two groups
/// waiting on each other's agents (a deadlock, broken by the database only after a second)
/// cannot happen.
fn by_organization(mut jobs: Vec<Job>) -> Vec<Vec<Job>> {
    jobs.sort_by(|a, b| (&a.new.org, a.new.hint.seq).cmp(&(&b.new.org, b.new.hint.seq)));
    let mut groups: Vec<Vec<Job>> = Vec::new();
    for job in jobs {
        match groups.last_mut() {
            Some(group) if group[0].new.org == job.new.org => group.push(job),
            _ => groups.push(vec![job]),
        }
    }
    groups
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

/// Stores a group (one organization's) on one connection, in two pipelines. The first
/// claims the group's seqs, and the seqs of the events its reviews open, in a transaction
/// of its own ([`claims`]), then opens the group's transaction with `BEGIN` and sends each
/// decision's version move and credential ([`RecordStatement`]). The second, once their answers say which decisions are to be
/// stored, sends what those write (reviews, events, deliveries, idempotency records), their
/// rows with the claimed seqs ([`decisions::insert_sql`]) and the claim's settlement, then
/// `COMMIT`. No lock is held across the group's commit that another group needs (no
/// counter row: the events of its reviews take claimed seqs too), so groups commit side by
/// side and their WAL flushes are shared; every statement names the organization, so on
/// Citus the group runs on one worker with a one-phase commit.
async fn try_group(
    writer: &Writer,
    news: &[&NewDecision],
) -> std::result::Result<Vec<Outcome>, Retry> {
    let org: &str = news.first().map_or("", |new| &new.org);
    let c = writer.pool.get().await.map_err(|e| Retry::Fail(e.into()))?;
    let statements: Vec<Option<RecordStatement>> =
        news.iter().map(|new| RecordStatement::of(new)).collect();
    let prepared = Prepared::new(&c, &statements)
        .await
        .map_err(|e| Retry::Fail(e.into()))?;
    // Metrics (docs/operations.md): the group's size, and the time from sending it to its
    // commit's answer (the database's flush of its WAL included).
    metrics::histogram!(crate::telemetry::WRITER_GROUP).record(statements.len() as f64);
    let committing = std::time::Instant::now();
    let claimed = claim_and_record(writer, org, &c, &prepared, &statements).await?;
    let ((first, first_event), answers) = match claimed {
        Some(claimed) => claimed,
        None => {
            // The writer's row was swept since its last claim: opened again, and claimed.
            writer.note_opened(org, false);
            claim_and_record(writer, org, &c, &prepared, &statements)
                .await?
                .ok_or_else(|| {
                    Retry::Fail(StorageError::Backend(
                        "the writer's claim row was not found right after it was opened".into(),
                    ))
                })?
        }
    };
    writer.note_opened(org, true);
    let outcomes = outcomes_of(&statements, answers);
    let stored: Vec<&RecordStatement> = statements
        .iter()
        .zip(&outcomes)
        .filter(|(_, outcome)| matches!(outcome, Outcome::Stored(_)))
        .filter_map(|(statement, _)| statement.as_ref())
        .collect();
    let claim = Claim {
        org,
        writer: &writer.name,
        first,
        first_event,
    };
    insert_and_commit(&c, &claim, &stored).await?;
    metrics::histogram!("mandate_writer_commit_seconds").record(committing.elapsed().as_secs_f64());
    Ok(outcomes)
}

/// A group's claim: its organization, its writer, its first seq and the first seq of its
/// reviews' events.
struct Claim<'a> {
    org: &'a str,
    writer: &'a String,
    first: i64,
    first_event: i64,
}

/// A group's statements of the first pipeline, prepared on its connection (on its first
/// use of each) before the pipelines.
struct Prepared {
    /// The version move of each decision that moves alone (an Idempotency-Key or a
    /// credential), in order.
    bumps: Vec<tokio_postgres::Statement>,
    /// The version moves of a run of the others.
    many: tokio_postgres::Statement,
    accept: tokio_postgres::Statement,
}

impl Prepared {
    async fn new(
        c: &deadpool_postgres::Object,
        statements: &[Option<RecordStatement>],
    ) -> std::result::Result<Self, tokio_postgres::Error> {
        let mut bumps = Vec::with_capacity(statements.len());
        for statement in statements.iter().flatten().filter(|s| !s.is_plain()) {
            bumps.push(c.prepare_cached(statement.bump_sql()).await?);
        }
        Ok(Self {
            bumps,
            many: c.prepare_cached(&record::BUMP_MANY_SQL).await?,
            accept: c.prepare_cached(record::ACCEPT).await?,
        })
    }
}

/// What the first pipeline answered for a decision: its version move, and its credential's
/// acceptance when it has one.
type Answer = (i64, Option<u64>);

/// The first pipeline: one message ([`Opening::messages`]; four on Citus) that claims the
/// group's seqs (and its reviews' events' seqs) and marks the month of its latest decision
/// ([`claims::MONTH`]) in a commit of its own, with the writer's
/// row opened first unless it is known to exist, then opens the group's transaction and
/// moves the versions of its first run; then the version moves (and credentials) of the
/// decisions after it.
/// The claim's first seqs and each decision's answers, in order; none when the writer's
/// row was not found (swept: the group's transaction is rolled back, to be made again with
/// the row opened); on a failure the transaction is rolled back and the claim cleared.
async fn claim_and_record(
    writer: &Writer,
    org: &str,
    c: &deadpool_postgres::Object,
    prepared: &Prepared,
    statements: &[Option<RecordStatement>],
) -> std::result::Result<Option<((i64, i64), Vec<Answer>)>, Retry> {
    // A seq for each decision that has a statement, and an event seq for each of those
    // that opens a review; those it does not store leave gaps.
    let present: Vec<&RecordStatement> = statements.iter().flatten().collect();
    let reviews = present.iter().filter(|s| s.opens_review()).count();
    let moves = moves_of(org, &present);
    let first_run = match moves.first() {
        Some(Move::Run(run)) => Some(run.execute().map_err(|e| Retry::Fail(backend(e)))?),
        _ => None,
    };
    let in_script = usize::from(first_run.is_some());
    let opening = Opening {
        org,
        writer: &writer.name,
        open_row: !writer.has_opened(org),
        seqs: i64::try_from(present.len().max(1)).unwrap_or(i64::MAX),
        events: i64::try_from(reviews).unwrap_or(i64::MAX),
        month: crate::clock::month_index(present.iter().map(|s| s.created_ms()).max().unwrap_or(0)),
        first_run,
    };
    let set_local = writer
        .set_local
        .get_or_try_init(|| SetLocal::of(c))
        .await
        .map_err(|e| Retry::Fail(e.into()))?;
    let messages = opening
        .messages(*set_local)
        .map_err(|e| Retry::Fail(backend(e)))?;
    let mut alone = prepared.bumps.iter();
    let mut steps: Vec<Pin<Box<dyn Future<Output = Step> + Send + '_>>> =
        Vec::with_capacity(moves.len() * 2 + 1);
    for message in &messages {
        steps.push(Box::pin(async move {
            Step::Opened(c.simple_query(message).await)
        }));
    }
    for step in &moves[in_script..] {
        match step {
            Move::Run(run) => steps.push(Box::pin(async move {
                let moved = c
                    .query(&prepared.many, &run.values())
                    .await
                    .map(|rows| run.moved(rows.iter().map(|row| row.get(0))));
                Step::Moved(moved)
            })),
            Move::Alone(values, accept) => {
                let Some(stmt) = alone.next() else {
                    continue;
                };
                steps.push(Box::pin(async move {
                    Step::Stored(c.query_one(stmt, values).await.map(|row| row.get(0)))
                }));
                if let Some(accept) = accept {
                    steps.push(Box::pin(async move {
                        Step::Accepted(c.execute(&prepared.accept, accept).await)
                    }));
                }
            }
        }
    }
    let done = InOrder::new(steps).await;
    // The opening's answers (read when every message of it succeeded): the claim, and the
    // first run's moves, which go at the head of the decisions' answers.
    let opened = match opened_of(&done) {
        Some(Ok(opened)) => Some(opened),
        Some(Err(e)) => {
            claims::clear(c, org, &writer.name).await;
            return Err(Retry::Fail(backend(e)));
        }
        None => None,
    };
    let first_moved = match (&opened, moves.first()) {
        (Some(opened), Some(Move::Run(run))) => run.moved(opened.moved.clone().unwrap_or_default()),
        _ => Vec::new(),
    };
    match (answers(done), opened.and_then(|opened| opened.claimed)) {
        (Ok(rest), Some((first, first_event))) => {
            let answers = first_moved.into_iter().map(|n| (n, None)).chain(rest);
            Ok(Some(((first, first_event.unwrap_or(0)), answers.collect())))
        }
        (Ok(_), None) => {
            // No row held the claim: nothing of the group is kept.
            let _ = c.simple_query("ROLLBACK").await;
            Ok(None)
        }
        (Err(e), _) => {
            // The transaction is aborted: end it before the connection goes back, and
            // clear the claim if it was made, so that readers need not wait for it.
            claims::clear(c, org, &writer.name).await;
            Err(retry(e))
        }
    }
}

/// The opening's answers read ([`script::read_opened`]), when every message of it
/// succeeded; none when one failed.
fn opened_of(done: &[Step]) -> Option<std::result::Result<script::Opened, script::Unreadable>> {
    if done.iter().any(|step| matches!(step, Step::Opened(Err(_)))) {
        return None;
    }
    let answered = done.iter().filter_map(|step| match step {
        Step::Opened(Ok(answer)) => Some(answer),
        _ => None,
    });
    Some(script::read_opened(answered.flatten()))
}

/// A writer's failure that is not the database's.
fn backend(e: impl std::fmt::Display) -> StorageError {
    StorageError::Backend(e.to_string())
}

/// A step that answers only whether it failed.
fn control<'a>(
    query: impl Future<
        Output = std::result::Result<
            Vec<tokio_postgres::SimpleQueryMessage>,
            tokio_postgres::Error,
        >,
    > + Send
    + 'a,
) -> Pin<Box<dyn Future<Output = Step> + Send + 'a>> {
    Box::pin(async move { Step::Control(query.await.map(|_| ())) })
}

/// What each decision's answers mean: its outcome.
fn outcomes_of(statements: &[Option<RecordStatement>], answers: Vec<Answer>) -> Vec<Outcome> {
    let mut answers = answers.into_iter();
    statements
        .iter()
        .map(|statement| match statement {
            Some(statement) => {
                let (bumped, accepted) = answers.next().unwrap_or((0, None));
                statement.outcome(bumped, accepted)
            }
            // The agent was not found when its state was read: read it again.
            None => Outcome::Changed,
        })
        .collect()
}

/// The second pipeline: what the stored decisions write and their rows with the claimed
/// seqs, then the claim settled (a claim swept meanwhile makes its check fail, and the
/// group is rolled back: [`claims::SETTLED`]), then `COMMIT`. With none stored, the claim
/// is cleared and the transaction (the version moves that changed nothing) committed.
async fn insert_and_commit(
    c: &deadpool_postgres::Object,
    claim: &Claim<'_>,
    stored: &[&RecordStatement],
) -> std::result::Result<(), Retry> {
    let seqs: Vec<i64> = (0..stored.len())
        .map(|i| claim.first + i64::try_from(i).unwrap_or(i64::MAX))
        .collect();
    let rows: Vec<decisions::Row<'_>> = stored
        .iter()
        .zip(&seqs)
        .map(|(statement, seq)| {
            let (agent_seq, params) = statement.row();
            (seq, agent_seq, params)
        })
        .collect();
    // The claimed event seqs, in order, to the stored decisions that open a review.
    let mut next_event = claim.first_event;
    let event_seqs: Vec<Option<i64>> = stored
        .iter()
        .map(|statement| {
            statement.opens_review().then(|| {
                next_event += 1;
                next_event - 1
            })
        })
        .collect();
    let mut statements: Vec<(String, Vec<&(dyn ToSql + Sync)>)> = stored
        .iter()
        .zip(&event_seqs)
        .flat_map(|(statement, seq)| statement.after(seq.as_ref()))
        .map(|(sql, values)| (sql.to_owned(), values))
        .collect();
    if !rows.is_empty() {
        statements.push((
            decisions::insert_sql(rows.len()),
            decisions::insert_values(&rows),
        ));
    }
    let end = script::settle_and_commit(claim.org, claim.writer, claim.first, !rows.is_empty())
        .map_err(|e| Retry::Fail(backend(e)))?;
    let mut prepared = Vec::with_capacity(statements.len());
    for (sql, _) in &statements {
        prepared.push(
            c.prepare_cached(sql)
                .await
                .map_err(|e| Retry::Fail(e.into()))?,
        );
    }
    let mut steps: Vec<Pin<Box<dyn Future<Output = Step> + Send + '_>>> =
        Vec::with_capacity(statements.len() + 1);
    for (stmt, (_, values)) in prepared.iter().zip(&statements) {
        steps.push(Box::pin(async move {
            Step::Control(c.query(stmt, values).await.map(|_| ()))
        }));
    }
    steps.push(control(c.simple_query(&end)));
    if let Err(e) = answers(InOrder::new(steps).await) {
        claims::clear(c, claim.org, claim.writer).await;
        return Err(retry(e));
    }
    Ok(())
}

/// The answers of a pipeline's decision statements, or its first error.
fn answers(done: Vec<Step>) -> std::result::Result<Vec<Answer>, tokio_postgres::Error> {
    let mut answers: Vec<Answer> = Vec::with_capacity(done.len());
    let mut failed = None;
    for step in done {
        match step {
            Step::Stored(Ok(n)) => answers.push((n, None)),
            Step::Moved(Ok(moved)) => answers.extend(moved.into_iter().map(|n| (n, None))),
            Step::Accepted(Ok(n)) => {
                if let Some(last) = answers.last_mut() {
                    last.1 = Some(n);
                }
            }
            Step::Stored(Err(e))
            | Step::Moved(Err(e))
            | Step::Accepted(Err(e))
            | Step::Control(Err(e))
            | Step::Opened(Err(e)) => {
                failed.get_or_insert(e);
            }
            Step::Control(Ok(())) | Step::Opened(Ok(_)) => {}
        }
    }
    failed.map_or(Ok(answers), Err)
}

/// A step of the pipeline.
enum Step {
    /// `BEGIN`, `COMMIT`, or a statement whose answer is only whether it failed.
    Control(std::result::Result<(), tokio_postgres::Error>),
    /// A message of the group's opening ([`Opening::messages`]): with the others, the
    /// claim, and the first run's version moves when it has one ([`script::read_opened`]).
    Opened(std::result::Result<Vec<tokio_postgres::SimpleQueryMessage>, tokio_postgres::Error>),
    /// A decision's version move: 1 moved, 0 changed, -1 its claim lost.
    Stored(std::result::Result<i64, tokio_postgres::Error>),
    /// A run's version moves, for each of its decisions: 1 moved, 0 changed.
    Moved(std::result::Result<Vec<i64>, tokio_postgres::Error>),
    /// The acceptance of the credential of the decision before: rows inserted.
    Accepted(std::result::Result<u64, tokio_postgres::Error>),
}
