//! Request ids: every response, success or error, carries `X-Request-Id: req_…`, and an
//! error body carries the same id.
//!
//! The id is kept in a task-local for the duration of the request, so that any error
//! produced anywhere below (extractors, handlers, the panic catcher, the fallback) can put
//! it in its envelope without threading it through every signature.

use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use mandate_core::id::RequestId;

use crate::clock::random16;

/// The response header that carries the request id.
pub const HEADER: &str = "x-request-id";

tokio::task_local! {
    static REQUEST_ID: String;
}

/// The id of the request being served, or a fresh one outside a request.
pub fn current() -> String {
    REQUEST_ID
        .try_with(Clone::clone)
        .unwrap_or_else(|_| RequestId::from_random(random16()).to_string())
}

/// Middleware: assigns the id, runs the rest inside its scope, and sets the header.
///
/// Being the outermost layer of both hosts, it also removes the `Allow` header that axum
/// adds to a wrong-method answer outside every route's layers (the error envelope is the
/// whole answer); one layer doing both costs one hop less on every request.
pub async fn assign(request: Request, next: Next) -> Response {
    within(next.run(request)).await
}

/// What [`assign`] does around any answer: `answer` runs in the scope of a fresh id, and
/// its response gets the header (and loses `Allow`); an error that is not the envelope
/// becomes one ([`crate::http::error::enveloped`]). The API host's single front layer
/// ([`crate::app::front`]) calls it with authentication inside.
pub async fn within(answer: impl Future<Output = Response>) -> Response {
    let id = RequestId::from_random(random16()).to_string();
    // A framework's own error answer (text/plain) becomes the envelope, with this id.
    let answer = async { crate::http::error::enveloped(answer.await).await };
    let mut response = REQUEST_ID.scope(id.clone(), answer).await;
    response.headers_mut().remove(header::ALLOW);
    // A replayed idempotent response keeps the id of the request that produced it.
    if !response.headers().contains_key(HEADER)
        && let Ok(value) = HeaderValue::from_str(&id)
    {
        response.headers_mut().insert(HEADER, value);
    }
    response
}
