//! Request bodies: JSON only, at most 64 KiB, received before the request's body deadline,
//! parsed with exact number text and no member repeated within an object (a gateway that
//! keeps the first of two values would see another request), every failure answered in
//! the envelope with a message that names the problem.

use axum::body::{Body, Bytes, to_bytes};
use axum::extract::{FromRequest, Request};
use axum::http::header;
use mandate_core::parse_body;
use serde_json::Value;

use crate::http::error::ApiError;
use crate::http::limits::BodyDeadline;
use tokio::time::Instant;

/// The largest body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Reads a whole body: at most [`MAX_BODY_BYTES`], by `deadline`. The one place the size
/// limit is enforced: the idempotency layer (which digests the body before the handler
/// runs) and the extractors below both read through it. A body over the limit and one that
/// ended early (the client's connection cut mid-body) are told apart.
pub async fn collect(body: Body, deadline: Instant) -> Result<Bytes, ApiError> {
    tokio::time::timeout_at(deadline, to_bytes(body, MAX_BODY_BYTES))
        .await
        .map_err(|_| BodyDeadline::expired())?
        .map_err(|e| {
            let over_limit = std::error::Error::source(&e)
                .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            ApiError::InvalidRequest(if over_limit {
                format!("request body exceeds {} KiB", MAX_BODY_BYTES / 1024)
            } else {
                format!("the request body was cut off before its end: {e}")
            })
        })
}

/// A JSON body, parsed into a `serde_json::Value` whose numbers keep their exact text.
#[derive(Debug, Clone)]
pub struct JsonBody(pub Value);

/// An optional JSON body: empty is `None`; anything else must be JSON.
#[derive(Debug, Clone)]
pub struct OptionalJsonBody(pub Option<Value>);

/// A JSON body's bytes, checked like [`JsonBody`]'s (type, size, deadline, not empty) but
/// not parsed: for a handler that reads them straight into its own type
/// (`POST /v1/authorizations`, see `AuthorizationRequest::from_json_bytes`).
#[derive(Debug, Clone)]
pub struct JsonBytes(pub Bytes);

/// Parses the body, refusing one that is not JSON or repeats a member within an object
/// (the messages are `RequestBodyError`'s, as for `POST /v1/authorizations`).
async fn read(request: Request) -> Result<Option<Value>, ApiError> {
    match read_bytes(request).await? {
        Some(bytes) => Ok(Some(parse_body(&bytes)?)),
        None => Ok(None),
    }
}

async fn read_bytes(request: Request) -> Result<Option<Bytes>, ApiError> {
    let has_json_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
        });
    let deadline = BodyDeadline::of(&request);
    let bytes = collect(request.into_body(), deadline).await?;
    if bytes.is_empty() {
        return Ok(None);
    }
    if has_json_type != Some(true) {
        return Err(ApiError::InvalidRequest(
            "Content-Type must be application/json".into(),
        ));
    }
    Ok(Some(bytes))
}

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, _: &S) -> Result<Self, Self::Rejection> {
        read(request)
            .await?
            .map(JsonBody)
            .ok_or_else(|| ApiError::InvalidRequest("a JSON body is required".into()))
    }
}

impl<S: Send + Sync> FromRequest<S> for JsonBytes {
    type Rejection = ApiError;

    async fn from_request(request: Request, _: &S) -> Result<Self, Self::Rejection> {
        read_bytes(request)
            .await?
            .map(JsonBytes)
            .ok_or_else(|| ApiError::InvalidRequest("a JSON body is required".into()))
    }
}

impl<S: Send + Sync> FromRequest<S> for OptionalJsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, _: &S) -> Result<Self, Self::Rejection> {
        read(request).await.map(OptionalJsonBody)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn message(error: ApiError) -> String {
        match error {
            ApiError::InvalidRequest(message) => message,
            other => panic!("not invalid_request: {other:?}"),
        }
    }

    /// A body over the limit is refused naming the limit; one whose connection was cut
    /// before its end says so, not that it is too large; one within it is read whole.
    #[tokio::test]
    async fn a_body_over_the_limit_and_one_cut_off_are_told_apart() {
        let deadline = Instant::now() + Duration::from_secs(5);
        let over = Body::from(vec![b'x'; MAX_BODY_BYTES + 1]);
        let said = message(collect(over, deadline).await.unwrap_err());
        assert_eq!(said, "request body exceeds 64 KiB");

        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"{\"amount\":")),
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "connection reset",
            )),
        ];
        let cut = Body::from_stream(futures_util::stream::iter(chunks));
        let said = message(collect(cut, deadline).await.unwrap_err());
        assert!(
            said.starts_with("the request body was cut off before its end"),
            "{said}"
        );

        let whole = Body::from(vec![b'x'; MAX_BODY_BYTES]);
        assert_eq!(
            collect(whole, deadline).await.unwrap().len(),
            MAX_BODY_BYTES
        );
    }
}
