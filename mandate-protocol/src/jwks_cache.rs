//! When to fetch a JWK Set again: the cache policy as pure logic.
//!
//! A verifier keeps the last JWK Set it fetched and asks [`KeySetCache`] what to do:
//! use it while it is fresh (as long as the response's `Cache-Control: max-age` said,
//! within bounds, or a default when it said nothing), fetch again once it is stale, and
//! when a token names a `kid` the set does not hold (the service may have rotated its
//! key), fetch again, but at most once per interval, so a stream of tokens with garbage
//! kids cannot make it fetch on every token. The caller performs the fetch and reports it
//! with [`KeySetCache::fetched`]; time comes in as `now`: this module reads no clock and
//! opens no socket.

use time::{Duration, OffsetDateTime};

/// The bounds of the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachePolicy {
    /// Freshness when the response gave no `max-age` (or `Cache-Control` at all).
    pub default_max_age: Duration,
    /// The longest freshness honoured, whatever `max-age` says: a rotated key must be
    /// seen within this.
    pub max_max_age: Duration,
    /// The least time between two fetches made for unknown kids.
    pub unknown_kid_interval: Duration,
}

impl Default for CachePolicy {
    /// Five minutes by default (what the service sends), one day at most, and one fetch
    /// for unknown kids every 30 seconds at most.
    fn default() -> Self {
        Self {
            default_max_age: Duration::seconds(300),
            max_max_age: Duration::days(1),
            unknown_kid_interval: Duration::seconds(30),
        }
    }
}

/// What to do before verifying a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use]
pub enum NextFetch {
    /// Use the cached set.
    UseCached,
    /// Fetch the set (then report it with [`KeySetCache::fetched`]) and use the new one.
    Fetch,
}

/// The state of one cached JWK Set: when it was fetched, until when it is fresh, and
/// when a fetch was last made for an unknown kid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySetCache {
    policy: CachePolicy,
    fetched_at: Option<OffsetDateTime>,
    fresh_until: Option<OffsetDateTime>,
    last_unknown_kid_fetch: Option<OffsetDateTime>,
}

impl KeySetCache {
    /// An empty cache: the first answer is [`NextFetch::Fetch`].
    pub fn new(policy: CachePolicy) -> Self {
        Self {
            policy,
            fetched_at: None,
            fresh_until: None,
            last_unknown_kid_fetch: None,
        }
    }

    /// A set fetched at `at` with the response's `Cache-Control` header value, if any.
    pub fn fetched(&mut self, at: OffsetDateTime, cache_control: Option<&str>) {
        self.fetched_at = Some(at);
        self.fresh_until = Some(at.checked_add(self.lifetime(cache_control)).unwrap_or(at));
    }

    /// How long a response with this `Cache-Control` stays fresh: its `max-age`, at most
    /// the policy's bound; zero for `no-store` or `no-cache`; the default without one.
    pub fn lifetime(&self, cache_control: Option<&str>) -> Duration {
        match cache_control.map(parse_cache_control) {
            Some(Directive::NoCache) => Duration::ZERO,
            Some(Directive::MaxAge(secs)) => {
                Duration::seconds(i64::try_from(secs).unwrap_or(i64::MAX))
                    .min(self.policy.max_max_age)
            }
            Some(Directive::None) | None => self.policy.default_max_age,
        }
    }

    /// When the cached set was fetched, if one was.
    pub fn fetched_at(&self) -> Option<OffsetDateTime> {
        self.fetched_at
    }

    /// Whether the cached set may be used at `now`.
    pub fn is_fresh_at(&self, now: OffsetDateTime) -> bool {
        self.fresh_until.is_some_and(|until| now < until)
    }

    /// Before verifying: fetch when there is no set or it is stale.
    pub fn before_use(&self, now: OffsetDateTime) -> NextFetch {
        if self.is_fresh_at(now) {
            NextFetch::UseCached
        } else {
            NextFetch::Fetch
        }
    }

