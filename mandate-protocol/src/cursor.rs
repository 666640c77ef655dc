//! Pagination cursor tokens.
//!
//! A list page ends with `next_cursor`, an opaque token the client sends back to get the
//! next page. The token is signed (HMAC-SHA256) so that a client can neither forge a
//! position nor carry a cursor over to another list, another filter set or another key
//! class, and it expires 24 hours after it was issued.
//!
//! The format is `cur_` + base64url(payload) + `.` + base64url(tag), all URL-safe and
//! without padding. The payload holds a version byte, the position, the issue time, the
//! list name, and digests of the filter set and of the key scope. The tag covers the text
//! `cur_<payload>`, so any edit to the token breaks it.
//!
//! Opening a cursor has two outcomes besides success, and only two: every token that is
//! edited, truncated, invented, badly encoded or expired is [`CursorError::Malformed`]
//! (the caller cannot tell these apart, on purpose); a genuine, unexpired token presented
//! with another list, filter set or key scope is [`CursorError::Mismatch`].

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

/// The prefix every cursor token starts with.
pub(crate) const CURSOR_PREFIX: &str = "cur_";

/// How long a cursor stays valid after it was issued, in seconds (24 hours).
pub(crate) const CURSOR_LIFETIME_SECS: i64 = 86_400;

/// How far in the future an issue time may lie before the cursor is refused, in seconds.
///
/// This absorbs clock differences between servers that share the cursor secret.
pub(crate) const CURSOR_CLOCK_SKEW_SECS: i64 = 300;

/// The longest token [`CursorKey::open`] will look at; anything longer is malformed.
const MAX_TOKEN_LEN: usize = 1024;

/// The payload layout version.
const VERSION: u8 = 1;

/// Bytes kept of the filter and scope digests.
const DIGEST_LEN: usize = 16;

type HmacSha256 = Hmac<Sha256>;

/// Why a cursor cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CursorError {
    /// Edited, truncated, invented, badly encoded, signed with another key, or expired.
    /// These cases are deliberately indistinguishable.
    #[error("cursor expired or malformed")]
    Malformed,
    /// A genuine cursor presented with another list, filter set or key scope.
    #[error("cursor belongs to another list, filter set or key; start again without a cursor")]
    Mismatch,
}

/// What a cursor is bound to: the list, the filters in force and the key scope.
///
/// A cursor issued under one context opens only under an equal context. Filters are
/// compared as a set of `(name, value)` pairs: their order does not matter. Pass only the
/// filters the client actually set; an unset filter must be left out, not given as an
/// empty value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CursorContext {
    /// The list the cursor walks, for example `decisions` or `mandates`.
    pub list: String,
    /// The filters in force, as `(name, value)` pairs, in any order.
    pub filters: Vec<(String, String)>,
    /// The key scope chosen by the server, for example `org:<id>:sandbox` or
    /// `agent:<id>`. Switching key class mid-walk changes the scope.
    pub scope: String,
}

impl CursorContext {
    /// A context for `list` under `scope`, with no filters yet.
    pub fn new(list: impl Into<String>, scope: impl Into<String>) -> Self {
        Self {
            list: list.into(),
            filters: Vec::new(),
            scope: scope.into(),
        }
    }

    /// Adds a filter that is set.
    #[must_use]
    pub fn with_filter(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.filters.push((name.into(), value.into()));
        self
    }

    /// Adds a filter if it is set, and leaves it out if it is `None`.
    #[must_use]
    pub fn with_optional_filter(
        self,
        name: impl Into<String>,
        value: Option<impl Into<String>>,
    ) -> Self {
        match value {
            Some(value) => self.with_filter(name, value),
            None => self,
        }
    }

    /// The digest of the canonical filter set: pairs sorted, each field length-prefixed.
    fn filters_digest(&self) -> [u8; DIGEST_LEN] {
        let mut pairs: Vec<(&str, &str)> = self
            .filters
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        pairs.sort_unstable();
        let mut hasher = Sha256::new();
        hasher.update(b"mandate cursor filters v1\0");
        hasher.update((pairs.len() as u64).to_be_bytes());
        for (name, value) in pairs {
            update_framed(&mut hasher, name.as_bytes());
            update_framed(&mut hasher, value.as_bytes());
        }
        truncate_digest(hasher)
    }

    /// The digest of the key scope.
    fn scope_digest(&self) -> [u8; DIGEST_LEN] {
        let mut hasher = Sha256::new();
        hasher.update(b"mandate cursor scope v1\0");
        update_framed(&mut hasher, self.scope.as_bytes());
        truncate_digest(hasher)
    }
}

fn update_framed(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_be_bytes());
    hasher.update(bytes);
}

