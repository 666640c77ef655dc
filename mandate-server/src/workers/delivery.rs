//! The delivery worker: POSTs each event, signed at delivery time, to every endpoint it is
//! owed to, and runs the time-driven state ([`crate::workers::timers`]) on the same tick.
//!
//! It reads the deliveries whose `next_attempt_ms` has come by the injected clock: of an
//! organization this process appended events to, at once (its [`News`](crate::model::news::News));
//! of every organization, with the time-driven state, when this process sweeps, every
//! [`SWEEP_EVERY`](super::SWEEP_EVERY) (retries coming due, and the deliveries of a process
//! that died). It starts each attempt as its own task, at most
//! [`MAX_CONCURRENT`] in all and [`PER_WEBHOOK`] per endpoint, so a slow or dead receiver
//! never holds up another, nor the API (no transaction is open during HTTP). What follows
//! an attempt is decided by `mandate_protocol::delivery::after_attempt` and written with the
//! attempt in one transaction. All state is in the database: a restarted server picks up where
//! the last one stopped, and an attempt cut short by a crash is simply made again (events
//! are at-least-once; receivers de-duplicate on `jti`). On a database shared by several
//! processes each runs this worker: the store claims the deliveries it hands out for this
//! process until the attempt is recorded (or they are given back), so that no two
//! processes attempt one at once.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mandate_core::{EventClaims, sign_token};
use mandate_protocol::{
    delivery::NextStep, delivery::after_attempt, delivery::window_closed, id::WebhookId,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::clock::{fill_random, from_ms, ms};
use crate::model::Env;
use crate::ssrf::{self, GuardedResolver};
use crate::storage::StorageError;
use crate::storage::deliveries::{Attempt, DeliveryChange, DeliveryKey, DeliveryState, Due};
use crate::workers::{Context, SweepTimer, timers};

/// How often the worker looks for due work (real time).
pub const TICK: Duration = Duration::from_millis(50);

/// How long one attempt may take, connection included.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Attempts in flight at once, in all.
pub const MAX_CONCURRENT: usize = 64;
/// Attempts in flight at once to one endpoint.
pub const PER_WEBHOOK: usize = 4;
/// How long a stopping worker lets attempts in flight finish.
const DRAIN: Duration = Duration::from_secs(10);

/// The running worker.
pub struct Worker {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// One HTTP client per environment: each judges DNS answers by its environment's rules.
struct Clients {
    sandbox: reqwest::Client,
    live: reqwest::Client,
}

fn client(env: Env) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(ATTEMPT_TIMEOUT)
        .connect_timeout(ATTEMPT_TIMEOUT)
        .no_proxy()
        // No pooled connections: every delivery resolves, and judges, the host again.
        .pool_max_idle_per_host(0)
        .dns_resolver(Arc::new(GuardedResolver(env)))
        .user_agent(concat!("mandate-webhooks/", env!("CARGO_PKG_VERSION")))
        .build()
}

impl Worker {
    /// Starts the worker on the current tokio runtime.
    pub fn start(context: Context) -> reqwest::Result<Worker> {
        let clients = Arc::new(Clients {
            sandbox: client(Env::Sandbox)?,
            live: client(Env::Live)?,
        });
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(Arc::new(context), clients, stopped));
        Ok(Worker { stop, task })
    }

    /// Stops picking up work, lets attempts in flight finish (up to 10 s), and returns.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        if let Err(e) = self.task.await {
            tracing::error!("delivery worker: {e}");
        }
    }
}

/// Deliveries in flight, so that a tick never starts a second attempt of one.
#[derive(Default)]
struct InFlight {
    deliveries: HashSet<DeliveryKey>,
    per_webhook: HashMap<WebhookId, usize>,
    /// When each recent attempt ended. A pick whose read began before that saw the
    /// delivery as it was before the attempt was recorded, so it must not start another.
    finished: HashMap<DeliveryKey, std::time::Instant>,
}

/// Holds a delivery's place in [`InFlight`] until the attempt ends, however it ends.
struct Claim {
    in_flight: Arc<Mutex<InFlight>>,
    delivery: DeliveryKey,
    webhook: WebhookId,
}

