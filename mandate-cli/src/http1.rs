//! The server side of HTTP/1.1, as little as `mandate listen` needs: read one request with
//! a `Content-Length` body, answer it, close the connection.
//!
//! Everything is bounded: the request head (16 KiB, 100 header fields), the body (64 KiB),
//! and the time a client may take to send the whole request (10 s). What is not supported
//! is refused with the status RFC 9112 asks for: a `Transfer-Encoding` (chunked bodies) is
//! 501, a head or body over its limit is 431 or 413, a malformed request is 400, a slow one
//! is 408. `Expect: 100-continue` is answered, so `curl -d @big-file` does not stall.

use std::io::{Read as _, Write as _};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// What a request may be.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The request line and header fields, in bytes.
    pub max_head: usize,
    /// The most header fields.
    pub max_headers: usize,
    /// The body, in bytes.
    pub max_body: usize,
    /// From the first byte read to the last byte of the body.
    pub read_time: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_head: 16 * 1024,
            max_headers: 100,
            max_body: 64 * 1024,
            read_time: Duration::from_secs(10),
        }
    }
}

/// How long one response may take to write.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// A request, read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method, as sent (methods are case-sensitive).
    pub method: String,
    /// The request target, e.g. `/` or `/hooks/mandate?x=1`.
    pub target: String,
    /// The header fields in order, names as sent.
    pub headers: Vec<(String, String)>,
    /// The body, exactly `Content-Length` bytes.
    pub body: Vec<u8>,
}

impl Request {
    /// The first value of a header field, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Why a request could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The client closed the connection before sending anything: nothing to answer.
    #[error("connection closed before a request")]
    Closed,
    /// A malformed request (400).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The request was not complete in time (408).
    #[error("request not complete within {0:?}")]
    Timeout(Duration),
    /// The request head is over its limit (431).
    #[error("request head larger than {0} bytes or {1} header fields")]
    HeadTooLarge(usize, usize),
    /// The body is over its limit (413).
    #[error("body larger than {0} bytes")]
    BodyTooLarge(usize),
    /// Something this server does not do (501).
    #[error("not implemented: {0}")]
    NotImplemented(String),
    /// The connection failed.
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
}

impl HttpError {
    /// The status to answer with, if the connection can still carry an answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Closed | Self::Io(_) => None,
            Self::BadRequest(_) => Some(400),
            Self::Timeout(_) => Some(408),
            Self::HeadTooLarge(..) => Some(431),
            Self::BodyTooLarge(_) => Some(413),
            Self::NotImplemented(_) => Some(501),
        }
    }
}

