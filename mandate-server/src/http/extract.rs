//! Extractors whose rejections are the envelope: axum's own answer in `text/plain`, which
//! the idempotency layer would store and replay as if it were JSON, never reaches a client.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::http::error::ApiError;

/// axum's `Path`, rejected with [`ApiError`] (a segment that is not valid UTF-8 once
/// percent-decoded, `/v1/agents/%FF`, is a 400 saying so).
#[derive(Debug)]
pub struct Path<T>(pub T);

impl<T, S> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(value) =
            axum::extract::Path::<T>::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}
