//! Group commit of decisions on PostgreSQL: the decisions that arrive while a group is being
//! committed are sent together as the next one, in one transaction (one commit and one WAL
//! flush for the whole group).
//!
//! A few writers run side by side, each with a queue of its own; a decision goes to the
//! writer of its organization (its id hashed). A writer sends each decision on to its lane:
//! one lane a database node ([`Placement`]: on plain PostgreSQL the one, on Citus the worker
//! that holds the organization), each a task with a queue of its own. A lane's group holds
//! the decisions of many organizations, all on its node, so that a group is a transaction on
//! one node with a one-phase commit, and groups do not shrink as organizations multiply. The lanes of a writer commit side by side and never
//! wait for one another: while one worker is lost or locked (a failover moving
//! `pg_dist_node`), the lanes of the others go on, and only its organizations wait.
//!
//! A group is one call, one round trip and one transaction (`mandate_record`, migration
//! 0017, `record.rs`): it moves the versions of its decisions' agents, takes each
//! organization's seqs from its counter row (held to the commit, so that an organization's
//! decisions commit in the order of their seqs), and stores the group. On plain PostgreSQL
//! each kind of write is one statement for the whole group; on Citus the function is
//! distributed and run whole on the worker of the group's organizations. A decision refused
//! because its agent changed meanwhile refuses only itself. If the call fails, the whole
//! group is rolled back and each of its decisions is stored again alone, so one bad decision
//! never costs the others theirs. Each decision is answered after its group's commit (or
//! its own).
//!
//! Rows are locked in one order in every group of every process: first the agents'
//! (organizations by id, an organization's agents by key), then the counters' (organizations
//! by id), so two groups never wait on each other in a circle.

use std::collections::HashMap;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot};

use super::Result;
use super::connect::Target;
use super::direct::{Direct, PLACEMENT_TTL};
use super::gather::Gather;
use super::record::{
    GroupOrgs, MarkedMonths, Outcome, RECORD_CALL, RECORD_CALL_CITUS, RecordCall, RecordStatement,
};
use mandate_storage::StorageError;
use mandate_storage::deciding::{NewDecision, Recorded};

/// The most decisions in one group.
pub const MAX_GROUP: usize = 128;

/// A decision waiting for its group, with where to answer and, on Citus, the shard of its
/// organization (0 until its writer learns it, and on plain PostgreSQL).
struct Job {
    new: NewDecision,
    reply: oneshot::Sender<Result<Recorded>>,
    shard: i64,
}

/// The writers: each a task with its queue.
pub(crate) struct Writers {
    queues: Vec<mpsc::UnboundedSender<Job>>,
}

