//! Bounds on what clients can make the server hold: requests in flight, open connections,
//! and time spent waiting for a request's headers or body.
//!
//! Over [`Limits::max_in_flight`] requests, the API host answers at once with `503
//! server_error` and `Retry-After: 1` instead of queueing: a flood far beyond capacity is
//! shed, memory stays bounded, and every request still gets an answer. At
//! [`Limits::max_connections`] open connections, a new one closes the longest idle ones,
//! or is closed itself when every connection has a request in flight
//! ([`crate::http::connections`]). A connection that has not sent a whole request head within
//! [`Limits::header_read_timeout`] of being accepted is closed, and so is one that waits
//! longer than that for its next request head, or takes longer to send it (slowloris);
//! a request whose body has not arrived within [`Limits::body_read_timeout`] of its start
//! gets `400`. A request not answered within [`Limits::request_timeout`] (the database is
//! frozen, or a lock is held that long) gets `503` in the envelope: the caller retries with
//! its Idempotency-Key, which has one outcome whatever the first attempt comes to
//! ([`crate::http::idempotency`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::extract::Request;
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto::Builder;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use crate::http::error::ApiError;

/// The default of `serve --max-in-flight`.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1024;
/// The default cap on open connections per listener.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// The default time a client has to send a request's headers.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The default time a client has to send a request's body, from the request's start.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The default time a request may take before it is answered `503`: well under an
/// Idempotency-Key's claim (60 s), so that a retry finds the first attempt still claimed
/// rather than taken over.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The bounds a server runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Requests handled at once on the API host; more are answered 503 at once.
    pub max_in_flight: usize,
    /// Open connections per listener; beyond it the longest idle ones are closed.
    pub max_connections: usize,
    /// Time to receive the first request head from accept, and each later one from the
    /// end of the previous answer, before the connection is closed.
    pub header_read_timeout: Duration,
    /// Time to receive a request's body, from when its headers arrived.
    pub body_read_timeout: Duration,
    /// Time a request may take, from when it was admitted, before it is answered `503`.
    pub request_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

/// The cap on open connections of the admin host (`--admin-addr`, Prometheus scrapes).
pub const DEFAULT_MAX_ADMIN_CONNECTIONS: usize = 64;
/// File descriptors kept for everything but the listeners' connections: database
/// connections and files, the log, outgoing webhook deliveries.
pub const RESERVED_DESCRIPTORS: usize = 256;

/// The connection caps of the three listeners, set so that together they stay within the
/// process's file descriptors with [`RESERVED_DESCRIPTORS`] to spare: silent connections
/// to one listener (each shedding its longest idle at its cap) can never use the
/// descriptors the others, or the database, need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionCaps {
    /// The API host.
    pub api: usize,
    /// The public host.
    pub public: usize,
    /// The admin host.
    pub admin: usize,
}

impl ConnectionCaps {
    /// The caps for a process that may open `descriptors` files (`None`: unknown, no
    /// bound), each listener at most `max_connections` (the admin host at most
    /// [`DEFAULT_MAX_ADMIN_CONNECTIONS`]): the admin host gets a sixteenth of what is left
    /// after the reserve, the public host a quarter, the API host the rest.
    pub fn within(descriptors: Option<usize>, max_connections: usize) -> Self {
        let max = max_connections.max(1);
        let Some(descriptors) = descriptors else {
            return Self {
                api: max,
                public: max,
                admin: DEFAULT_MAX_ADMIN_CONNECTIONS,
            };
        };
        let left = descriptors.saturating_sub(RESERVED_DESCRIPTORS).max(24);
        let admin = (left / 16).clamp(2, DEFAULT_MAX_ADMIN_CONNECTIONS);
        let public = (left / 4).clamp(2, max);
        let api = left.saturating_sub(admin + public).clamp(2, max);
        Self { api, public, admin }
    }

    /// The caps for this process, from its limit on open files.
    pub fn of_process(max_connections: usize) -> Self {
        Self::within(open_files_limit(), max_connections)
    }
}