    /// A token named a kid the cached set does not hold: fetch again unless a fetch was
    /// made for an unknown kid less than the interval ago (the token is then refused as
    /// of an unknown key). Answering [`NextFetch::Fetch`] counts as that fetch.
    pub fn unknown_kid(&mut self, now: OffsetDateTime) -> NextFetch {
        let recent = self
            .last_unknown_kid_fetch
            .is_some_and(|at| now >= at && now - at < self.policy.unknown_kid_interval);
        if recent {
            return NextFetch::UseCached;
        }
        self.last_unknown_kid_fetch = Some(now);
        NextFetch::Fetch
    }
}

impl Default for KeySetCache {
    fn default() -> Self {
        Self::new(CachePolicy::default())
    }
}

enum Directive {
    NoCache,
    MaxAge(u64),
    None,
}

/// Reads `no-store`, `no-cache` and `max-age=N` (case-insensitive names, a quoted value
/// allowed); a malformed `max-age` is ignored, as RFC 9111 asks.
fn parse_cache_control(value: &str) -> Directive {
    let mut max_age = None;
    for part in value.split(',') {
        let part = part.trim();
        let (name, arg) = match part.split_once('=') {
            Some((name, arg)) => (name.trim(), Some(arg.trim().trim_matches('"'))),
            None => (part, None),
        };
        if name.eq_ignore_ascii_case("no-store") || name.eq_ignore_ascii_case("no-cache") {
            return Directive::NoCache;
        }
        if name.eq_ignore_ascii_case("max-age")
            && let Some(secs) = arg.and_then(|a| a.parse::<u64>().ok())
        {
            max_age = Some(max_age.map_or(secs, |m: u64| m.min(secs)));
        }
    }
    max_age.map_or(Directive::None, Directive::MaxAge)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn at(secs: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_795_348_800 + secs).unwrap()
    }

    #[test]
    fn an_empty_cache_fetches() {
        let cache = KeySetCache::default();
        assert_eq!(cache.before_use(at(0)), NextFetch::Fetch);
        assert_eq!(cache.fetched_at(), None);
    }

    #[test]
    fn max_age_decides_freshness_within_bounds() {
        let mut cache = KeySetCache::default();
        cache.fetched(at(0), Some("public, max-age=300"));
        assert_eq!(cache.before_use(at(299)), NextFetch::UseCached);
        assert_eq!(cache.before_use(at(300)), NextFetch::Fetch);
        cache.fetched(at(0), Some("Max-Age=\"60\""));
        assert!(cache.is_fresh_at(at(59)) && !cache.is_fresh_at(at(60)));
        // Far too long is cut to a day; nothing, or nonsense, gives the default.
        cache.fetched(at(0), Some("max-age=99999999999"));
        assert!(cache.is_fresh_at(at(86_399)) && !cache.is_fresh_at(at(86_400)));
        for header in [
            None,
            Some("public"),
            Some("max-age=soon"),
            Some("max-age=-5"),
        ] {
            cache.fetched(at(0), header);
            assert!(cache.is_fresh_at(at(299)), "{header:?}");
            assert!(!cache.is_fresh_at(at(300)), "{header:?}");
        }
        for header in ["no-store", "max-age=300, no-cache"] {
            cache.fetched(at(0), Some(header));
            assert_eq!(cache.before_use(at(0)), NextFetch::Fetch, "{header}");
        }
        // Two max-age: the shorter.
        cache.fetched(at(0), Some("max-age=100, max-age=10"));
        assert!(!cache.is_fresh_at(at(10)));
    }

    #[test]
    fn unknown_kids_fetch_at_most_once_an_interval() {
        let mut cache = KeySetCache::default();
        cache.fetched(at(0), None);
        assert_eq!(cache.unknown_kid(at(1)), NextFetch::Fetch);
        // A storm of garbage kids: no fetch until the interval has passed.
        for s in 1..31 {
            assert_eq!(cache.unknown_kid(at(s)), NextFetch::UseCached, "{s}");
        }
        assert_eq!(cache.unknown_kid(at(31)), NextFetch::Fetch);
        assert_eq!(cache.unknown_kid(at(32)), NextFetch::UseCached);
        // A clock that went back does not block fetching for ever.
        assert_eq!(cache.unknown_kid(at(-100)), NextFetch::Fetch);
    }
}