fn truncate_digest(hasher: Sha256) -> [u8; DIGEST_LEN] {
    let full = hasher.finalize();
    let mut out = [0u8; DIGEST_LEN];
    out.copy_from_slice(&full[..DIGEST_LEN]);
    out
}

/// The decoded content of a cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Payload {
    position: i64,
    issued_at: i64,
    list: Vec<u8>,
    filters: [u8; DIGEST_LEN],
    scope: [u8; DIGEST_LEN],
}

impl Payload {
    fn for_context(context: &CursorContext, position: i64, issued_at: i64) -> Self {
        Self {
            position,
            issued_at,
            list: context.list.as_bytes().to_vec(),
            filters: context.filters_digest(),
            scope: context.scope_digest(),
        }
    }

    /// `version | position | issued_at | list length (u16) | list | filters | scope`.
    fn encode(&self) -> Vec<u8> {
        // List names are short constants chosen by the server; longer ones are cut so the
        // length always fits (and then simply never match).
        let list = &self.list[..self.list.len().min(usize::from(u16::MAX))];
        let mut out = Vec::with_capacity(1 + 8 + 8 + 2 + list.len() + 2 * DIGEST_LEN);
        out.push(VERSION);
        out.extend_from_slice(&self.position.to_be_bytes());
        out.extend_from_slice(&self.issued_at.to_be_bytes());
        out.extend_from_slice(&(list.len() as u16).to_be_bytes());
        out.extend_from_slice(list);
        out.extend_from_slice(&self.filters);
        out.extend_from_slice(&self.scope);
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let mut reader = Reader(bytes);
        if reader.take::<1>()? != [VERSION] {
            return None;
        }
        let position = i64::from_be_bytes(reader.take()?);
        let issued_at = i64::from_be_bytes(reader.take()?);
        let list_len = usize::from(u16::from_be_bytes(reader.take()?));
        let list = reader.take_slice(list_len)?.to_vec();
        let filters = reader.take()?;
        let scope = reader.take()?;
        if !reader.0.is_empty() {
            return None;
        }
        Some(Self {
            position,
            issued_at,
            list,
            filters,
            scope,
        })
    }
}

/// Reads fixed-size fields from the front of a byte slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take_slice(&mut self, len: usize) -> Option<&'a [u8]> {
        if self.0.len() < len {
            return None;
        }
        let (head, tail) = self.0.split_at(len);
        self.0 = tail;
        Some(head)
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take_slice(N)?.try_into().ok()
    }
}

/// The server's secret for signing and opening cursors.
///
/// Use at least 32 random bytes, shared by every server that answers the same lists.
/// `Debug` never prints the secret.
#[derive(Clone)]
pub struct CursorKey {
    mac: HmacSha256,
}

impl fmt::Debug for CursorKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CursorKey(<redacted>)")
    }
}

impl CursorKey {
    /// A key from secret bytes of any length.
    ///
    /// The result is standard HMAC-SHA256 keyed with `secret`: the key is normalised to
    /// one block here exactly as RFC 2104 does it (hashed if longer than a block, then
    /// zero-padded), which keeps construction infallible.
    pub fn new(secret: &[u8]) -> Self {
        let mut block = hmac::digest::Key::<HmacSha256>::default();
        if secret.len() > block.len() {
            let hashed = Sha256::digest(secret);
            block[..hashed.len()].copy_from_slice(&hashed);
        } else {
            block[..secret.len()].copy_from_slice(secret);
        }
        Self {
            mac: <HmacSha256 as KeyInit>::new(&block),
        }
    }

    /// Issues a cursor meaning "continue after `position`" for this context, at `now`
    /// (kept in whole seconds).
    pub fn issue(&self, context: &CursorContext, position: i64, now: OffsetDateTime) -> String {
        let payload = Payload::for_context(context, position, now.unix_timestamp()).encode();
        let mut token = String::with_capacity(CURSOR_PREFIX.len() + payload.len() * 2 + 48);
        token.push_str(CURSOR_PREFIX);
        URL_SAFE_NO_PAD.encode_string(&payload, &mut token);
        let mut mac = self.mac.clone();
        mac.update(token.as_bytes());
        let tag = mac.finalize().into_bytes();
        token.push('.');
        URL_SAFE_NO_PAD.encode_string(tag, &mut token);
        token
    }

    /// Opens a cursor presented with `context` at `now` (whole seconds) and returns the
    /// position to continue after.
    ///
    /// A cursor is valid while `now < issued_at + 24 h`, and refused if its issue time
    /// lies more than five minutes in the future.
    pub fn open(
        &self,
        token: &str,
        context: &CursorContext,
        now: OffsetDateTime,
    ) -> Result<i64, CursorError> {
        let now = now.unix_timestamp();
        let payload = self.verified_payload(token)?;
        let expired = now >= payload.issued_at.saturating_add(CURSOR_LIFETIME_SECS);
        let from_future = payload.issued_at > now.saturating_add(CURSOR_CLOCK_SKEW_SECS);
        if expired || from_future {
            return Err(CursorError::Malformed);
        }
        let same_context = payload.list == context.list.as_bytes()
            && payload.filters == context.filters_digest()
            && payload.scope == context.scope_digest();
        if !same_context {
            return Err(CursorError::Mismatch);
        }
        Ok(payload.position)
    }

