//! Bounds on what clients can make the server hold: requests in flight, open connections,
//! and time spent waiting for a request's headers or body.
//!
//! Over [`Limits::max_in_flight`] requests, the API host answers at once with `503
//! server_error` and `Retry-After: 1` instead of queueing: a flood far beyond capacity is
//! shed, memory stays bounded, and every request still gets an answer. Over
//! [`Limits::max_connections`] open connections, a new connection is closed as soon as it is
//! accepted. A client that has not sent its whole header within
//! [`Limits::header_read_timeout`] is disconnected (slowloris); one whose body has not
//! arrived within [`Limits::body_read_timeout`] of the request's start gets `400`.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::Request;
use axum_server::accept::Accept;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::http::error::ApiError;

/// The default of `serve --max-in-flight`.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1024;
/// The default cap on open connections per listener.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// The default time a client has to send a request's headers.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The default time a client has to send a request's body, from the request's start.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The bounds a server runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Requests handled at once on the API host; more are answered 503 at once.
    pub max_in_flight: usize,
    /// Open connections per listener; more are closed when accepted.
    pub max_connections: usize,
    /// Time to receive a request's headers before the connection is closed.
    pub header_read_timeout: Duration,
    /// Time to receive a request's body, from when its headers arrived.
    pub body_read_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
        }
    }
}

/// When the body of the request being served must have arrived; put into the request's
/// extensions by [`shed`] and honoured by every body reader.
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
}

impl Gate {
    /// A gate for these limits.
    pub fn new(limits: &Limits) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(limits.max_in_flight.max(1))),
            body_read_timeout: limits.body_read_timeout,
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

/// Sets the HTTP/1 header timeout (with the timer it needs) on a listener's builder.
pub fn configure(builder: &mut Builder<TokioExecutor>, limits: &Limits) {
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
}

/// An acceptor that holds one of a fixed number of permits for each open connection and
/// closes connections beyond them.
#[derive(Clone)]
pub struct CountedAcceptor<A> {
    inner: A,
    permits: Arc<Semaphore>,
}

impl<A> CountedAcceptor<A> {
    /// Wraps `inner`, allowing `max` connections at once.
    pub fn new(inner: A, max: usize) -> Self {
        Self {
            inner,
            permits: Arc::new(Semaphore::new(max.max(1))),
        }
    }
}

impl<A, I, S> Accept<I, S> for CountedAcceptor<A>
where
    A: Accept<I, S>,
    A::Future: Send + 'static,
{
    type Stream = Counted<A::Stream>;
    type Service = A::Service;
    type Future =
        Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send + 'static>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let permit = self.permits.clone().try_acquire_owned();
        let accepted = self.inner.accept(stream, service);
        Box::pin(async move {
            // Dropping the stream (an error here) closes the connection.
            let permit = permit
                .map_err(|_| io::Error::other("too many open connections; closing this one"))?;
            let (stream, service) = accepted.await?;
            Ok((
                Counted {
                    inner: stream,
                    _permit: permit,
                },
                service,
            ))
        })
    }
}

/// A connection counted against [`CountedAcceptor`]'s cap until it is dropped.
pub struct Counted<T> {
    inner: T,
    _permit: OwnedSemaphorePermit,
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
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
