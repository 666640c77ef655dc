//! The request line: one `info` event of target [`TARGET`] for every request the API host
//! answers (401s, 429s and the in-flight gate's 503s included), written by its front layer
//! ([`crate::app::front`]) once the response is ready. It names the request id, the
//! method, the matched route's template (never the raw path, which may carry ids of
//! others' objects), the status, the latency and the caller's organization; never a
//! header, a key, a token or a body.
//!
//! When the line's level is disabled nothing is measured or carried.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::response::Response;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

/// The target of the request line.
pub const TARGET: &str = "mandate::request";

/// What the route field says when no route matched (or the request was shed before routing).
pub const UNMATCHED: &str = "unmatched";

/// Whether the request line is logged at the current level.
pub fn enabled() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::INFO)
}

/// The authenticated caller's organization, put into the response's extensions by
/// authentication for the request line.
#[derive(Clone)]
pub struct CallerOrg(pub Arc<str>);

/// Where a request started: taken by the front layer when the line is enabled.
pub struct Started {
    at: Instant,
    method: Method,
}

impl Started {
    /// The start of `request`, or `None` when the line is not logged.
    pub fn of(request: &Request) -> Option<Self> {
        enabled().then(|| Self {
            at: Instant::now(),
            method: request.method().clone(),
        })
    }

    /// Logs the line of the request answered with `response`, under `request_id`.
    pub fn log(&self, request_id: &str, response: &Response) {
        let route = response
            .extensions()
            .get::<MatchedPath>()
            .map_or(UNMATCHED, MatchedPath::as_str);
        let org = response.extensions().get::<CallerOrg>().map(|o| &*o.0);
        let latency_us = u64::try_from(self.at.elapsed().as_micros()).unwrap_or(u64::MAX);
        tracing::info!(
            target: TARGET,
            request_id,
            method = self.method.as_str(),
            route,
            status = response.status().as_u16(),
            latency_us,
            org,
            "request"
        );
    }
}

/// Copies axum's [`MatchedPath`] of the request into its response's extensions, so that the
/// front layer, outside the router, can name the route. Added with `Router::layer`, it
/// wraps every route (not the fallback, hence [`UNMATCHED`]).
#[derive(Clone, Copy, Default)]
pub struct RouteLayer;

impl<S> Layer<S> for RouteLayer {
    type Service = Route<S>;

    fn layer(&self, inner: S) -> Route<S> {
        Route { inner }
    }
}

/// The service of [`RouteLayer`].
#[derive(Clone)]
pub struct Route<S> {
    inner: S,
}

impl<S> Service<Request> for Route<S>
where
    S: Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = RouteFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // Kept when a request line or a metric will read it.
        let route = if enabled() || crate::telemetry::enabled() {
            request.extensions().get::<MatchedPath>().cloned()
        } else {
            None
        };
        RouteFuture {
            inner: self.inner.call(request),
            route,
        }
    }
}

pin_project! {
    /// The response of the route, with its template added.
    pub struct RouteFuture<F> {
        #[pin]
        inner: F,
        route: Option<MatchedPath>,
    }
}

impl<F, E> Future for RouteFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = ready!(this.inner.poll(cx))?;
        if let Some(route) = this.route.take() {
            response.extensions_mut().insert(route);
        }
        Poll::Ready(Ok(response))
    }
}
