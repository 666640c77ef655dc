//! What an open connection may hold, from the moment it is accepted.
//!
//! Every accepted connection of a listener is registered in its [`Connections`]:
//!
//! - **First request head.** A connection that has not handed a complete request head to
//!   the service within [`Limits::header_read_timeout`] of being accepted (the TLS
//!   handshake included) is closed. hyper's own header timer covers neither the handshake
//!   nor, when it detects the protocol, the wait for the first byte: a socket that sent
//!   nothing was held for ever. The deadline counts time the process ran
//!   ([`RunningSleep`]), and past it what is already in the socket is still read (as
//!   hyper's own timer does): a process stopped (SIGSTOP) longer than the timeout answers
//!   the requests sent to it meanwhile instead of closing (resetting) their connections.
//! - **Cap and eviction.** At [`Limits::max_connections`], a new connection makes room by
//!   closing the connections that have been idle longest (no request in flight: silent
//!   sockets, unfinished heads, keep-alive connections between requests), enough of them
//!   to leave an eighth of the cap free for the next newcomers. Only when every
//!   connection has a request in flight is the newcomer closed.
//! - **hyper's own answers.** hyper answers a request head it cannot parse (a byte that
//!   is not ASCII in the path, too many or too large headers, an over-long URI) itself,
//!   with a bare 4xx before any service runs. [`Answered`] replaces that answer, as it is
//!   written, with the spec's envelope and a request id.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::http::Response;
use axum_server::accept::Accept;
use futures_util::task::AtomicWaker;
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tower::Service;

use crate::http::error::unparsed_request_answer;
use crate::http::limits::{Limits, RunningSleep};

/// The open connections of one listener.
pub struct Connections {
    max: usize,
    /// How many connections one eviction round closes at most: the share of the cap kept
    /// free for newcomers once it has been reached.
    reserve: usize,
    header_timeout: Duration,
    epoch: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
}

/// One connection's state, shared by its stream and its service.
struct Conn {
    id: u64,
    /// A complete request head has reached the service.
    headed: AtomicBool,
    /// Requests handed to the service whose response body has not been sent whole.
    in_flight: AtomicUsize,
    /// When it last became idle (accepted, or its last response sent), in ms from the
    /// registry's epoch: eviction takes the smallest first.
    idle_since: AtomicU64,
    /// Set to close the connection: its next read ends the stream.
    closing: AtomicBool,
    /// The task reading the connection, woken to see `closing`.
    reader: AtomicWaker,
}

impl Conn {
    fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.reader.wake();
    }
}

impl Connections {
    /// The registry of one listener with `limits`' cap and header timeout.
    pub fn new(limits: &Limits) -> Arc<Self> {
        let max = limits.max_connections.max(1);
        Arc::new(Self {
            max,
            reserve: (max / 8).max(1),
            header_timeout: limits.header_read_timeout,
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Registers a new connection, closing the longest idle ones first if the cap is
    /// reached; `None` when it is reached and every connection has a request in flight.
    fn admit(self: &Arc<Self>) -> Option<Registration> {
        let mut open = self.lock();
        if open.len() >= self.max {
            let mut idle: Vec<(u64, u64)> = open
                .values()
                .filter(|c| c.in_flight.load(Ordering::Acquire) == 0)
                .map(|c| (c.idle_since.load(Ordering::Relaxed), c.id))
                .collect();
            if idle.is_empty() {
                return None;
            }
            let evicted = self.reserve.min(idle.len());
            idle.select_nth_unstable(evicted - 1);
            for (_, id) in &idle[..evicted] {
                if let Some(conn) = open.remove(id) {
                    conn.close();
                }
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            id,
            headed: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(self.now_ms()),
            closing: AtomicBool::new(false),
            reader: AtomicWaker::new(),
        });
        open.insert(id, conn.clone());
        Some(Registration {
            registry: self.clone(),
            conn,
        })
    }
}

/// A connection's place in its registry, given back when the connection is dropped.
struct Registration {
    registry: Arc<Connections>,
    conn: Arc<Conn>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.conn.id);
    }
}

/// The acceptor of a listener: registers each connection (see the module doc) and wraps
/// `inner` (plain, or TLS) between [`Watched`] below and [`Answered`] above.
#[derive(Clone)]
pub struct Guard<A> {
    inner: A,
    connections: Arc<Connections>,
}

impl<A> Guard<A> {
    /// Guards `inner` with the limits of `connections`.
    pub fn new(inner: A, connections: Arc<Connections>) -> Self {
        Self { inner, connections }
    }
}

impl<A, I, S> Accept<I, S> for Guard<A>
where
    A: Accept<Watched<I>, S>,
    A::Future: Send + 'static,
{
    type Stream = Answered<A::Stream>;
    type Service = Marked<A::Service>;
    type Future =
        Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send + 'static>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let epoch = self.connections.epoch;
        let header_timeout = self.connections.header_timeout;
        let deadline = Instant::now() + header_timeout;
        // Not admitted, the stream is dropped here, which closes it.
        let accepted = self.connections.admit().map(|registration| {
            let conn = registration.conn.clone();
            let watched = Watched {
                inner: stream,
                deadline: Some(RunningSleep::until(deadline, header_timeout)),
                registration,
            };
            (self.inner.accept(watched, service), conn)
        });
        Box::pin(async move {
            let (accepted, conn) = accepted.ok_or_else(|| {
                io::Error::other("every connection has a request in flight; closing this one")
            })?;
            let (stream, service) = accepted.await?;
            Ok((
                Answered::new(stream),
                Marked {
                    inner: service,
                    conn,
                    epoch,
                },
            ))
        })
    }
}