/// Why a picked delivery is not attempted now.
enum Refused {
    /// It is being attempted here, or its attempt ended after the pick read it.
    Attempted,
    /// Its endpoint has as many attempts in flight as it may.
    Busy,
}

impl Claim {
    fn take(
        in_flight: &Arc<Mutex<InFlight>>,
        due: &Due,
        picked_at: std::time::Instant,
    ) -> Result<Claim, Refused> {
        let mut set = in_flight.lock().unwrap_or_else(|p| p.into_inner());
        if set
            .finished
            .get(&due.id)
            .is_some_and(|ended| *ended >= picked_at)
            || set.deliveries.contains(&due.id)
        {
            return Err(Refused::Attempted);
        }
        let busy = set.per_webhook.get(&due.webhook_id).copied().unwrap_or(0);
        if busy >= PER_WEBHOOK {
            return Err(Refused::Busy);
        }
        set.deliveries.insert(due.id.clone());
        *set.per_webhook.entry(due.webhook_id.clone()).or_default() += 1;
        Ok(Claim {
            in_flight: in_flight.clone(),
            delivery: due.id.clone(),
            webhook: due.webhook_id.clone(),
        })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut set = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        set.deliveries.remove(&self.delivery);
        set.finished
            .insert(self.delivery.clone(), std::time::Instant::now());
        if let Some(n) = set.per_webhook.get_mut(&self.webhook) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                set.per_webhook.remove(&self.webhook);
            }
        }
    }
}

async fn run(context: Arc<Context>, clients: Arc<Clients>, mut stopped: watch::Receiver<bool>) {
    let in_flight = Arc::new(Mutex::new(InFlight::default()));
    let permits = Arc::new(Semaphore::new(MAX_CONCURRENT));
    let mut attempts = JoinSet::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sweep = SweepTimer::default();
    // Organizations whose due deliveries did not all fit: read again at the next tick.
    let mut again: HashSet<Arc<str>> = HashSet::new();
    loop {
        tokio::select! {
            _ = stopped.changed() => break,
            _ = tick.tick() => {}
            () = context.news.wait_for_events() => {}
        }
        while attempts.try_join_next().is_some() {}
        {
            // Forget attempts that ended before any pick still running could have begun.
            let mut set = in_flight.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(horizon) =
                std::time::Instant::now().checked_sub(std::time::Duration::from_secs(60))
            {
                set.finished.retain(|_, ended| *ended > horizon);
            }
        }
        let sweeping = sweep.due(context.sweeper.sweeps());
        if sweeping {
            sweep_time_driven(&context).await;
        }
        // What to read: every organization when sweeping, else those with news.
        let mut news: Vec<Arc<str>> = context.news.take_events();
        news.extend(again.drain());
        let reads: Vec<Option<Arc<str>>> = if sweeping {
            vec![None]
        } else {
            news.sort();
            news.dedup();
            news.into_iter().map(Some).collect()
        };
        for org in reads {
            let started = Started {
                context: &context,
                clients: &clients,
                in_flight: &in_flight,
                permits: &permits,
            };
            let left = start_due(started, org.as_deref(), &mut attempts).await;
            again.extend(left);
        }
    }
    let drain = async { while attempts.join_next().await.is_some() {} };
    if tokio::time::timeout(DRAIN, drain).await.is_err() {
        attempts.abort_all();
    }
}

/// The sweeper's time-driven work: review expiry and `mandate.expiring`, and, while metrics
/// are served, the pending deliveries and reviews counted (reads of every organization).
async fn sweep_time_driven(context: &Context) {
    if let Err(e) = timers::run(context).await {
        tracing::error!("time-driven state: {e}");
    }
    if crate::telemetry::enabled() {
        match context.store.backlog().await {
            Ok(backlog) => {
                metrics::gauge!(crate::telemetry::PENDING_DELIVERIES)
                    .set(backlog.deliveries as f64);
                metrics::gauge!(crate::telemetry::PENDING_REVIEWS).set(backlog.reviews as f64);
            }
            Err(e) => tracing::error!("counting pending deliveries and reviews: {e}"),
        }
    }
}

