//! CORS on the API host: a browser page at one of exactly the allowed origins (the review
//! console's, served by the public host) may call the API with a key in its
//! `Authorization` header. No other origin gets a CORS header, there is no `*`, no
//! origin is reflected unless it is on the list, and no credentials (cookies) are allowed:
//! the console sends its key itself.
//!
//! Written here rather than with tower-http's `CorsLayer` so that it runs inside the API
//! host's front layer: a preflight is answered after the in-flight gate and with a request
//! id like every other answer, but before authentication (a preflight never carries a
//! key), and a request without an `Origin` header costs one header lookup.

use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The methods the console uses.
const METHODS: &str = "GET, POST";
/// The request headers the console sends.
const HEADERS: &str = "authorization, content-type, idempotency-key";
/// The response headers a page may read besides the simple ones.
const EXPOSED: &str = "x-request-id, retry-after, idempotency-replayed";
/// How long a browser may keep a preflight's answer, in seconds.
const MAX_AGE: &str = "600";

/// An origin given on the command line is not one.
#[derive(Debug, thiserror::Error)]
#[error("--console-origin {value:?}: {reason}")]
pub struct OriginError {
    /// The value given.
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// `text` as a browser writes it in `Origin`: `scheme://host[:port]`, lower-case, without
/// the scheme's default port; a path other than `/`, a query, a fragment or user info is
/// refused, so that the list holds origins and nothing wider.
pub fn parse_origin(text: &str) -> Result<String, OriginError> {
    let error = |reason| OriginError {
        value: text.to_owned(),
        reason,
    };
    let url = url::Url::parse(text)
        .map_err(|_| error("must be an origin such as https://console.example.com"))?;
    if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
        return Err(error("must be an http:// or https:// origin with a host"));
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(error(
            "must be an origin alone, without a path, query or fragment",
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(error("must not carry user information"));
    }
    Ok(url.origin().ascii_serialization())
}

/// The origins allowed to call the API host from a browser.
#[derive(Debug, Clone, Default)]
pub struct Cors {
    origins: Vec<HeaderValue>,
}

impl Cors {
    /// Allows exactly `origins` (each as [`parse_origin`] writes it); none turns CORS off.
    pub fn new(origins: &[String]) -> Self {
        Self {
            origins: origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o).ok())
                .collect(),
        }
    }

    /// The allowed origins, as given.
    pub fn origins(&self) -> impl Iterator<Item = &str> {
        self.origins.iter().filter_map(|o| o.to_str().ok())
    }

    /// The request's `Origin`, if it is one of the allowed.
    pub fn allowed(&self, request: &Request) -> Option<HeaderValue> {
        if self.origins.is_empty() {
            return None;
        }
        let origin = request.headers().get(header::ORIGIN)?;
        self.origins.iter().find(|o| *o == origin).cloned()
    }

    /// The answer to a preflight (`OPTIONS` with `Access-Control-Request-Method`) from an
    /// allowed origin: 204 with what the console may send. Any other request, a preflight
    /// from another origin included, is `None` and goes on to authentication.
    pub fn preflight(&self, request: &Request) -> Option<Response> {
        if request.method() != Method::OPTIONS
            || !request
                .headers()
                .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
        {
            return None;
        }
        let origin = self.allowed(request)?;
        Some(
            (
                StatusCode::NO_CONTENT,
                [
                    (header::ACCESS_CONTROL_ALLOW_ORIGIN, origin),
                    (
                        header::ACCESS_CONTROL_ALLOW_METHODS,
                        HeaderValue::from_static(METHODS),
                    ),
                    (
                        header::ACCESS_CONTROL_ALLOW_HEADERS,
                        HeaderValue::from_static(HEADERS),
                    ),
                    (
                        header::ACCESS_CONTROL_MAX_AGE,
                        HeaderValue::from_static(MAX_AGE),
                    ),
                    (header::VARY, HeaderValue::from_static("origin")),
                ],
            )
                .into_response(),
        )
    }

    /// Lets the page at `origin` (an allowed one, from [`Cors::allowed`]) read `response`
    /// and its request id.
    pub fn expose(origin: HeaderValue, response: &mut Response) {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSED),
        );
        headers.append(header::VARY, HeaderValue::from_static("origin"));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_written_as_browsers_send_them() {
        for (given, written) in [
            ("http://127.0.0.1:8081", "http://127.0.0.1:8081"),
            (
                "HTTPS://Console.Example.COM/",
                "https://console.example.com",
            ),
            (
                "https://console.example.com:443",
                "https://console.example.com",
            ),
            ("http://localhost:80", "http://localhost"),
        ] {
            assert_eq!(parse_origin(given).unwrap(), written, "{given}");
        }
    }

    #[test]
    fn anything_wider_or_other_than_an_origin_is_refused() {
        for bad in [
            "*",
            "null",
            "console.example.com",
            "https://console.example.com/console/",
            "https://console.example.com/?a=b",
            "https://user@console.example.com",
            "ftp://console.example.com",
            "file:///etc/passwd",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad}");
        }
    }

    fn request(method: Method, origin: Option<&str>, preflight: bool) -> Request {
        let mut builder = Request::builder().method(method).uri("/v1/decisions");
        if let Some(origin) = origin {
            builder = builder.header(header::ORIGIN, origin);
        }
        if preflight {
            builder = builder.header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST");
        }
        builder.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn only_a_listed_origin_gets_a_preflight_answer() {
        let cors = Cors::new(&["http://127.0.0.1:8081".to_owned()]);
        let ok = cors
            .preflight(&request(
                Method::OPTIONS,
                Some("http://127.0.0.1:8081"),
                true,
            ))
            .unwrap();
        assert_eq!(ok.status(), StatusCode::NO_CONTENT);
        assert_eq!(
            ok.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "http://127.0.0.1:8081"
        );
        for other in [
            request(Method::OPTIONS, Some("http://evil.example"), true),
            request(Method::OPTIONS, Some("http://127.0.0.1:8082"), true),
            request(Method::OPTIONS, None, true),
            request(Method::OPTIONS, Some("http://127.0.0.1:8081"), false),
            request(Method::GET, Some("http://127.0.0.1:8081"), true),
        ] {
            assert!(cors.preflight(&other).is_none());
        }
        let off = Cors::new(&[]);
        assert!(
            off.preflight(&request(
                Method::OPTIONS,
                Some("http://127.0.0.1:8081"),
                true
            ))
            .is_none()
        );
    }
}
