//! The bounded listener of `mandate mcp --http` and `mandate witness`: what an open connection may hold, bounded as
//! mandate-server bounds its API listener (its `http/connections.rs` and `http/limits.rs`),
//! in the small: anything on the machine can connect, and without bounds 600 connections
//! each holding half a request body held 660 MB for as long as their clients liked.
//!
//! - **Cap and eviction.** At most [`Bounds::max_connections`] connections are open. A new
//!   one past the cap makes room by closing the connections idle longest (no request in
//!   flight: silent sockets, unfinished request heads, keep-alive connections between
//!   requests), an eighth of the cap at a time; only when every connection has a request in
//!   flight is the newcomer closed. Every request travels on a connection, so stateless
//!   calls (protocol 2026-07-28) count against the cap as session requests do.
//! - **Request heads.** hyper's header-read timeout on its timer: a connection that has not
//!   sent a whole request head within [`Bounds::read_timeout`] of being accepted, or of its
//!   previous answer, is closed, and a head is at most [`MAX_HEAD`] bytes.
//! - **Bodies.** The HTTP guard (`http.rs`) reads a body for at most the same time, from its
//!   head, and at most `MAX_BODY` bytes; what a connection holds is bounded, and so is what
//!   all of them hold, by their count.
//!
//! A response counts as in flight until its body has been sent whole (an SSE stream: until
//! it ends), so a long wait (`tasks/result`, `wait_for_review`) is never evicted.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use futures_util::task::AtomicWaker;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tower::ServiceExt as _;

/// The largest request head read (hyper's buffer: a head and what follows it).
pub const MAX_HEAD: usize = 64 * 1024;

/// What the listener bounds.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Open connections at most.
    pub max_connections: usize,
    /// Time a client has to send a request's head (from accept, or from the previous
    /// answer) and, in the guard, its body (from its head).
    pub read_timeout: Duration,
}

/// Serves `router` on `listener` until the process is stopped, within `bounds`.
pub async fn serve(listener: TcpListener, router: axum::Router, bounds: Bounds) {
    let connections = Connections::new(bounds.max_connections);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(bounds.read_timeout)
        .max_buf_size(MAX_HEAD);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of file descriptors, or a connection reset before it was accepted: the
            // listener itself is fine; a pause lets descriptors come back.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        // Not admitted, the stream is dropped here, which closes it.
        let Some(registration) = connections.admit() else {
            continue;
        };
        let conn = registration.conn.clone();
        let router = router.clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let busy = Busy::start(conn.clone());
            let router = router.clone();
            async move {
                let response = match router.oneshot(request.map(Body::new)).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                Ok::<_, Infallible>(response.map(|body| Tracked { body, _busy: busy }))
            }
        });
        let io = TokioIo::new(Watched {
            inner: stream,
            registration,
        });
        let connection = http.serve_connection(io, service);
        tokio::spawn(async move {
            // A connection's end (closed, reset, timed out) concerns no one else.
            let _ = connection.await;
        });
    }
}

/// The open connections of the listener.
struct Connections {
    max: usize,
    /// How many connections one eviction closes at most: the share of the cap kept free
    /// for newcomers once it has been reached.
    reserve: usize,
    epoch: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
}

/// One connection's state, shared by its stream and its service.
struct Conn {
    id: u64,
    /// The registry's epoch, which `idle_since` counts from.
    epoch: Instant,
    /// Requests handed to the service whose response body has not been sent whole.
    in_flight: AtomicUsize,
    /// When it last became idle (accepted, or its last response sent), in ms from the
    /// epoch: eviction takes the smallest first.
    idle_since: AtomicU64,
    /// Set to close the connection: its next read ends the stream.
    closing: AtomicBool,
    /// The task reading the connection, woken to see `closing`.
    reader: AtomicWaker,
}

/// Milliseconds from `epoch` to now.
fn ms_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Connections {
    fn new(max: usize) -> Arc<Self> {
        let max = max.max(1);
        Arc::new(Self {
            max,
            reserve: (max / 8).max(1),
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
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
            epoch: self.epoch,
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(ms_since(self.epoch)),
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

impl Conn {
    fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.reader.wake();
    }
}

/// A connection's place in the registry, given back when the connection is dropped.
struct Registration {
    registry: Arc<Connections>,
    conn: Arc<Conn>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.conn.id);
    }
}

/// The accepted socket: its reads end (EOF) once the connection is evicted, which makes
/// hyper close it.
struct Watched {
    inner: TcpStream,
    registration: Registration,
}

impl AsyncRead for Watched {
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
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Watched {
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

/// A request in flight on its connection, from its head to the end of its response body
/// (or to the request's end, if it never got one).
struct Busy {
    conn: Arc<Conn>,
}

impl Busy {
    fn start(conn: Arc<Conn>) -> Self {
        conn.in_flight.fetch_add(1, Ordering::AcqRel);
        Self { conn }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.conn
            .idle_since
            .store(ms_since(self.conn.epoch), Ordering::Relaxed);
        self.conn.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request counted as in flight until it is dropped.
struct Tracked {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// At the cap, a newcomer closes the longest idle connections (an eighth of the cap),
    /// never one with a request in flight; when all have one, the newcomer is refused.
    #[test]
    fn at_the_cap_the_idle_make_room_and_the_busy_stay() {
        let connections = Connections::new(8);
        let mut held: Vec<Registration> = (0..8).map(|_| connections.admit().unwrap()).collect();
        // The first four are busy; the others idle, the fifth longest.
        let busy: Vec<Busy> = held[..4]
            .iter()
            .map(|r| Busy::start(r.conn.clone()))
            .collect();
        for (n, r) in held.iter().enumerate() {
            r.conn.idle_since.store(n as u64, Ordering::Relaxed);
        }
        let newcomer = connections.admit().unwrap();
        let closed: Vec<bool> = held
            .iter()
            .map(|r| r.conn.closing.load(Ordering::Acquire))
            .collect();
        assert_eq!(
            closed,
            [false, false, false, false, true, false, false, false]
        );
        assert_eq!(connections.lock().len(), 8);
        // Every connection busy: the newcomer is refused.
        held.remove(4);
        held.push(newcomer);
        let _more: Vec<Busy> = held[4..]
            .iter()
            .map(|r| Busy::start(r.conn.clone()))
            .collect();
        assert!(connections.admit().is_none());
        drop(busy);
        // Idle again (their responses sent): room is made.
        assert!(connections.admit().is_some());
    }
}
