//! The cached JWK Set that `mandate jwks fetch` writes and `mandate verify` reads.
//!
//! One entry per issuer, `$XDG_CACHE_HOME/mandate/jwks/<issuer>.json` (or under
//! `~/.cache/mandate/`; `%LOCALAPPDATA%\mandate\` on Windows), so that fetching a second
//! issuer's set leaves the first one's; and the last set fetched, whatever its issuer, in
//! `jwks.json` beside it (what `verify` reads without `--issuer`). Each holds the set as it
//! came, the URL it came from (after redirects), the issuer derived from that URL, the
//! fetch time and the response's `Cache-Control`. The entry may be used as
//! long as the core's JWK Set cache policy says (`max-age`, five minutes when the header
//! names none, a day at most); an older entry is refused, not used.

use std::path::{Path, PathBuf};

use mandate_core::{CachePolicy, JwkSet, KeySetCache};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::config;
use crate::error::CliError;

/// How long a fetched key set may be used when its response names no `max-age`, in seconds.
pub const KEY_SET_LIFETIME_SECS: i64 = 300;

/// Where a key set is published under its issuer.
pub const WELL_KNOWN_PATH: &str = "/.well-known/jwks.json";

/// The cache file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// The URL the set was read from, after redirects.
    pub source: String,
    /// The issuer the set belongs to: `source` without `/.well-known/jwks.json`.
    pub issuer: Option<String>,
    /// When it was fetched, seconds since the Unix epoch.
    pub fetched_at: i64,
    /// The JWK Set, as it came (a `Value`: kept byte for byte, members a `JwkSet`
    /// would skip included).
    pub jwks: Value,
    /// The response's `Cache-Control` header (absent in entries written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<String>,
}

/// The core's JWK Set cache policy with the service's five minutes when the response says
/// nothing: what `verify`, `listen` and `mcp` keep a fetched set by.
pub fn cache_policy() -> CachePolicy {
    CachePolicy {
        default_max_age: time::Duration::seconds(KEY_SET_LIFETIME_SECS),
        ..CachePolicy::default()
    }
}

/// The cache file's path.
pub fn cache_path() -> Result<PathBuf, CliError> {
    Ok(config::cache_dir()?.join("jwks.json"))
}

/// The cache file of the set published for `issuer`: in `jwks/`, named after the issuer
/// with every byte outside `[A-Za-z0-9.-]` written as `_` and its two hex digits (one name
/// per issuer, none shared).
pub fn issuer_cache_path(issuer: &str) -> Result<PathBuf, CliError> {
    let mut name = String::with_capacity(issuer.len() + 5);
    for byte in issuer.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'.' || byte == b'-' {
            name.push(char::from(byte));
        } else {
            name.push_str(&format!("_{byte:02X}"));
        }
    }
    name.push_str(".json");
    Ok(config::cache_dir()?.join("jwks").join(name))
}

/// The cached set `verify` uses and where it was read: `issuer`'s own (or the last set
/// fetched, if that one is `issuer`'s: a cache written before sets were kept per issuer),
/// or without an issuer the last set fetched. `None` when there is none.
pub fn load_for(issuer: Option<&str>) -> Result<(PathBuf, Option<CacheEntry>), CliError> {
    let last = cache_path()?;
    let Some(issuer) = issuer else {
        let entry = load(&last)?;
        return Ok((last, entry));
    };
    let own = issuer_cache_path(issuer)?;
    if let Some(entry) = load(&own)? {
        return Ok((own, Some(entry)));
    }
    match load(&last)? {
        Some(entry) if entry.issuer.as_deref() == Some(issuer) => Ok((last, Some(entry))),
        _ => Ok((own, None)),
    }
}

/// The JWK Set URL for what the user typed: a URL ending in `/.well-known/jwks.json` is
/// kept; anything else is taken as the issuer (the verdicts URL) and the path appended.
pub fn jwks_url(given: &str) -> String {
    let trimmed = given.trim();
    if trimmed.ends_with(WELL_KNOWN_PATH) {
        trimmed.to_owned()
    } else {
        format!("{}{WELL_KNOWN_PATH}", trimmed.trim_end_matches('/'))
    }
}

/// The issuer whose keys are published at `url`, when it is a `/.well-known/jwks.json` URL
/// without query or fragment.
pub fn issuer_of(url: &reqwest::Url) -> Option<String> {
    if url.query().is_some() || url.fragment().is_some() {
        return None;
    }
    url.as_str()
        .strip_suffix(WELL_KNOWN_PATH)
        .map(str::to_owned)
}