impl Writers {
    /// Starts `count` writers (`decision_writers` of the URL in a server) on the current
    /// runtime, taking connections from `pool` (on Citus, each lane from its own worker
    /// when `direct` names the URL's target) and waiting up to `gather` for a fuller group
    /// (unset: as [`super::gather::wait`] says for the lane's database); they end when this
    /// is dropped.
    pub(crate) fn start(
        pool: &Pool,
        direct: Option<&Target>,
        count: usize,
        gather: Option<Duration>,
    ) -> Self {
        let queues = (0..count.max(1))
            .map(|_| {
                let (send, receive) = mpsc::unbounded_channel();
                let router = Router {
                    pool: pool.clone(),
                    direct: direct.cloned(),
                    placement: Arc::default(),
                    gather,
                    lanes: HashMap::new(),
                };
                tokio::spawn(route(router, receive));
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
            .send(Job {
                new,
                reply,
                shard: 0,
            })
            .map_err(|_| StorageError::Task("the decision writer has stopped".into()));
        async move {
            queued?;
            answer
                .await
                .map_err(|_| StorageError::Task("the decision writer dropped a decision".into()))?
        }
    }
}

/// One writer: its connections (and, on Citus, the target its lanes reach their workers
/// from), where its database keeps each organization (found at its first decision), how
/// its lanes take their groups, and its lanes by node.
struct Router {
    pool: Pool,
    direct: Option<Target>,
    placement: Arc<tokio::sync::OnceCell<Placement>>,
    gather: Option<Duration>,
    lanes: HashMap<i64, mpsc::UnboundedSender<Job>>,
}

/// One lane of a writer: its connections (on Citus, its own to its worker), its writer's
/// placement, and the months it knows are marked.
struct Writer {
    pool: Pool,
    direct: Option<Direct>,
    placement: Arc<tokio::sync::OnceCell<Placement>>,
    marked: MarkedMonths,
}

/// The lane of the decisions whose node is not known (no connection to ask): its groups
/// hold one organization each, which is always right.
const UNKNOWN_NODE: i64 = -1;

/// Where each organization's rows are: on the one database, or (Citus) on the worker that
/// holds its shard, as `pg_dist_placement` says, learned per organization and kept for
/// [`PLACEMENT_TTL`].
pub(crate) enum Placement {
    /// Plain PostgreSQL: every organization on the one node.
    One,
    /// Citus: the node group and the `environments` shard of each organization seen, and
    /// when they were learned.
    Citus(std::sync::Mutex<HashMap<Arc<str>, (Where, Instant)>>),
}

/// Where an organization's rows are: its node (the node group on Citus, 0 on plain
/// PostgreSQL) and its shard of `environments` (0 on plain PostgreSQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Where {
    pub(crate) node: i64,
    shard: i64,
}

/// The node group and the `environments` shard of each of `orgs` on Citus, in order.
const PLACEMENTS: &str = "SELECT o, s, (SELECT p.groupid FROM pg_dist_placement p
        WHERE p.shardid = s ORDER BY p.groupid LIMIT 1)
    FROM unnest($1::TEXT[]) WITH ORDINALITY AS t (o, n),
         LATERAL get_shard_id_for_distribution_column('environments', o) AS s
    ORDER BY n";

impl Placement {
    /// The placement of the database `c` is connected to: [`Placement::Citus`] where the
    /// `citus` extension is installed.
    pub(crate) async fn of(
        c: &tokio_postgres::Client,
    ) -> std::result::Result<Self, tokio_postgres::Error> {
        let citus: bool = c
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
                &[],
            )
            .await?
            .get(0);
        Ok(if citus {
            Self::Citus(std::sync::Mutex::default())
        } else {
            Self::One
        })
    }

    /// Where each of `orgs` is, in order (node and shard 0 for every one on plain
    /// PostgreSQL), asking the database for those not known or known too long ago. When it
    /// cannot say, each organization is taken for a node of its own: groups then hold one
    /// organization, which is always right.
    pub(crate) async fn nodes(&self, c: &tokio_postgres::Client, orgs: &[Arc<str>]) -> Vec<Where> {
        let Self::Citus(known) = self else {
            return vec![Where { node: 0, shard: 0 }; orgs.len()];
        };
        let now = Instant::now();
        let lookup = |known: &HashMap<Arc<str>, (Where, Instant)>, org: &Arc<str>| {
            known
                .get(org)
                .filter(|(_, at)| now.duration_since(*at) < PLACEMENT_TTL)
                .map(|(place, _)| *place)
        };
        let missing: Vec<&str> = {
            let known = known.lock().unwrap_or_else(|p| p.into_inner());
            let mut missing: Vec<&str> = orgs
                .iter()
                .filter(|org| lookup(&known, org).is_none())
                .map(|org| &**org)
                .collect();
            missing.dedup();
            missing
        };
        if !missing.is_empty() {
            match c.query(PLACEMENTS, &[&missing]).await {
                Ok(rows) => {
                    let mut known = known.lock().unwrap_or_else(|p| p.into_inner());
                    for row in rows {
                        if let Some(group) = row.get::<_, Option<i32>>(2) {
                            let place = Where {
                                node: i64::from(group),
                                shard: row.get(1),
                            };
                            known.insert(Arc::from(row.get::<_, &str>(0)), (place, now));
                        }
                    }
                }
                Err(e) => tracing::warn!("finding the workers of organizations: {e}"),
            }
        }
        let known = known.lock().unwrap_or_else(|p| p.into_inner());
        orgs.iter()
            .enumerate()
            .map(|(i, org)| {
                lookup(&known, org).unwrap_or(Where {
                    node: -1 - i64::try_from(i).unwrap_or(0),
                    shard: 0,
                })
            })
            .collect()
    }
}