/// What starting attempts needs.
#[derive(Clone, Copy)]
struct Started<'a> {
    context: &'a Arc<Context>,
    clients: &'a Arc<Clients>,
    in_flight: &'a Arc<Mutex<InFlight>>,
    permits: &'a Arc<Semaphore>,
}

/// Reads the deliveries due (of `org`, or of every organization) and starts an attempt of
/// each that has room; those without room are given back, so that any process may take
/// them at once, and their organizations returned, to be read again at the next tick.
async fn start_due(
    started: Started<'_>,
    org: Option<&str>,
    attempts: &mut JoinSet<()>,
) -> HashSet<Arc<str>> {
    let Started {
        context,
        clients,
        in_flight,
        permits,
    } = started;
    let picked_at = std::time::Instant::now();
    let due = match pick(context, org).await {
        Ok(due) => due,
        Err(e) => {
            tracing::error!("reading due deliveries: {e}");
            return HashSet::new();
        }
    };
    // Picked but left for later (no room): given back (an engine shared by processes
    // claimed them for this one).
    let mut left = Vec::new();
    let mut due = due.into_iter();
    for due in due.by_ref() {
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            left.push(due.id);
            break;
        };
        let claim = match Claim::take(in_flight, &due, picked_at) {
            Ok(claim) => claim,
            Err(Refused::Busy) => {
                left.push(due.id);
                continue;
            }
            Err(Refused::Attempted) => continue,
        };
        let (context, clients) = (context.clone(), clients.clone());
        attempts.spawn(attempt(context, clients, due, claim, permit));
    }
    left.extend(due.map(|d| d.id));
    let orgs = left
        .iter()
        .map(|id| Arc::from(id.org_id.as_str()))
        .collect();
    if !left.is_empty()
        && let Err(e) = context.store.release_deliveries(left).await
    {
        tracing::error!("giving back deliveries left for later: {e}");
    }
    orgs
}

/// The deliveries due now, of `org` or of every organization.
async fn pick(context: &Context, org: Option<&str>) -> Result<Vec<Due>, StorageError> {
    let now_ms = ms(context.now());
    let per_webhook = i64::try_from(PER_WEBHOOK * 2).unwrap_or(8);
    match org {
        Some(org) => {
            context
                .store
                .due_deliveries_of(org, now_ms, per_webhook, 256)
                .await
        }
        None => context.store.due_deliveries(now_ms, per_webhook, 256).await,
    }
}

/// What an attempt writes, followed by `next`: delivered, due again at the retry's time,
/// or given up; the failure is the attempt's error, or its non-2xx status as `HTTP <n>`.
pub fn attempted(attempt: Attempt, next: NextStep, now_ms: i64) -> DeliveryChange {
    let last_error = attempt.error.clone().or_else(|| {
        attempt
            .status
            .filter(|s| !(200..300).contains(s))
            .map(|s| format!("HTTP {s}"))
    });
    let (state, next_attempt_ms, finished_ms) = match next {
        NextStep::Delivered => (DeliveryState::Delivered, None, Some(now_ms)),
        NextStep::RetryAt(at) => (DeliveryState::Pending, Some(ms(at)), None),
        NextStep::GiveUp => (DeliveryState::Failed, None, Some(now_ms)),
    };
    DeliveryChange {
        attempts: attempt.attempt,
        attempt: Some(attempt),
        state,
        next_attempt_ms,
        last_error,
        finished_ms,
    }
}

/// What giving a delivery up without another attempt writes, after `attempts` made, for
/// `reason`, at `at_ms`.
pub fn given_up(attempts: u32, reason: &str, at_ms: i64) -> DeliveryChange {
    DeliveryChange {
        attempt: None,
        attempts,
        state: DeliveryState::Failed,
        next_attempt_ms: None,
        last_error: Some(reason.to_owned()),
        finished_ms: Some(at_ms),
    }
}

fn jitter_byte() -> u8 {
    let mut byte = [0u8; 1];
    fill_random(&mut byte);
    byte[0]
}