    /// Checks the prefix, the encoding and the tag, then decodes the payload.
    fn verified_payload(&self, token: &str) -> Result<Payload, CursorError> {
        if token.len() > MAX_TOKEN_LEN || !token.starts_with(CURSOR_PREFIX) {
            return Err(CursorError::Malformed);
        }
        let (signed, tag_text) = token.rsplit_once('.').ok_or(CursorError::Malformed)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag_text)
            .map_err(|_| CursorError::Malformed)?;
        let mut mac = self.mac.clone();
        mac.update(signed.as_bytes());
        mac.verify_slice(&tag).map_err(|_| CursorError::Malformed)?;
        let payload_text = &signed[CURSOR_PREFIX.len()..];
        let bytes = URL_SAFE_NO_PAD
            .decode(payload_text)
            .map_err(|_| CursorError::Malformed)?;
        Payload::decode(&bytes).ok_or(CursorError::Malformed)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn at(secs: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(secs).unwrap()
    }

    const T0: i64 = 1_750_000_000;

    fn key() -> CursorKey {
        CursorKey::new(b"0123456789abcdef0123456789abcdef")
    }

    fn decisions() -> CursorContext {
        CursorContext::new("decisions", "org:acme:sandbox")
            .with_filter("verdict", "allow")
            .with_filter("agent", "agt_buyer")
    }