/// The soft limit on open files of this process (`RLIMIT_NOFILE`), read from
/// `/proc/self/limits`; `None` where there is no such file or no limit.
fn open_files_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// When the body of the request being served must have arrived; put into the request's
/// extensions by [`Gate::admit`] and honoured by every body reader.
#[derive(Debug, Clone, Copy)]
pub struct BodyDeadline(pub Instant);

impl BodyDeadline {
    /// The deadline in `request`'s extensions, or one [`DEFAULT_BODY_READ_TIMEOUT`] from now.
    pub fn of(request: &Request) -> Instant {
        request
            .extensions()
            .get::<BodyDeadline>()
            .map_or_else(|| Instant::now() + DEFAULT_BODY_READ_TIMEOUT, |d| d.0)
    }

    /// The 400 for a body that did not arrive in time.
    pub fn expired() -> ApiError {
        ApiError::InvalidRequest("the request body did not arrive in time".into())
    }
}

/// The in-flight gate of one router: permits, and the body timeout to stamp on requests.
#[derive(Clone)]
pub struct Gate {
    permits: Arc<Semaphore>,
    body_read_timeout: Duration,
    /// How long a request may take before it is answered `503`.
    pub request_timeout: Duration,
}

impl Gate {
    /// A gate for these limits.
    pub fn new(limits: &Limits) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(limits.max_in_flight.max(1))),
            body_read_timeout: limits.body_read_timeout,
            request_timeout: limits.request_timeout,
        }
    }
}

impl Gate {
    /// A permit for the request's lifetime, its body deadline stamped on it; `None` when
    /// the requests in flight are at the limit (the caller answers 503 at once).
    pub fn admit(&self, request: &mut Request) -> Option<OwnedSemaphorePermit> {
        let permit = self.permits.clone().try_acquire_owned().ok()?;
        request
            .extensions_mut()
            .insert(BodyDeadline(Instant::now() + self.body_read_timeout));
        Some(permit)
    }
}

/// How late a timer may fire before the process counts as not having run in between:
/// tokio fires a timer within milliseconds of its deadline while the process runs.
pub const STALL: Duration = Duration::from_secs(1);

/// A sleep until a deadline, counted in time the process ran.
///
/// A process stopped (SIGSTOP) or starved past a deadline wakes with its timers expired
/// and the requests sent to it meanwhile waiting in their sockets, and its timers may be
/// seen before the sockets' readiness: a header timeout measured across the stop would
/// close (and reset) connections whose requests had arrived in time. So a sleep that
/// fires more than [`STALL`] after its deadline sleeps again for as long as it was late
/// (at most `cap`): the time the process did not run is given back.
pub struct RunningSleep {
    sleep: Pin<Box<Sleep>>,
    deadline: Instant,
    cap: Duration,
}

impl RunningSleep {
    /// Sleeps until `deadline`, extended by at most `cap` each time it is seen late.
    pub fn until(deadline: Instant, cap: Duration) -> Self {
        Self {
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
            deadline,
            cap,
        }
    }

    /// Moves the deadline.
    pub fn reset(&mut self, deadline: Instant) {
        self.deadline = deadline;
        self.sleep.as_mut().reset(deadline);
    }
}

impl Future for RunningSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            ready!(self.sleep.as_mut().poll(cx));
            let now = Instant::now();
            let late = now.saturating_duration_since(self.deadline);
            if late <= STALL {
                return Poll::Ready(());
            }
            let extended = now + late.min(self.cap);
            self.reset(extended);
        }
    }
}

impl hyper::rt::Sleep for RunningSleep {}

/// hyper's timer (its header timeout) with [`RunningSleep`]s of `cap`.
#[derive(Debug, Clone, Copy)]
pub struct RunningTimer {
    cap: Duration,
}

impl hyper::rt::Timer for RunningTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(RunningSleep::until(Instant::now() + duration, self.cap))
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(RunningSleep::until(Instant::from_std(deadline), self.cap))
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, deadline: std::time::Instant) {
        match sleep.as_mut().downcast_mut_pin::<RunningSleep>() {
            Some(mut running) => running.reset(Instant::from_std(deadline)),
            None => *sleep = self.sleep_until(deadline),
        }
    }
}

