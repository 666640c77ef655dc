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
/// runs) and the extractors below both read through it.
pub async fn collect(body: Body, deadline: Instant) -> Result<Bytes, ApiError> {
    tokio::time::timeout_at(deadline, to_bytes(body, MAX_BODY_BYTES))
        .await
        .map_err(|_| BodyDeadline::expired())?
        .map_err(|_| {
            ApiError::InvalidRequest(format!(
                "request body exceeds {} KiB",
                MAX_BODY_BYTES / 1024
            ))
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
