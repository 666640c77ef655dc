//! Metrics in the Prometheus text format, served on the admin listener (`--admin-addr`,
//! `app::admin`).
//!
//! The code records through the `metrics` macros everywhere; without an admin listener no
//! recorder is installed and every macro is a no-op. With one, the process-wide recorder
//! keeps an atomic per series and renders the text format on `GET /metrics`. Label values
//! are bounded: route templates, statuses, environments, verdicts; never ids or names.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::Duration;

use axum::extract::MatchedPath;
use axum::http::StatusCode;
use axum::response::Response;
use metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Decisions committed: `env`, `verdict`, `policy_verdict`.
pub const DECISIONS: &str = "mandate_decisions_total";
/// API requests answered: `route` (template or `unmatched`), `status`.
pub const HTTP_REQUESTS: &str = "mandate_http_requests_total";
/// API request latency, first byte of the request to the response head: `route`.
pub const HTTP_DURATION: &str = "mandate_http_request_duration_seconds";
/// API requests refused with 429 by the caller's rate.
pub const RATE_LIMITED: &str = "mandate_rate_limited_total";
/// API requests refused with 503 by the in-flight gate.
pub const SHED: &str = "mandate_overload_shed_total";

/// Checkpoints submitted to witnesses: `witness` (its configured name), `outcome`
/// (`cosigned`, `rolled_back`, `forked`, `failed`, `skipped`: not
/// reached a moment ago).
pub const WITNESS_SUBMISSIONS: &str = "mandate_witness_submissions_total";

/// The round trip of an add-checkpoint request a witness answered, in seconds: `witness`.
pub const WITNESS_ROUND_TRIP: &str = "mandate_witness_round_trip_seconds";

/// Webhook delivery attempts: `outcome` (`delivered`, `retry`, `gave_up`).
pub const DELIVERIES: &str = "mandate_webhook_deliveries_total";
/// Webhook deliveries pending (counted once a second).
pub const PENDING_DELIVERIES: &str = "mandate_webhook_deliveries_pending";
/// Reviews pending (counted once a second).
pub const PENDING_REVIEWS: &str = "mandate_reviews_pending";
/// Decisions the decision log's worker refused to append, each round it refused one:
/// `env`.
pub const LOG_REFUSED: &str = "mandate_log_refused_total";
/// Jobs per commit of the storage writer (recorded by the engines' writers).
pub use mandate_storage::WRITER_GROUP;

/// Group-size buckets: up to the writer's largest group (256).
const GROUP_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// Latency buckets in seconds, from 100 µs to 10 s.
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Whether a recorder is installed (the admin listener is on): a relaxed load of the
/// once-cell's state.
#[inline]
pub fn enabled() -> bool {
    HANDLE.get().is_some()
}

/// Serializes [`install`]: two first calls at once must not both try to set the global
/// recorder (the second would fail with "already initialized").
static INSTALLING: Mutex<()> = Mutex::new(());

/// Installs the process-wide recorder (once; later calls, also concurrent ones, return the
/// same handle).
pub fn install() -> Result<PrometheusHandle, String> {
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let _installing = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let recorder = PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(WRITER_GROUP.into()), GROUP_BUCKETS))
        .map_err(|e| format!("metrics buckets: {e}"))?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| format!("metrics recorder: {e}"))?;
    let handle = HANDLE.get_or_init(|| handle).clone();
    describe();
    // Histograms' recent-value windows are drained by upkeep; once a few seconds is enough.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// The `# HELP` line of every metric.
fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        DECISIONS,
        "Decisions committed, by environment, verdict and policy verdict."
    );
    describe_counter!(
        HTTP_REQUESTS,
        "API requests answered, by route template and status."
    );
    describe_histogram!(
        HTTP_DURATION,
        "API request latency to the response head, by route template."
    );
    describe_counter!(
        RATE_LIMITED,
        "API requests refused with 429 by the caller's rate."
    );
    describe_counter!(SHED, "API requests refused with 503 by the in-flight gate.");
    describe_counter!(DELIVERIES, "Webhook delivery attempts, by outcome.");
    describe_counter!(
        LOG_REFUSED,
        "Decisions the decision log refused to append (a token that does not verify)."
    );
    describe_counter!(
        WITNESS_SUBMISSIONS,
        "Checkpoints submitted to witnesses, by witness and outcome."
    );
    describe_histogram!(
        WITNESS_ROUND_TRIP,
        "Round trip of an add-checkpoint request a witness answered, by witness."
    );
    describe_gauge!(PENDING_DELIVERIES, "Webhook deliveries pending.");
    describe_gauge!(PENDING_REVIEWS, "Reviews pending.");
    describe_histogram!(WRITER_GROUP, "Jobs per commit of the storage writer.");
    describe_histogram!(
        "mandate_writer_commit_seconds",
        "Time of the storage writer's COMMIT."
    );
    describe_histogram!(
        "mandate_writer_sync_seconds",
        "Time of one WAL sync (covering one or more commits)."
    );
}