impl CacheEntry {
    /// Seconds since the fetch, at `now`.
    pub fn age_at(&self, now: i64) -> i64 {
        now.saturating_sub(self.fetched_at)
    }

    /// Whether the entry may still be used at `now`: the core's JWK Set cache policy, from
    /// the fetch time and the response's `Cache-Control`.
    pub fn is_fresh_at(&self, now: i64) -> bool {
        let (Ok(fetched), Ok(now)) = (
            OffsetDateTime::from_unix_timestamp(self.fetched_at),
            OffsetDateTime::from_unix_timestamp(now),
        ) else {
            return false;
        };
        let mut cache = KeySetCache::new(cache_policy());
        cache.fetched(fetched, self.cache_control.as_deref());
        cache.is_fresh_at(now)
    }

    /// How long the entry may be used after its fetch, in seconds.
    pub fn lifetime_secs(&self) -> i64 {
        KeySetCache::new(cache_policy())
            .lifetime(self.cache_control.as_deref())
            .whole_seconds()
    }

    /// The key set, parsed strictly.
    pub fn key_set(&self) -> Result<JwkSet, CliError> {
        let bytes = serde_json::to_vec(&self.jwks)
            .map_err(|e| CliError::usage(format!("cached key set cannot be read: {e}")))?;
        JwkSet::from_json(&bytes).map_err(|e| {
            CliError::usage(format!(
                "cached key set is not valid ({e}); fetch it again with `mandate jwks fetch URL`"
            ))
        })
    }
}

/// Reads the cache; `None` when there is none.
pub fn load(path: &Path) -> Result<Option<CacheEntry>, CliError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            CliError::usage(format!(
                "key set cache {} is not valid ({e}); fetch it again with `mandate jwks fetch URL`",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CliError::usage(format!(
            "cannot read key set cache {}: {e}",
            path.display()
        ))),
    }
}

/// Writes the cache (atomically).
pub fn save(path: &Path, entry: &CacheEntry) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(entry)
        .map_err(|e| CliError::usage(format!("cannot encode the key set cache: {e}")))?;
    config::write_private(path, format!("{text}\n").as_bytes())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_issuers() {
        assert_eq!(
            jwks_url("https://v.example/"),
            "https://v.example/.well-known/jwks.json"
        );
        assert_eq!(
            jwks_url("https://v.example/.well-known/jwks.json"),
            "https://v.example/.well-known/jwks.json"
        );
        let url = reqwest::Url::parse("https://v.example:8443/.well-known/jwks.json").unwrap();
        assert_eq!(issuer_of(&url).as_deref(), Some("https://v.example:8443"));
        let odd = reqwest::Url::parse("https://v.example/keys.json").unwrap();
        assert_eq!(issuer_of(&odd), None);
    }

    #[test]
    fn each_issuer_has_a_cache_file_of_its_own() {
        let name = |issuer: &str| {
            issuer_cache_path(issuer)
                .unwrap()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        };
        assert_eq!(
            name("https://v.example:8443"),
            "https_3A_2F_2Fv.example_3A8443.json"
        );
        // No two issuers share a file, however their names are written.
        assert_ne!(name("https://a_b"), name("https://a/b"));
        assert_ne!(name("http://a:1"), name("http_3A//a:1"));
    }

    #[test]
    fn five_minutes_of_freshness() {
        let entry = CacheEntry {
            source: String::new(),
            issuer: None,
            fetched_at: 1000,
            jwks: Value::Null,
            cache_control: None,
        };
        assert!(entry.is_fresh_at(1000));
        assert!(entry.is_fresh_at(1299));
        assert!(!entry.is_fresh_at(1300));
    }

    #[test]
    fn the_responses_max_age_decides_when_it_names_one() {
        let entry = |cache_control: &str| CacheEntry {
            source: String::new(),
            issuer: None,
            fetched_at: 1000,
            jwks: Value::Null,
            cache_control: Some(cache_control.to_owned()),
        };
        let short = entry("public, max-age=20");
        assert!(short.is_fresh_at(1019) && !short.is_fresh_at(1020));
        assert_eq!(short.lifetime_secs(), 20);
        let long = entry("max-age=3600");
        assert!(long.is_fresh_at(4599) && !long.is_fresh_at(4600));
        assert!(!entry("no-store").is_fresh_at(1000));
        // Written before the header was kept: five minutes.
        let old: CacheEntry = serde_json::from_str(
            r#"{"source": "", "issuer": null, "fetched_at": 1000, "jwks": null}"#,
        )
        .unwrap();
        assert!(old.is_fresh_at(1299) && !old.is_fresh_at(1300));
    }
}