/// Sets hyper's HTTP/1 header timeout on a listener's builder: it runs whenever hyper
/// waits for a request head, so it also closes a keep-alive connection idle that long (the
/// first head is bounded from accept, the TLS handshake included, by
/// [`crate::http::connections`]). Counted in time the process ran ([`RunningSleep`]).
pub fn configure(builder: &mut Builder<TokioExecutor>, limits: &Limits) {
    builder
        .http1()
        .timer(RunningTimer {
            cap: limits.header_read_timeout,
        })
        .header_read_timeout(limits.header_read_timeout);
}

/// Keeps a process-wide file-size limit (`RLIMIT_FSIZE`) from killing the server: with
/// `SIGXFSZ` handled, a write past the limit fails with `EFBIG`, which SQLite reports as an
/// I/O error and the API as a 5xx, like a full disk. Call once, inside the runtime.
pub fn survive_file_size_limit() {
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "x86", target_arch = "aarch64")
    ))]
    {
        const SIGXFSZ: i32 = 25;
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut signals) = signal(SignalKind::from_raw(SIGXFSZ)) {
            tokio::spawn(async move {
                while signals.recv().await.is_some() {
                    tracing::error!("a write went past the file size limit (SIGXFSZ)");
                }
            });
        }
    }
}

#[cfg(test)]
mod running_sleep_tests {
    use super::*;

    fn pending(sleep: &mut RunningSleep) -> bool {
        Pin::new(sleep)
            .poll(&mut Context::from_waker(std::task::Waker::noop()))
            .is_pending()
    }

    /// A sleep seen more than [`STALL`] after its deadline (the runtime's one thread
    /// blocked past it: the process did not run) sleeps again for the time it was late, at
    /// most `cap`; then it ends. The stall is the fault under test, not a wait for a state.
    #[tokio::test(flavor = "current_thread")]
    async fn a_sleep_seen_late_gives_back_the_time_the_process_did_not_run() {
        let cap = Duration::from_millis(400);
        let mut sleep = RunningSleep::until(Instant::now() + Duration::from_millis(50), cap);
        assert!(pending(&mut sleep));
        std::thread::sleep(Duration::from_millis(1_500));
        let seen = Instant::now();
        assert!(pending(&mut sleep), "a sleep seen 1.45 s late ended");
        (&mut sleep).await;
        assert!(seen.elapsed() >= cap, "ended after {:?}", seen.elapsed());
    }

    /// Seen on time, it ends at its deadline.
    #[tokio::test(flavor = "current_thread")]
    async fn a_sleep_seen_on_time_ends_at_its_deadline() {
        let started = Instant::now();
        RunningSleep::until(started + Duration::from_millis(50), Duration::from_secs(10)).await;
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

#[cfg(test)]
mod caps_tests {
    use super::*;

    /// However few descriptors, the three caps and the reserve fit in them (down to the
    /// smallest caps), and none is over its maximum.
    #[test]
    fn the_caps_share_the_descriptors_and_leave_the_reserve() {
        for descriptors in [300, 400, 1024, 4096, 20_000, 1_048_576] {
            let caps = ConnectionCaps::within(Some(descriptors), DEFAULT_MAX_CONNECTIONS);
            assert!(
                caps.api + caps.public + caps.admin + RESERVED_DESCRIPTORS <= descriptors,
                "{descriptors}: {caps:?}"
            );
            assert!(caps.api <= DEFAULT_MAX_CONNECTIONS && caps.public <= DEFAULT_MAX_CONNECTIONS);
            assert!(caps.admin <= DEFAULT_MAX_ADMIN_CONNECTIONS && caps.admin >= 2);
            assert!(caps.api >= caps.public, "{caps:?}");
        }
        let unknown = ConnectionCaps::within(None, 100);
        assert_eq!((unknown.api, unknown.public), (100, 100));
    }
}