/// The parsed request line and header fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The method.
    pub method: String,
    /// The request target.
    pub target: String,
    /// The header fields.
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// The body length: `Content-Length`, 0 when absent. A `Transfer-Encoding` is refused
    /// (501; 400 together with a `Content-Length`), and so are differing lengths.
    pub fn content_length(&self) -> Result<u64, HttpError> {
        let has_encoding = header(&self.headers, "transfer-encoding").is_some();
        let lengths: Vec<&str> = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .flat_map(|(_, v)| v.split(','))
            .map(str::trim)
            .collect();
        if has_encoding {
            return Err(if lengths.is_empty() {
                HttpError::NotImplemented(
                    "Transfer-Encoding (a chunked body): send a Content-Length".into(),
                )
            } else {
                HttpError::BadRequest("both Transfer-Encoding and Content-Length".into())
            });
        }
        let mut length: Option<u64> = None;
        for text in lengths {
            if text.is_empty() || text.len() > 19 || !text.bytes().all(|b| b.is_ascii_digit()) {
                return Err(HttpError::BadRequest(format!(
                    "invalid Content-Length {:?}",
                    printable(text, 32)
                )));
            }
            let value: u64 = text
                .parse()
                .map_err(|_| HttpError::BadRequest("invalid Content-Length".into()))?;
            match length {
                Some(previous) if previous != value => {
                    return Err(HttpError::BadRequest(
                        "differing Content-Length values".into(),
                    ));
                }
                _ => length = Some(value),
            }
        }
        Ok(length.unwrap_or(0))
    }

    fn expects_continue(&self) -> bool {
        header(&self.headers, "expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    }
}

fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Where the head ends: (length of the head without its blank line, start of the body).
/// A bare LF is accepted as a line end, as RFC 9112 allows.
fn head_end(buf: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while let Some(offset) = buf.get(i..)?.iter().position(|&b| b == b'\n') {
        let lf = i + offset;
        match buf.get(lf + 1..) {
            Some([b'\n', ..]) => return Some((lf, lf + 2)),
            Some([b'\r', b'\n', ..]) => return Some((lf, lf + 3)),
            _ => i = lf + 1,
        }
    }
    None
}

/// Parses the request line and header fields (the head without its blank line).
pub fn parse_head(bytes: &[u8], limits: &Limits) -> Result<Head, HttpError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| HttpError::BadRequest("the request head is not UTF-8".into()))?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::BadRequest(format!(
            "malformed request line {:?}",
            printable(request_line, 64)
        )));
    };
    if !is_token(method) {
        return Err(HttpError::BadRequest("malformed method".into()));
    }
    if target.is_empty() || target.bytes().any(|b| b.is_ascii_control()) {
        return Err(HttpError::BadRequest("malformed request target".into()));
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(HttpError::BadRequest(format!(
            "unsupported version {:?}",
            printable(version, 16)
        )));
    }
    let mut headers = Vec::new();
    for line in lines {
        if line.starts_with([' ', '\t']) {
            return Err(HttpError::BadRequest(
                "obsolete line folding in a header".into(),
            ));
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| HttpError::BadRequest("a header line without a colon".into()))?;
        if !is_token(name) {
            return Err(HttpError::BadRequest(format!(
                "malformed header name {:?}",
                printable(name, 32)
            )));
        }
        if headers.len() == limits.max_headers {
            return Err(HttpError::HeadTooLarge(limits.max_head, limits.max_headers));
        }
        headers.push((name.to_owned(), value.trim_matches([' ', '\t']).to_owned()));
    }
    Ok(Head {
        method: method.to_owned(),
        target: target.to_owned(),
        headers,
    })
}

/// Reads some bytes before `deadline`; the count (0 at end of stream).
fn read_some(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    want: usize,
    deadline: Instant,
    limits: &Limits,
) -> Result<usize, HttpError> {
    let mut chunk = [0u8; 8192];
    let want = want.clamp(1, chunk.len());
    loop {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or(HttpError::Timeout(limits.read_time))?;
        stream.set_read_timeout(Some(left))?;
        match stream.read(chunk.get_mut(..want).unwrap_or(&mut [])) {
            Ok(n) => {
                buf.extend_from_slice(chunk.get(..n).unwrap_or(&[]));
                return Ok(n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(HttpError::Timeout(limits.read_time));
            }
            Err(e) => return Err(HttpError::Io(e)),
        }
    }
}

/// Reads one request from `stream`, within `limits`.
pub fn read_request(stream: &mut TcpStream, limits: &Limits) -> Result<Request, HttpError> {
    let deadline = Instant::now() + limits.read_time;
    let mut buf: Vec<u8> = Vec::with_capacity(2048);
    let (head_len, body_start) = loop {
        if let Some(end) = head_end(&buf) {
            break end;
        }
        if buf.len() > limits.max_head {
            return Err(HttpError::HeadTooLarge(limits.max_head, limits.max_headers));
        }
        let want = limits.max_head + 3 - buf.len();
        if read_some(stream, &mut buf, want, deadline, limits)? == 0 {
            return Err(if buf.is_empty() {
                HttpError::Closed
            } else {
                HttpError::BadRequest("connection closed inside the request head".into())
            });
        }
    };
    if head_len > limits.max_head {
        return Err(HttpError::HeadTooLarge(limits.max_head, limits.max_headers));
    }
    let head = parse_head(buf.get(..head_len).unwrap_or(&[]), limits)?;
    let length = head.content_length()?;
    let length = usize::try_from(length)
        .ok()
        .filter(|&l| l <= limits.max_body)
        .ok_or(HttpError::BodyTooLarge(limits.max_body))?;
    let mut body = buf.get(body_start..).unwrap_or(&[]).to_vec();
    if body.len() < length && head.expects_continue() {
        stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    while body.len() < length {
        let want = length - body.len();
        if read_some(stream, &mut body, want, deadline, limits)? == 0 {
            return Err(HttpError::BadRequest(format!(
                "connection closed after {} of {length} body bytes",
                body.len()
            )));
        }
    }
    // Anything after the body (a pipelined request) is not read: the connection closes.
    body.truncate(length);
    Ok(Request {
        method: head.method,
        target: head.target,
        headers: head.headers,
        body,
    })
}

/// The reason phrase of a status (any other status gets a generic one).
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => match status / 100 {
            1 => "Informational",
            2 => "Success",
            3 => "Redirection",
            4 => "Client Error",
            _ => "Server Error",
        },
    }
}

