//! Request ids: every response, success or error, carries `X-Request-Id: req_…`, and an
//! error body carries the same id.
//!
//! The id is kept in a task-local for the duration of the request, so that any error
//! produced anywhere below (extractors, handlers, the panic catcher, the fallback) can put
//! it in its envelope without threading it through every signature.

use axum::http::{HeaderValue, header};
use axum::response::Response;
use futures_util::FutureExt;
use mandate_core::unstable::id::RequestId;

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

/// `task` in the scope of the current request's id: work a request hands to a task of its
/// own keeps the request's id.
pub fn carry<F: Future>(task: F) -> impl Future<Output = F::Output> {
    REQUEST_ID.scope(current(), task)
}

/// Runs `answer` in the scope of a fresh id; its response gets the header and loses
/// `Allow` (axum adds it to a wrong-method answer outside every route's layers, and the
/// error envelope is the whole answer). Both hosts' outermost layers call it
/// (`crate::app`), with [`crate::http::error::enveloped`] inside so that a framework's own
/// error answer becomes the envelope with this id.
pub fn within(answer: impl Future<Output = Response>) -> impl Future<Output = Response> {
    within_id(answer).map(|(response, _)| response)
}

/// [`within`], returning the id too (the API host's request line names it; a replayed
/// response's header keeps the id of its first request).
///
/// Written without `async`: an async fn keeps its argument and the future it awaits
/// side by side, and `answer` is the whole request's future, moved whole each time a
/// layer around it is made.
pub fn within_id(
    answer: impl Future<Output = Response>,
) -> impl Future<Output = (Response, String)> {
    let id = RequestId::from_random(random16()).to_string();
    REQUEST_ID
        .scope(id.clone(), answer)
        .map(move |mut response| {
            response.headers_mut().remove(header::ALLOW);
            // A replayed idempotent response keeps the id of the request that produced it.
            if !response.headers().contains_key(HEADER)
                && let Ok(value) = HeaderValue::from_str(&id)
            {
                response.headers_mut().insert(HEADER, value);
            }
            (response, id)
        })
}