async fn attempt(
    context: Arc<Context>,
    clients: Arc<Clients>,
    due: Due,
    _claim: Claim,
    _permit: OwnedSemaphorePermit,
) {
    let at = context.now();
    let at_ms = ms(at);
    let id = due.id.clone();
    let event_created = from_ms(due.event_created_ms);
    let result = if window_closed(event_created, at) {
        let reason = "the 24-hour delivery window ended before another attempt";
        metrics::counter!(crate::telemetry::DELIVERIES, "outcome" => "gave_up").increment(1);
        let change = given_up(due.attempts, reason, at_ms);
        context.store.record_delivery(id, change).await
    } else {
        let started = Instant::now();
        let (status, error) = match send(&context, &clients, &due, at_ms).await {
            Ok(status) => (Some(status), None),
            Err(error) => (None, Some(error)),
        };
        let attempt = Attempt {
            attempt: due.attempts + 1,
            at_ms,
            status,
            latency_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
            error,
        };
        let now = context.now();
        let now_ms = ms(now);
        let next = after_attempt(status, attempt.attempt, event_created, now, jitter_byte());
        let outcome = match next {
            NextStep::Delivered => "delivered",
            NextStep::RetryAt(_) => "retry",
            NextStep::GiveUp => "gave_up",
        };
        metrics::counter!(crate::telemetry::DELIVERIES, "outcome" => outcome).increment(1);
        match next {
            NextStep::Delivered => {}
            NextStep::RetryAt(_) | NextStep::GiveUp => {
                // The next attempt as the API shows it (GET /v1/events/{id}): a UTC time.
                let next_attempt = match next {
                    NextStep::RetryAt(at) => mandate_protocol::timefmt::format(at),
                    _ => "none (given up)".to_owned(),
                };
                tracing::info!(
                    event = %due.event_id, webhook = %due.webhook_id, attempt = attempt.attempt,
                    status = ?status, error = ?attempt.error, next_attempt = %next_attempt,
                    "webhook delivery attempt failed"
                );
            }
        }
        let change = attempted(attempt, next, now_ms);
        context.store.record_delivery(id, change).await
    };
    if let Err(e) = result {
        tracing::error!(
            event = %due.event_id, webhook = %due.webhook_id,
            "recording a delivery attempt: {e}"
        );
    }
}

/// Makes one attempt, signed as of `at_ms` (the attempt's time): the HTTP status, or why
/// no answer came.
async fn send(context: &Context, clients: &Clients, due: &Due, at_ms: i64) -> Result<u16, String> {
    let env = due.env;
    // The stored URL is judged again: rules apply at every delivery, not only at registration.
    let url = ssrf::check_url(&due.url, env).map_err(|e| e.to_string())?;
    // Each attempt is signed when it is sent and lives five minutes, so a captured event
    // can't be replayed to the receiver later; `jti`, `type` and `data` never change.
    let iat = at_ms.div_euclid(1000);
    let claims = EventClaims {
        iss: context.issuer.clone(),
        jti: due.event_id.clone(),
        iat,
        exp: iat + mandate_protocol::claims::EVENT_LIFETIME_SECS,
        event_type: due.event_type.clone(),
        data: due.data.clone(),
    };
    let signer = context
        .signer(env)
        .ok_or_else(|| format!("no signing key for {}", env.as_str()))?;
    let token = sign_token(signer.as_ref(), &claims).map_err(|e| format!("signing: {e}"))?;
    let client = match env {
        Env::Sandbox => &clients.sandbox,
        Env::Live => &clients.live,
    };
    let response = client
        .post(url.url)
        .header(reqwest::header::CONTENT_TYPE, "application/jwt")
        .body(token)
        .send()
        .await
        .map_err(|e| describe(&e))?;
    Ok(response.status().as_u16())
}

/// A transport error in a line: what happened and why, without the URL (also the
/// witnesses': `super::witness`).
pub(super) fn describe(error: &reqwest::Error) -> String {
    let what = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    let mut text = what.to_owned();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text.chars().take(500).collect()
}