/// The accepted socket, below TLS: its reads end (EOF) once the connection is evicted or
/// its first request head is late.
pub struct Watched<T> {
    inner: T,
    /// Until the first request head reaches the service, counted in time the process ran.
    deadline: Option<RunningSleep>,
    registration: Registration,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let conn = &this.registration.conn;
        conn.reader.register(cx.waker());
        if conn.closing.load(Ordering::Acquire) {
            return Poll::Ready(Ok(()));
        }
        let late = match &mut this.deadline {
            Some(_) if conn.headed.load(Ordering::Acquire) => {
                this.deadline = None;
                false
            }
            Some(deadline) => Pin::new(deadline).poll(cx).is_ready(),
            None => false,
        };
        // What the client has sent is read even past the deadline: the deadline may have
        // run out while this process was stopped (SIGSTOP) or starved, with the request
        // waiting in the socket. A late connection is closed at the first read that would
        // wait, so a slow client gets nothing more than what had arrived.
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Pending if late => {
                conn.closing.store(true, Ordering::Release);
                Poll::Ready(Ok(()))
            }
            read => read,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
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

/// The connection as hyper sees it (above TLS): passes everything through, except a
/// bare 4xx that hyper writes for a request head it could not parse, which it replaces
/// with the envelope (see [`find_bare_answer`]). hyper closes the connection after such
/// an answer, so nothing it writes afterwards is sent.
pub struct Answered<T> {
    inner: T,
    /// Bytes owed to the socket: what preceded hyper's answer, then the envelope.
    owed: Vec<u8>,
    sent: usize,
    replaced: bool,
}

impl<T> Answered<T> {
    fn new(inner: T) -> Self {
        Self {
            inner,
            owed: Vec::new(),
            sent: 0,
            replaced: false,
        }
    }
}

impl<T: AsyncWrite + Unpin> Answered<T> {
    /// Writes what is owed; ready once nothing is.
    fn poll_owed(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.owed.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.owed[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Answered<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Answered<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_owed(cx))?;
        if this.replaced {
            return Poll::Ready(Ok(buf.len()));
        }
        if let Some((at, status)) = find_bare_answer(buf) {
            this.owed = buf[..at].to_vec();
            this.owed
                .extend_from_slice(&unparsed_request_answer(status));
            this.replaced = true;
            // What cannot be written now is written by the flush hyper does next.
            if let Poll::Ready(Err(e)) = this.poll_owed(cx) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_owed(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_owed(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    /// Not vectored, so that hyper hands each write over as one buffer (its head and body
    /// flattened), in which its own answer can be found whole.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

/// Where in `buf` hyper's own answer to an unparsable request head starts, and its status:
/// a `HTTP/1.1 4xx` status line whose head ends in `buf` and has no `x-request-id` (every
/// answer of the service has one). No body the service sends can hold such a line: JSON,
/// NDJSON and the YAML contract never hold a raw CR.
pub fn find_bare_answer(buf: &[u8]) -> Option<(usize, u16)> {
    const START: &[u8] = b"HTTP/1.1 4";
    let mut from = 0;
    while let Some(offset) = find(&buf[from..], START) {
        let at = from + offset;
        from = at + 1;
        let rest = &buf[at..];
        let Some(end) = find(rest, b"\r\n\r\n") else {
            continue;
        };
        let head = &rest[..end];
        let status = std::str::from_utf8(head.get(9..12).unwrap_or_default())
            .ok()
            .and_then(|s| s.parse::<u16>().ok());
        let Some(status) = status.filter(|s| (400..500).contains(s)) else {
            continue;
        };
        if head.get(12) != Some(&b' ')
            || find(&head.to_ascii_lowercase(), b"\r\nx-request-id:").is_some()
        {
            continue;
        }
        return Some((at, status));
    }
    None
}

/// The first place of `needle` (not empty) in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let first = needle.first()?;
    let mut from = 0;
    while let Some(offset) = haystack.get(from..)?.iter().position(|b| b == first) {
        let at = from + offset;
        if haystack.get(at..at + needle.len())? == needle {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// The service of one connection: marks it headed and busy for each request, until the
/// response's body has been sent whole.
#[derive(Clone)]
pub struct Marked<S> {
    inner: S,
    conn: Arc<Conn>,
    epoch: Instant,
}

impl<S, R, B> Service<R> for Marked<S>
where
    S: Service<R, Response = Response<B>>,
    S::Future: Send + 'static,
{
    type Response = Response<Tracked<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.conn.headed.store(true, Ordering::Release);
        self.conn.in_flight.fetch_add(1, Ordering::AcqRel);
        let busy = Busy {
            conn: self.conn.clone(),
            epoch: self.epoch,
        };
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| Tracked { body, _busy: busy }))
        })
    }
}

/// A request in flight on its connection; dropped with the response body (or the
/// request, if it never got one).
struct Busy {
    conn: Arc<Conn>,
    epoch: Instant,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.conn.idle_since.store(now, Ordering::Relaxed);
        self.conn.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request counted as in flight until it is dropped.
pub struct Tracked<B> {
    body: B,
    _busy: Busy,
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn hypers_bare_answers_are_found_and_the_services_are_not() {
        let bare = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(find_bare_answer(bare), Some((0, 400)));
        let mut after = b"{\"data\":[]}".to_vec();
        after.extend_from_slice(b"HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n");
        assert_eq!(find_bare_answer(&after), Some((11, 431)));
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nX-Request-Id: req_1\r\n\r\n{}";
        assert_eq!(find_bare_answer(ours), None);
        assert_eq!(find_bare_answer(b"HTTP/1.1 200 OK\r\n\r\n"), None);
        assert_eq!(find_bare_answer(b"HTTP/1.1 400 Bad Request\r\n"), None);
        assert_eq!(find_bare_answer(b"\"HTTP/1.1 400 x\\r\\n\\r\\n\""), None);
    }
}