/// One writer: takes what waits in its queue (at most [`MAX_GROUP`]), finds each
/// decision's node and sends it to that node's lane, started at the node's first decision.
/// It never waits for a commit, so a lane that waits holds up no other.
async fn route(mut router: Router, mut queue: mpsc::UnboundedReceiver<Job>) {
    while let Some(first) = queue.recv().await {
        let mut jobs = vec![first];
        while jobs.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let places = nodes(&router, &jobs).await;
        for (mut job, place) in jobs.into_iter().zip(places) {
            let node = if place.node < 0 {
                UNKNOWN_NODE
            } else {
                place.node
            };
            job.shard = place.shard;
            let lane = router.lanes.entry(node).or_insert_with(|| {
                let (send, receive) = mpsc::unbounded_channel();
                let lane = Writer {
                    pool: router.pool.clone(),
                    direct: router
                        .direct
                        .clone()
                        .filter(|_| node >= 0)
                        .and_then(|target| Direct::new(target, node)),
                    placement: Arc::clone(&router.placement),
                    marked: MarkedMonths::default(),
                };
                let citus =
                    node >= 0 && matches!(router.placement.get(), Some(Placement::Citus(_)));
                let wait = super::gather::wait(router.gather, citus);
                tokio::spawn(run(lane, node, receive, Gather::new(wait)));
                send
            });
            // A lane ends only when its writer does.
            let _ = lane.send(job);
        }
    }
}

/// Where each of `jobs` is: node 0 on plain PostgreSQL; on Citus the worker's group, or a
/// negative number where it is not known, and the shard.
async fn nodes(router: &Router, jobs: &[Job]) -> Vec<Where> {
    let orgs: Vec<Arc<str>> = jobs.iter().map(|job| Arc::clone(&job.new.org)).collect();
    let unknown = Where {
        node: UNKNOWN_NODE,
        shard: 0,
    };
    match router.placement.get() {
        Some(Placement::One) => vec![Where { node: 0, shard: 0 }; orgs.len()],
        _ => match placement(router).await {
            Some((placement, c)) => placement.nodes(&c, &orgs).await,
            None => vec![unknown; orgs.len()],
        },
    }
}

/// One lane: takes what waits in its queue (at most [`MAX_GROUP`]), commits it as one group
/// (or, for [`UNKNOWN_NODE`], one group an organization), answers, and again.
async fn run(
    mut writer: Writer,
    node: i64,
    mut queue: mpsc::UnboundedReceiver<Job>,
    mut gather: Gather,
) {
    while let Some(first) = queue.recv().await {
        let jobs = gather.take(first, &mut queue, MAX_GROUP).await;
        for jobs in in_lock_order(jobs, node == UNKNOWN_NODE) {
            let answers = commit_group(&mut writer, &jobs).await;
            for (job, answer) in jobs.into_iter().zip(answers) {
                let answer = answer.map(|outcome| outcome.recorded(job.new));
                // A caller that went away (cancelled) needs no answer.
                let _ = job.reply.send(answer);
            }
        }
    }
}

/// `jobs` in the order of their organizations' shards (on Citus), then of their ids, then
/// of their agents' keys: rows are locked in that order in every group of every process,
/// so two groups waiting on each other (a deadlock, broken by the database only after a
/// second) cannot happen. One group, or with `by_org` one group an organization.
fn in_lock_order(mut jobs: Vec<Job>, by_org: bool) -> Vec<Vec<Job>> {
    jobs.sort_by(|a, b| {
        (a.shard, &a.new.org, a.new.hint.seq).cmp(&(b.shard, &b.new.org, b.new.hint.seq))
    });
    if !by_org {
        return vec![jobs];
    }
    let mut groups: Vec<Vec<Job>> = Vec::new();
    for job in jobs {
        match groups.last_mut() {
            Some(group) if group[0].new.org == job.new.org => group.push(job),
            _ => groups.push(vec![job]),
        }
    }
    groups
}

/// The writer's placement (learned at its first decision) with a connection to ask it
/// more; none when no connection could be had.
async fn placement(router: &Router) -> Option<(&Placement, deadpool_postgres::Object)> {
    let c = router.pool.get().await.ok()?;
    let placement = router
        .placement
        .get_or_try_init(|| Placement::of(&c))
        .await
        .ok()?;
    Some((placement, c))
}

