//! Request ids: every response, success or error, carries `X-Request-Id: req_…`, and an
//! error body carries the same id.
//!
//! The id is kept in a task-local for the duration of the request, so that any error
//! produced anywhere below (extractors, handlers, the panic catcher, the fallback) can put
//! it in its envelope without threading it through every signature.

use axum::http::{HeaderValue, header};
use axum::response::Response;
use futures_util::FutureExt;
use mandate_protocol::id::RequestId;

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

#[cfg(test)]
mod tests {
    use super::*;

    /// A request's future as big as a handler's can be.
    async fn large() -> Response {
        let held = [7u8; 4096];
        tokio::task::yield_now().await;
        Response::new(axum::body::Body::from(held.to_vec()))
    }

    #[test]
    fn the_id_layer_holds_the_requests_future_once() {
        let answer = large();
        let alone = std::mem::size_of_val(&answer);
        assert!(alone >= 4096, "{alone}");
        // An async fn would keep the argument beside what it awaits: twice the size.
        let layered = std::mem::size_of_val(&within_id(large()));
        assert!(layered < alone + 256, "{layered} bytes around {alone}");
        let layered = std::mem::size_of_val(&within(large()));
        assert!(layered < alone + 256, "{layered} bytes around {alone}");
    }

    #[tokio::test]
    async fn a_response_gets_the_id_it_was_answered_within() {
        let (response, id) = within_id(async { Response::new(axum::body::Body::empty()) }).await;
        assert!(id.starts_with("req_"), "{id}");
        assert_eq!(response.headers()[HEADER], id.as_str());
    }
}