    #[test]
    fn round_trips_the_position() {
        let token = key().issue(&decisions(), 42, at(T0));
        assert!(token.starts_with("cur_"));
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        );
        assert_eq!(key().open(&token, &decisions(), at(T0 + 1)), Ok(42));
        for position in [i64::MIN, -1, 0, i64::MAX] {
            let token = key().issue(&decisions(), position, at(T0));
            assert_eq!(key().open(&token, &decisions(), at(T0)), Ok(position));
        }
    }

    #[test]
    fn filter_order_does_not_matter() {
        let token = key().issue(&decisions(), 7, at(T0));
        let reordered = CursorContext::new("decisions", "org:acme:sandbox")
            .with_filter("agent", "agt_buyer")
            .with_filter("verdict", "allow");
        assert_eq!(key().open(&token, &reordered, at(T0)), Ok(7));
    }

    #[test]
    fn unset_filters_are_left_out() {
        let context = CursorContext::new("decisions", "agent:agt_buyer")
            .with_optional_filter("verdict", None::<String>)
            .with_optional_filter("agent", Some("agt_buyer"));
        assert_eq!(
            context.filters,
            vec![("agent".to_owned(), "agt_buyer".to_owned())]
        );
    }

    #[test]
    fn lives_exactly_24_hours() {
        let token = key().issue(&decisions(), 1, at(T0));
        let last = T0 + CURSOR_LIFETIME_SECS - 1;
        assert_eq!(key().open(&token, &decisions(), at(last)), Ok(1));
        assert_eq!(
            key().open(&token, &decisions(), at(T0 + CURSOR_LIFETIME_SECS)),
            Err(CursorError::Malformed)
        );
        assert_eq!(
            key().open(&token, &decisions(), at(253_402_300_799)),
            Err(CursorError::Malformed)
        );
    }

    #[test]
    fn refuses_issue_times_in_the_future_beyond_the_skew() {
        let token = key().issue(&decisions(), 1, at(T0));
        assert_eq!(
            key().open(&token, &decisions(), at(T0 - CURSOR_CLOCK_SKEW_SECS)),
            Ok(1)
        );
        assert_eq!(
            key().open(&token, &decisions(), at(T0 - CURSOR_CLOCK_SKEW_SECS - 1)),
            Err(CursorError::Malformed)
        );
    }

    #[test]
    fn expired_wins_over_mismatch() {
        let token = key().issue(&decisions(), 1, at(T0));
        let other = CursorContext::new("mandates", "org:acme:sandbox");
        assert_eq!(
            key().open(&token, &other, at(T0 + CURSOR_LIFETIME_SECS)),
            Err(CursorError::Malformed)
        );
    }

    #[test]
    fn another_list_filter_set_or_scope_is_a_mismatch() {
        let token = key().issue(&decisions(), 1, at(T0));
        let mut other_list = decisions();
        other_list.list = "mandates".to_owned();
        let changed_filter = CursorContext::new("decisions", "org:acme:sandbox")
            .with_filter("verdict", "deny_limit")
            .with_filter("agent", "agt_buyer");
        let dropped_filter =
            CursorContext::new("decisions", "org:acme:sandbox").with_filter("verdict", "allow");
        let added_filter = decisions().with_filter("mode", "enforce");
        let mut agent_key = decisions();
        agent_key.scope = "agent:agt_buyer".to_owned();
        for context in [
            other_list,
            changed_filter,
            dropped_filter,
            added_filter,
            agent_key,
        ] {
            assert_eq!(
                key().open(&token, &context, at(T0)),
                Err(CursorError::Mismatch),
                "{context:?}"
            );
        }
    }

    #[test]
    fn filter_framing_is_unambiguous() {
        let split_one = CursorContext::new("decisions", "s").with_filter("ab", "c");
        let split_two = CursorContext::new("decisions", "s").with_filter("a", "bc");
        assert_ne!(split_one.filters_digest(), split_two.filters_digest());
        let token = key().issue(&split_one, 1, at(T0));
        assert_eq!(
            key().open(&token, &split_two, at(T0)),
            Err(CursorError::Mismatch)
        );
    }

    #[test]
    fn edited_tokens_are_malformed() {
        let token = key().issue(&decisions(), 5, at(T0));
        let (payload, tag) = token.rsplit_once('.').unwrap();
        let mut bytes = URL_SAFE_NO_PAD
            .decode(&payload[CURSOR_PREFIX.len()..])
            .unwrap();
        // Move the position forward and re-encode: the tag no longer matches.
        bytes[8] ^= 1;
        let forged = format!("cur_{}.{tag}", URL_SAFE_NO_PAD.encode(&bytes));
        assert_eq!(
            key().open(&forged, &decisions(), at(T0)),
            Err(CursorError::Malformed)
        );
        // Flip one character of the tag.
        let mut chars: Vec<char> = token.chars().collect();
        let last = chars.len() - 1;
        chars[last] = if chars[last] == 'A' { 'B' } else { 'A' };
        let edited: String = chars.into_iter().collect();
        assert_eq!(
            key().open(&edited, &decisions(), at(T0)),
            Err(CursorError::Malformed)
        );
    }

    #[test]
    fn truncated_tokens_are_malformed() {
        let token = key().issue(&decisions(), 5, at(T0));
        for len in 0..token.len() {
            assert_eq!(
                key().open(&token[..len], &decisions(), at(T0)),
                Err(CursorError::Malformed),
                "length {len}"
            );
        }
    }

    #[test]
    fn invented_and_badly_encoded_tokens_are_malformed() {
        let token = key().issue(&decisions(), 5, at(T0));
        let without_prefix = token.strip_prefix("cur_").unwrap();
        let (payload, tag) = token.rsplit_once('.').unwrap();
        let invented = [
            String::new(),
            "cur_".to_owned(),
            "cur_.".to_owned(),
            "cur_abc.def".to_owned(),
            format!("dec_{without_prefix}"),
            format!("CUR_{without_prefix}"),
            without_prefix.to_owned(),
            format!("{payload}.{tag}="),
            format!("{payload}={tag}"),
            format!("{payload}.{}", tag.replace('-', "+").replace('_', "/")),
            format!("{payload}..{tag}"),
            format!("{token}.{tag}"),
            format!("{token} "),
            format!("cur_{}", "A".repeat(2000)),
        ];
        for text in invented {
            assert_eq!(
                key().open(&text, &decisions(), at(T0)),
                Err(CursorError::Malformed),
                "{text}"
            );
        }
    }

    #[test]
    fn another_secret_is_malformed() {
        let token = key().issue(&decisions(), 5, at(T0));
        let other = CursorKey::new(b"another secret, also 32 bytes ok");
        assert_eq!(
            other.open(&token, &decisions(), at(T0)),
            Err(CursorError::Malformed)
        );
    }

    #[test]
    fn key_is_standard_hmac_sha256() {
        // RFC 4231 test case 2 and a key longer than one block (test case 6).
        let cases: [(&[u8], &[u8], &str); 2] = [
            (
                b"Jefe",
                b"what do ya want for nothing?",
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First",
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
        ];
        for (secret, data, expected) in cases {
            let mut mac = CursorKey::new(secret).mac;
            mac.update(data);
            let hex: String = mac
                .finalize()
                .into_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(hex, expected);
        }
    }

    #[test]
    fn debug_hides_the_secret() {
        let text = format!("{:?}", CursorKey::new(b"super-secret-value"));
        assert_eq!(text, "CursorKey(<redacted>)");
    }

    #[test]
    fn messages() {
        assert_eq!(
            CursorError::Malformed.to_string(),
            "cursor expired or malformed"
        );
        assert_eq!(
            CursorError::Mismatch.to_string(),
            "cursor belongs to another list, filter set or key; start again without a cursor"
        );
    }
}
