//! A minimal keep-alive HTTP/1.1 client over one tokio TCP stream.
//!
//! The load generator shares two cores with the server, so it must be cheap: requests are
//! written as bytes prepared by the caller, responses are parsed with `httparse` (status
//! line and headers), the body is framed by `Content-Length` or chunked encoding, and the
//! connection is reused until the server says `Connection: close`. No pipelining.

use std::io;
use std::net::SocketAddr;
use std::ops::Range;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One response, its body borrowed from the connection's buffer.
#[derive(Debug)]
pub struct Response<'a> {
    /// The status code.
    pub status: u16,
    /// The body, de-chunked.
    pub body: &'a [u8],
    /// The server will close the connection after this response.
    pub close: bool,
}

/// A connection.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    body: Vec<u8>,
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// What the head of a response says.
struct Head {
    status: u16,
    len: usize,
    framing: Framing,
    close: bool,
}

enum Framing {
    Length(usize),
    Chunked,
    /// No length: the body runs to the end of the connection.
    UntilClose,
}

fn parse_head(buf: &[u8]) -> io::Result<Option<Head>> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(bad(&format!("bad response head: {e}"))),
    };
    let status = response.code.unwrap_or(0);
    let mut framing = Framing::UntilClose;
    let mut close = response.version == Some(0);
    for h in response.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(h.value).map_err(|_| bad("content-length"))?;
            let n = text.trim().parse().map_err(|_| bad("content-length"))?;
            framing = Framing::Length(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if h.value.eq_ignore_ascii_case(b"chunked") {
                framing = Framing::Chunked;
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            if h.value.eq_ignore_ascii_case(b"close") {
                close = true;
            } else if h.value.eq_ignore_ascii_case(b"keep-alive") {
                close = false;
            }
        }
    }
    // 1xx, 204 and 304 have no body.
    if status < 200 || status == 204 || status == 304 {
        framing = Framing::Length(0);
    }
    if matches!(framing, Framing::UntilClose) {
        close = true;
    }
    Ok(Some(Head {
        status,
        len,
        framing,
        close,
    }))
}

/// Decodes a complete chunked body from `data` into `out`; `None` while incomplete,
/// otherwise the bytes consumed.
fn dechunk(data: &[u8], out: &mut Vec<u8>) -> io::Result<Option<usize>> {
    out.clear();
    let mut at = 0;
    loop {
        let Some(eol) = memchr::memmem::find(&data[at..], b"\r\n") else {
            return Ok(None);
        };
        let line = &data[at..at + eol];
        let size_text = line.split(|&b| b == b';').next().unwrap_or(line);
        let size_text = std::str::from_utf8(size_text).map_err(|_| bad("chunk size"))?;
        let size = usize::from_str_radix(size_text.trim(), 16).map_err(|_| bad("chunk size"))?;
        at += eol + 2;
        if size == 0 {
            // Trailers, then an empty line.
            loop {
                let Some(eol) = memchr::memmem::find(&data[at..], b"\r\n") else {
                    return Ok(None);
                };
                at += eol + 2;
                if eol == 0 {
                    return Ok(Some(at));
                }
            }
        }
        if data.len() < at + size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&data[at..at + size]);
        at += size + 2;
    }
}

impl Conn {
    /// Connects with `TCP_NODELAY`.
    pub async fn connect(addr: SocketAddr) -> io::Result<Self> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            buf: Vec::with_capacity(16 * 1024),
            body: Vec::new(),
        })
    }

    /// Sends one request (complete bytes, head and body) and reads its response.
    pub async fn request(&mut self, request: &[u8]) -> io::Result<Response<'_>> {
        self.stream.write_all(request).await?;
        let (status, range, chunked, close) = self.read_response().await?;
        let body = if chunked {
            &self.body[..]
        } else {
            &self.buf[range]
        };
        Ok(Response {
            status,
            body,
            close,
        })
    }

    async fn fill(&mut self) -> io::Result<usize> {
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(16 * 1024);
        }
        self.stream.read_buf(&mut self.buf).await
    }

    /// Reads a response; returns its status, the body's range in `buf` (or `chunked`, with
    /// the body in `self.body`), and whether the connection closes.
    async fn read_response(&mut self) -> io::Result<(u16, Range<usize>, bool, bool)> {
        self.buf.clear();
        let head = loop {
            if let Some(head) = parse_head(&self.buf)? {
                break head;
            }
            if self.fill().await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before a response",
                ));
            }
        };
        match head.framing {
            Framing::Length(n) => {
                while self.buf.len() < head.len + n {
                    if self.fill().await? == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "connection closed inside a body",
                        ));
                    }
                }
                Ok((head.status, head.len..head.len + n, false, head.close))
            }
            Framing::Chunked => loop {
                if dechunk(&self.buf[head.len..], &mut self.body)?.is_some() {
                    return Ok((head.status, 0..0, true, head.close));
                }
                if self.fill().await? == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed inside a chunked body",
                    ));
                }
            },
            Framing::UntilClose => {
                while self.fill().await? != 0 {}
                Ok((head.status, head.len..self.buf.len(), false, true))
            }
        }
    }
}

/// Writes a POST request with a JSON body into `out` (cleared first).
pub fn write_post(out: &mut Vec<u8>, host: &str, path: &str, key: Option<&str>, body: &[u8]) {
    out.clear();
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(host.as_bytes());
    if let Some(key) = key {
        out.extend_from_slice(b"\r\nAuthorization: Bearer ");
        out.extend_from_slice(key.as_bytes());
    }
    out.extend_from_slice(b"\r\nContent-Type: application/json\r\nContent-Length: ");
    out.extend_from_slice(body.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
}

/// The value of the first top-level-looking `"verdict"` string field, found without
/// parsing the JSON (`"policy_verdict"` does not match: the quote is part of the needle).
pub fn verdict_of(body: &[u8]) -> Option<&[u8]> {
    let at = memchr::memmem::find(body, b"\"verdict\"")? + 9;
    let rest = &body[at..];
    let rest = rest.trim_ascii_start().strip_prefix(b":")?;
    let rest = rest.trim_ascii_start().strip_prefix(b"\"")?;
    let end = memchr::memchr(b'"', rest)?;
    Some(&rest[..end])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_verdict_not_the_policy_verdict() {
        let body = br#"{"policy_verdict":"review","verdict" : "allow","x":1}"#;
        assert_eq!(verdict_of(body), Some(&b"allow"[..]));
        assert_eq!(verdict_of(br#"{"policy_verdict":"allow"}"#), None);
    }

    #[test]
    fn dechunks() {
        let mut out = Vec::new();
        let data = b"4\r\nWiki\r\n5;x=y\r\npedia\r\n0\r\n\r\n";
        assert_eq!(dechunk(data, &mut out).unwrap(), Some(data.len()));
        assert_eq!(out, b"Wikipedia");
        assert_eq!(dechunk(&data[..10], &mut out).unwrap(), None);
    }

    #[test]
    fn parses_a_head() {
        let head = parse_head(b"HTTP/1.1 201 Created\r\ncontent-length: 5\r\n\r\nhello")
            .unwrap()
            .unwrap();
        assert_eq!(head.status, 201);
        assert!(matches!(head.framing, Framing::Length(5)));
        assert!(!head.close);
        assert!(parse_head(b"HTTP/1.1 201 Cre").unwrap().is_none());
    }

    #[test]
    fn writes_a_post() {
        let mut out = Vec::new();
        write_post(&mut out, "h:1", "/p", Some("k"), b"{}");
        assert_eq!(
            out,
            b"POST /p HTTP/1.1\r\nHost: h:1\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        );
    }
}
