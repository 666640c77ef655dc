//! The hosts' routers with their layers, built from state so that tests can serve them on
//! port 0: the API host, the public host, and the admin host of the metrics.
//!
//! Layer order on the API host, outermost first: in-flight gate (`serve` only), request id,
//! CORS (a preflight from the console's origin answered, its answers made readable),
//! authentication and rate (under the request deadline), route template (for the metrics
//! and the request line), idempotency, panic catcher, routes. The body limit is enforced
//! where a body is read (`http/body.rs`). Every response, including 404 fallbacks, 401s and
//! panics, goes through the request-id layer; the gate's 503 carries a fresh id of its own.

use std::any::Any;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{Next, from_fn, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use tower::{Service, ServiceBuilder};
use tower_http::catch_panic::CatchPanicLayer;

use crate::http::cors::Cors;
use crate::http::error::{ApiError, envelope};
use crate::http::limits::{Gate, Limits};
use crate::http::request_log::{RouteLayer, Started};
use crate::http::{auth, error, idempotency, request_id};
use crate::routes;
use crate::state::AppState;
use crate::telemetry;

async fn not_found() -> ApiError {
    ApiError::NotFound("no such path; see the API reference for the paths under /v1".into())
}

async fn method_not_allowed() -> ApiError {
    ApiError::InvalidRequest("this method is not supported on this path".into())
}

fn panic_response(_: Box<dyn Any + Send + 'static>) -> Response {
    ApiError::Server("handler panicked".into()).into_response()
}

/// The API host: everything under `/v1`, as a service.
///
/// The layers wrap the routes' router as plain tower layers, outside it, so that they see
/// every response whole: axum adds `Allow` to a wrong-method answer outside the layers of a
/// route (the request-id layer removes it), and authentication runs before any routing.
/// An outer `Router` with the routes as its fallback did the same at the cost of a second
/// routing pass and a boxed clone of the inner service on every request.
pub fn api(state: AppState) -> impl ApiService {
    api_behind(state, None)
}

/// The routes behind the one front layer (see [`front`]).
fn api_behind(state: AppState, gate: Option<Gate>) -> impl ApiService {
    let routes = routes::api()
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(from_fn_with_state(
            Arc::new(state.idempotency()),
            idempotency::layer,
        ))
        .layer(RouteLayer)
        .with_state(state.clone());
    ServiceBuilder::new()
        .layer(from_fn_with_state(Front { gate, state }, front))
        .service(routes)
}

/// What the API host's front layer needs: the in-flight gate (`serve` only) and the state.
#[derive(Clone)]
pub struct Front {
    gate: Option<Gate>,
    state: AppState,
}

/// The API host's outer layers as one: the in-flight gate (503 at once when over; the
/// 503 carries a fresh id of its own), then the request id, then authentication and
/// rate. Written as three `from_fn` layers they cost a boxed future and a boxed clone of
/// the service below each, on every request. Every answer, the gate's 503 included, gets
/// its request line (see [`crate::http::request_log`]).
pub async fn front(
    State(Front { gate, state }): State<Front>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = Started::of(&request);
    let clock = std::time::Instant::now();
    let permit = match &gate {
        Some(gate) => match gate.admit(&mut request) {
            Some(permit) => Some(permit),
            None => {
                metrics::counter!(telemetry::SHED).increment(1);
                let response = ApiError::Overloaded.into_response();
                telemetry::record_request(&response, clock);
                if let Some(started) = &started {
                    let id = response
                        .headers()
                        .get(request_id::HEADER)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default();
                    started.log(id, &response);
                }
                return response;
            }
        },
        None => None,
    };
    // A browser's preflight from the console's origin is answered before authentication;
    // an answer to that origin may be read by its page.
    let origin = state.cors.allowed(&request);
    let answer = async {
        if let Some(preflight) = state.cors.preflight(&request) {
            return preflight;
        }
        let authenticator = state.authenticator();
        let handled = auth::authenticate(&authenticator, request, next);
        // Every request has a deadline: a database that does not answer makes it a 503
        // (an idempotent request goes on in its own task and keeps its one outcome).
        let handled = match gate.as_ref().map(|g| g.request_timeout) {
            Some(limit) => match tokio::time::timeout(limit, handled).await {
                Ok(response) => response,
                Err(_) => ApiError::Unavailable(format!(
                    "the request was not answered within {} s (the database is not answering \
                     in time); retry with the same Idempotency-Key",
                    limit.as_secs()
                ))
                .into_response(),
            },
            None => handled.await,
        };
        let mut response = error::enveloped(handled).await;
        if let Some(origin) = origin {
            Cors::expose(origin, &mut response);
        }
        response
    };
    let (response, id) = request_id::within_id(answer).await;
    drop(permit);
    if let Some(started) = &started {
        started.log(&id, &response);
    }
    telemetry::record_request(&response, clock);
    response
}

/// What [`api`] and [`api_with_limits`] return: a cloneable service of the API's requests.
pub trait ApiService:
    Service<Request, Response = Response, Error = Infallible, Future: Send + 'static>
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<T> ApiService for T where
    T: Service<Request, Response = Response, Error = Infallible, Future: Send + 'static>
        + Clone
        + Send
        + Sync
        + 'static
{
}

/// [`api`] behind the in-flight gate of `limits`: over `max_in_flight` requests, 503 at
/// once (see [`crate::http::limits`]). This is what `serve` listens with.
pub fn api_with_limits(state: AppState, limits: &Limits) -> impl ApiService {
    api_behind(state, Some(Gate::new(limits)))
}

async fn public_not_found() -> Response {
    envelope(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such path; this host serves /.well-known/jwks.json, /openapi.yaml, /healthz, /readyz and the console at /console/",
    )
}

/// The public host: the JWK Set, the contract, the health checks and the review console.
pub fn public(state: AppState) -> Router {
    let routes = routes::public::router()
        .fallback(public_not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(CatchPanicLayer::custom(panic_response))
        .with_state(state);
    Router::new()
        .fallback_service(routes)
        .layer(from_fn(assign_request_id))
}

/// The public host's outermost layer: a request id for every answer, and the envelope for
/// a framework's own error answer.
async fn assign_request_id(request: Request, next: Next) -> Response {
    request_id::within(async { error::enveloped(next.run(request).await).await }).await
}

/// The admin host (`serve --admin-addr`): `GET /metrics` and nothing else, rendered by
/// the recorder `handle` (see [`crate::telemetry`]).
pub fn admin(handle: PrometheusHandle) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let handle = handle.clone();
                async move {
                    (
                        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                        handle.render(),
                    )
                }
            }),
        )
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "this host serves GET /metrics only\n",
            )
        })
        // A request id on every answer, as on the other hosts: the connection guard
        // (`http::connections`) takes an answer without one for hyper's own.
        .layer(from_fn(|request: Request, next: Next| async move {
            request_id::within(next.run(request)).await
        }))
}