/// Handles of the series recorded on every request, made once per label set: recording
/// is then an atomic add on a handle found under a read lock, instead of building the
/// labels (two strings) and looking the series up in the recorder's registry each time.
#[derive(Default)]
struct Series {
    /// Per route template: its latency histogram and its counters by status.
    routes: RwLock<HashMap<Box<str>, RouteSeries>>,
    /// Decisions by (environment, verdict, policy verdict).
    decisions: RwLock<HashMap<DecisionLabels, Counter>>,
}

type DecisionLabels = (&'static str, &'static str, &'static str);

struct RouteSeries {
    duration: Histogram,
    by_status: Vec<(u16, Counter)>,
}

static SERIES: OnceLock<Series> = OnceLock::new();

fn series() -> &'static Series {
    SERIES.get_or_init(Series::default)
}

/// Counts an answered API request and its latency under its route template. Without a
/// recorder, nothing.
pub fn record_request(response: &Response, started: std::time::Instant) {
    if !enabled() {
        return;
    }
    let route = response
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str);
    let status = response.status();
    if status == StatusCode::TOO_MANY_REQUESTS {
        metrics::counter!(RATE_LIMITED).increment(1);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let code = status.as_u16();
    let routes = &series().routes;
    {
        let known = routes.read().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = known.get(route)
            && let Some((_, counter)) = entry.by_status.iter().find(|(s, _)| *s == code)
        {
            entry.duration.record(elapsed);
            counter.increment(1);
            return;
        }
    }
    // First request of this route and status: make its handles.
    let mut known = routes.write().unwrap_or_else(|p| p.into_inner());
    let entry = known.entry(route.into()).or_insert_with(|| RouteSeries {
        duration: metrics::histogram!(HTTP_DURATION, "route" => route.to_owned()),
        by_status: Vec::new(),
    });
    if !entry.by_status.iter().any(|(s, _)| *s == code) {
        let counter = metrics::counter!(
            HTTP_REQUESTS,
            "route" => route.to_owned(),
            "status" => code.to_string()
        );
        entry.by_status.push((code, counter));
    }
    entry.duration.record(elapsed);
    if let Some((_, counter)) = entry.by_status.iter().find(|(s, _)| *s == code) {
        counter.increment(1);
    }
}

/// Counts a committed decision by environment, verdict and policy verdict. Without a
/// recorder, nothing.
pub fn record_decision(env: &'static str, verdict: &'static str, policy_verdict: &'static str) {
    if !enabled() {
        return;
    }
    let labels = (env, verdict, policy_verdict);
    let decisions = &series().decisions;
    if let Some(counter) = decisions
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&labels)
    {
        counter.increment(1);
        return;
    }
    decisions
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .entry(labels)
        .or_insert_with(|| {
            metrics::counter!(
                DECISIONS,
                "env" => env,
                "verdict" => verdict,
                "policy_verdict" => policy_verdict
            )
        })
        .increment(1);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::{Arc, Barrier};

    /// Servers of one process (tests start many) may install the recorder at the same
    /// moment; every one of them gets the one handle.
    #[test]
    fn concurrent_first_installs_all_get_the_one_recorder() {
        const THREADS: usize = 8;
        let start = Arc::new(Barrier::new(THREADS));
        let installs: Vec<_> = (0..THREADS)
            .map(|_| {
                let start = Arc::clone(&start);
                std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_time()
                        .build()
                        .unwrap();
                    start.wait();
                    runtime.block_on(async { super::install().map(|h| h.render()) })
                })
            })
            .collect();
        for install in installs {
            let rendered = install.join().unwrap();
            assert!(
                rendered.is_ok(),
                "a concurrent install failed: {:?}",
                rendered.err()
            );
        }
        assert!(super::enabled());
    }
}