/// A connection for a group of `writer`: on Citus its own to its worker when it can be had,
/// else from the pool of the URL's node.
async fn connection(writer: &mut Writer) -> std::result::Result<deadpool_postgres::Object, Retry> {
    let on_citus = matches!(writer.placement.get(), Some(Placement::Citus(_)));
    if on_citus
        && let Some(direct) = writer.direct.as_mut()
        && let Some(c) = direct.connection(&writer.pool).await
    {
        return Ok(c);
    }
    writer
        .pool
        .get()
        .await
        .map_err(|e| Retry::Fail(crate::pool_error(e)))
}

/// What a group came to for each of its decisions: its outcome, or its error.
async fn commit_group(writer: &mut Writer, jobs: &[Job]) -> Vec<Result<Outcome>> {
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

/// What a failed call means for its group: rolled back (a statement's error, a claim found
/// swept, or a commit refused for a race), or unknown (a broken connection).
fn retry(e: tokio_postgres::Error) -> Retry {
    let rolled_back = e.code().is_some_and(|code| {
        let class = code.code();
        !(class.starts_with("08") || class.starts_with("57"))
    });
    if rolled_back {
        Retry::Alone(crate::pg_error(e))
    } else {
        Retry::Fail(crate::pg_error(e))
    }
}

/// One decision stored alone (after its group was rolled back), in a group of its own.
async fn alone(writer: &mut Writer, new: &NewDecision) -> Result<Outcome> {
    match try_group(writer, &[new]).await {
        Ok(mut outcome) => Ok(outcome.pop().unwrap_or(Outcome::Changed)),
        // The transaction lost a race (a distributed engine): nothing was stored, and the
        // decision is made again like one whose agent changed.
        Err(Retry::Alone(StorageError::Conflict)) => Ok(Outcome::Changed),
        Err(Retry::Alone(e) | Retry::Fail(e)) => Err(e),
    }
}

/// Stores a group (its decisions in the order of their organizations, then of their agents'
/// keys) on one connection, in one call ([`RECORD_CALL`]): one transaction that takes each
/// organization's seqs, holds its counter rows to the commit, and stores the group.
async fn try_group(
    writer: &mut Writer,
    news: &[&NewDecision],
) -> std::result::Result<Vec<Outcome>, Retry> {
    let statements: Vec<Option<RecordStatement>> =
        news.iter().map(|new| RecordStatement::of(new)).collect();
    let present: Vec<&RecordStatement> = statements.iter().flatten().collect();
    if present.is_empty() {
        // No agent was found when their states were read: read again.
        return Ok(vec![Outcome::Changed; news.len()]);
    }
    let c = connection(writer).await?;
    // Metrics (docs/operations.md): the group's size, and the time from sending it to its
    // commit's answer (the database's flush of its WAL included).
    metrics::histogram!(mandate_storage::WRITER_GROUP).record(present.len() as f64);
    let committing = std::time::Instant::now();
    let orgs = GroupOrgs::of(&present, &writer.marked);
    let at_once = matches!(writer.placement.get(), Some(Placement::One));
    let call = RecordCall::of(&present, &orgs, at_once);
    let record = c
        .prepare_cached(if at_once {
            RECORD_CALL
        } else {
            RECORD_CALL_CITUS
        })
        .await
        .map_err(|e| Retry::Fail(crate::pg_error(e)))?;
    let codes: Vec<i32> = c
        .query_one(&record, &call.values())
        .await
        .map_err(retry)?
        .get(0);
    metrics::histogram!("mandate_writer_commit_seconds").record(committing.elapsed().as_secs_f64());
    orgs.marked(&writer.marked, |org| {
        present
            .iter()
            .zip(&codes)
            .any(|(statement, code)| *code == 1 && statement.org() == org)
    });
    let mut codes = codes.into_iter();
    Ok(statements
        .iter()
        .map(|statement| match statement {
            Some(statement) => statement.outcome(codes.next().unwrap_or(0)),
            // The agent was not found when its state was read: read it again.
            None => Outcome::Changed,
        })
        .collect())
}