/// Writes a response with a plain-text body (none for 204 and 304) and `Connection: close`,
/// then closes the connection after draining what the client still sends (bounded), so
/// the answer is not lost to a reset.
pub fn respond(stream: &mut TcpStream, status: u16, extra: &[(&str, &str)], body: &str) {
    let mut text = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    let bodyless = status == 204 || status == 304 || status < 200;
    for (name, value) in extra {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    if !bodyless {
        text.push_str("Content-Type: text/plain; charset=utf-8\r\n");
        text.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    text.push_str("Connection: close\r\n\r\n");
    if !bodyless {
        text.push_str(body);
    }
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    if stream.write_all(text.as_bytes()).is_ok() && stream.flush().is_ok() {
        let _ = stream.shutdown(Shutdown::Write);
        drain(stream);
    }
}

/// Reads and drops what the client still sends, at most 256 KiB or one second.
fn drain(stream: &mut TcpStream) {
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut total = 0usize;
    let mut sink = [0u8; 8192];
    while total < 256 * 1024 {
        let Some(left) = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
        else {
            return;
        };
        if stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => total += n,
        }
    }
}

/// Text from the network made safe for a terminal: control characters (escape sequences
/// included) replaced by `?`, cut to `max` characters.
pub fn printable(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .take(max)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn head(text: &str) -> Result<Head, HttpError> {
        parse_head(text.as_bytes(), &Limits::default())
    }

    #[test]
    fn heads_parse_strictly() {
        let parsed =
            head("POST /hook HTTP/1.1\r\nHost: x\r\nContent-Type:  application/jwt \r\nContent-Length: 5")
                .unwrap();
        assert_eq!(parsed.method, "POST");
        assert_eq!(parsed.target, "/hook");
        assert_eq!(
            header(&parsed.headers, "content-type"),
            Some("application/jwt")
        );
        assert_eq!(parsed.content_length().unwrap(), 5);
        assert_eq!(head("GET / HTTP/1.0").unwrap().content_length().unwrap(), 0);

        for bad in [
            "POST /",
            "POST  / HTTP/1.1",
            "POST / HTTP/2",
            "PO ST / HTTP/1.1",
            "POST / HTTP/1.1\r\nno colon",
            "POST / HTTP/1.1\r\nA: b\r\n folded",
            "POST / HTTP/1.1\r\nbad name: x",
        ] {
            assert!(
                matches!(head(bad), Err(HttpError::BadRequest(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn lengths_are_checked() {
        let length = |headers: &str| {
            head(&format!("POST / HTTP/1.1\r\n{headers}"))
                .unwrap()
                .content_length()
        };
        assert_eq!(length("Content-Length: 7\r\nContent-Length: 7").unwrap(), 7);
        assert_eq!(length("Content-Length: 7, 7").unwrap(), 7);
        for bad in [
            "Content-Length: 7\r\nContent-Length: 8",
            "Content-Length: -1",
            "Content-Length: 1e3",
            "Content-Length: ",
            "Content-Length: 99999999999999999999",
            "Transfer-Encoding: chunked\r\nContent-Length: 3",
        ] {
            assert!(
                matches!(length(bad), Err(HttpError::BadRequest(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            length("Transfer-Encoding: chunked"),
            Err(HttpError::NotImplemented(_))
        ));
    }

    #[test]
    fn the_head_ends_at_the_first_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some((15, 18)));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\nbody"), Some((14, 16)));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
    }

    /// Sends `bytes` to a fresh connection and reads the request on the other side.
    fn exchange(bytes: &[u8], limits: Limits) -> (Result<Request, HttpError>, String) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let bytes = bytes.to_vec();
        let client = std::thread::spawn(move || {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream.write_all(&bytes).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer);
            String::from_utf8_lossy(&answer).into_owned()
        });
        let (mut stream, _) = listener.accept().unwrap();
        let result = read_request(&mut stream, &limits);
        match &result {
            Ok(_) => respond(&mut stream, 200, &[], "ok\n"),
            Err(e) => {
                if let Some(status) = e.status() {
                    respond(&mut stream, status, &[], "no\n");
                }
            }
        }
        drop(stream);
        (result, client.join().unwrap())
    }

    #[test]
    fn a_request_is_read_exactly_and_answered() {
        let (request, answer) = exchange(
            b"POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloEXTRA",
            Limits::default(),
        );
        let request = request.unwrap();
        assert_eq!(request.body, b"hello");
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nok\n"), "{answer}");

        // The body was sent with the head: no 100 Continue is needed.
        let (_, answer) = exchange(
            b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
            Limits::default(),
        );
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    #[test]
    fn a_client_that_expects_100_continue_gets_it_before_sending_the_body() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::thread::spawn(move || {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream
                .write_all(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
                .unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut interim = [0u8; 25];
            stream.read_exact(&mut interim).unwrap();
            assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
            stream.write_all(b"hi").unwrap();
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer);
            answer
        });
        let (mut stream, _) = listener.accept().unwrap();
        let request = read_request(&mut stream, &Limits::default()).unwrap();
        assert_eq!(request.body, b"hi");
        respond(&mut stream, 204, &[], "");
        drop(stream);
        let answer = client.join().unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 204 No Content\r\n"),
            "{answer}"
        );
        assert!(!answer.contains("Content-Length"), "{answer}");
    }

    #[test]
    fn limits_hold() {
        let small = Limits {
            max_body: 4,
            read_time: Duration::from_millis(300),
            ..Limits::default()
        };
        let (result, answer) =
            exchange(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", small);
        assert!(matches!(result, Err(HttpError::BodyTooLarge(4))));
        assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");

        // A body shorter than announced: the client stalls and the deadline answers 408.
        let started = Instant::now();
        let (result, answer) = exchange(b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\nab", small);
        assert!(matches!(result, Err(HttpError::Timeout(_))));
        assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
        assert!(started.elapsed() < Duration::from_secs(3));

        let huge = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
        let (result, answer) = exchange(huge.as_bytes(), Limits::default());
        assert!(matches!(result, Err(HttpError::HeadTooLarge(..))));
        assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");

        let (result, _) = exchange(
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            small,
        );
        assert_eq!(result.unwrap_err().status(), Some(501));
    }

    #[test]
    fn network_text_is_made_printable() {
        assert_eq!(printable("a\x1b[31mb\n", 64), "a?[31mb?");
        assert_eq!(printable("abcdef", 3), "abc…");
    }
}
